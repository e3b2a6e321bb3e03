#!/bin/bash
# kvmeter agents on a list of hosts with pdsh (docs/distributed.md): the index is each host's
# position in the list, the count its length. The coordinator runs here.
#
#   KVMETER_COORD=http://etcd-host:2379 deploy/pdsh-agents.sh client1 client2 client3 client4
#
# The plan key (docs/distributed.md "Security"): the same file, mode 600, at
# KVMETER_PLAN_KEY_FILE (default ~/.kvmeter/plan.key) here and on every host.
# A secured etcd (docs/distributed.md, "Securing etcd"): https:// in KVMETER_COORD and the TLS
# and auth flags in KVMETER_COORD_FLAGS, with files at the same paths on every host (pdsh does
# not pass the environment on, so the password comes from a file there), e.g.
#   KVMETER_COORD=https://etcd-host:2379 KVMETER_COORD_FLAGS="--coord-ca /etc/kvmeter/ca.pem
#     --coord-cert /etc/kvmeter/client.pem --coord-key /etc/kvmeter/client.key
#     --coord-user kvmeter --coord-password-file /etc/kvmeter/etcd-password"
set -euo pipefail
: "${KVMETER_COORD:?set KVMETER_COORD to the etcd client URL, e.g. http://etcd-host:2379}"
[ $# -ge 1 ] || { echo "usage: $0 HOST..." >&2; exit 2; }
HOSTS=("$@")
N=${#HOSTS[@]}
JOB="pdsh-$(date +%Y%m%dT%H%M%S)"
KEY="${KVMETER_PLAN_KEY_FILE:-$HOME/.kvmeter/plan.key}"
read -r -a COORD_FLAGS <<< "${KVMETER_COORD_FLAGS:-}"

kvmeter dist run --coord "$KVMETER_COORD" "${COORD_FLAGS[@]}" --job "$JOB" --agents "$N" --plan-key-file "$KEY" \
    --out "kvmeter-runs/$JOB-merged" \
    --store memcached --store-opt addr=memcached-host:11211 -P workloadc --threads 4 --duration 60s &
coordinator=$!

# The one pdsh line: each host finds its own index in the list it is given.
pdsh -w "$(IFS=,; echo "${HOSTS[*]}")" \
    "i=0; for h in ${HOSTS[*]}; do [ \"\$h\" = \"\$(hostname -s)\" ] && break; i=\$((i+1)); done; \
     kvmeter agent --coord $KVMETER_COORD ${KVMETER_COORD_FLAGS:-} --job $JOB --plan-key-file $KEY --index \$i --count $N --out kvmeter-runs/$JOB-agent-\$i"

wait "$coordinator"
