#!/usr/bin/env bash
# Issue 33's "real processes" goal: N real `kvmeter agent` processes on this machine (1 thread,
# 1 connection each) against one memcached, coordinated through a real etcd, reports pushed to
# the coordinator (--reports auto, the default). Checks the merge is exact: merged operations =
# the sum of the agents' own = memcached's own `stats` counts. Prints one line of figures.
#
#   KVMETER=target/release/kvmeter N=32 DUR=20s RATE=3200 bench/dist-real.sh
#
# Everything shares this host's CPUs (etcd, memcached, N agents, the coordinator): the figure is
# the coordination and merge at N processes, not a load test.
set -euo pipefail
KVMETER=${KVMETER:-target/release/kvmeter}
N=${N:-32}
DUR=${DUR:-20s}
RATE=${RATE:-3200}
INTERVAL=${INTERVAL:-1s}
MODE=${MODE:-auto}
OUT=${OUT:-bench/results/dist-real/$(date -u +%Y%m%dT%H%M%SZ)-n$N-$MODE}
KVMETER=$(readlink -f "$KVMETER")
mkdir -p "$OUT"
OUT=$(readlink -f "$OUT")
W=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(port); PP=$(port); MP=$(port)
etcd --data-dir "$W/etcd" --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
  --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "default=http://127.0.0.1:$PP" > "$W/etcd.log" 2>&1 &
pids+=($!)
memcached -p "$MP" -U 0 -t 2 -c 4096 -u nobody > "$W/mc.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf -XPOST "http://127.0.0.1:$EP/v3/kv/range" -d '{"key":"AA=="}' >/dev/null 2>&1 && (exec 3<>"/dev/tcp/127.0.0.1/$MP") 2>/dev/null && break
  sleep 0.1
done
status() { curl -s -XPOST "http://127.0.0.1:$EP/v3/maintenance/status" -d '{}'; }
REV0=$(status | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
export KVMETER_PLAN_KEY=$(head -c 32 /dev/urandom | base64)
COORD=http://127.0.0.1:$EP
"$KVMETER" dist run --coord "$COORD" --job real --agents "$N" --out "$OUT/merged" --reports "$MODE" \
  --register-timeout 120s --lease-ttl 20s \
  --store memcached --store-opt "addr=127.0.0.1:$MP" -P workloada --records ${RECORDS:-2000} --threads 1 \
  --duration "$DUR" --target "$RATE" --interval "$INTERVAL" --telemetry-interval 0 > "$OUT/coord.log" 2>&1 &
C=$!
pids+=($C)
for i in $(seq 0 $((N - 1))); do
  "$KVMETER" agent --coord "$COORD" --job real --index "$i" --out "$OUT/agent$i" --wait 60s > "$OUT/agent$i.log" 2>&1 &
  pids+=($!)
done
START=$(date +%s.%N)
wait "$C" && CODE=0 || CODE=$?
END=$(date +%s.%N)
sleep 1
REV1=$(status | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
python3 - "$MP" > "$W/stats.txt" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"stats\r\n")
b = b""
while not b.endswith(b"END\r\n"):
    c = s.recv(65536)
    if not c:
        break
    b += c
print(b.decode())
PY
python3 - "$OUT" "$N" "$CODE" "$REV0" "$REV1" "$W/stats.txt" "$START" "$END" <<'PY'
import json, sys, os
out, n, code, rev0, rev1, stats, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], float(sys.argv[7]), float(sys.argv[8])
m = json.load(open(f"{out}/merged/summary.json"))
info = json.load(open(f"{out}/merged/dist.json"))
st = {}
for l in open(stats):
    f = l.split()
    if len(f) == 3 and f[0] == "STAT":
        try: st[f[1]] = int(f[2])
        except ValueError: pass
def ops(s):
    c = {}
    for p in s["phases"]:
        for op, v in p["ops"].items():
            if op in ("READ", "UPDATE", "INSERT"):
                c[op] = c.get(op, 0) + v["count"]
            if op == "UPDATE":
                # An update of a key not there (not loaded) reads and does not set.
                c["UPDATE_not_found"] = c.get("UPDATE_not_found", 0) + v.get("errors", {}).get("not_found", 0)
    return c
merged = ops(m)
agents = {}
for i in range(n):
    for op, v in ops(json.load(open(f"{out}/agent{i}/summary.json"))).items():
        agents[op] = agents.get(op, 0) + v
exact = merged == agents and merged.get("READ", 0) + merged.get("UPDATE", 0) == st.get("cmd_get") \
    and merged.get("INSERT", 0) + merged.get("UPDATE", 0) - merged.get("UPDATE_not_found", 0) == st.get("cmd_set")
print(json.dumps({
    "agents": n, "exit": code, "status": m["status"], "reports": info.get("reports"),
    "reports_via_etcd": len(info.get("reports_via_etcd", [])),
    "merged_ops": merged, "agents_ops": agents,
    "memcached": {"cmd_get": st.get("cmd_get"), "cmd_set": st.get("cmd_set")},
    "exact": exact, "lost": len(info["lost"]), "etcd_revisions_added": rev1 - rev0,
    "start_skew_ms": [p["start_skew_ms"] for p in info["phases"]],
    "wall_s": round(t1 - t0, 1),
}))
PY
