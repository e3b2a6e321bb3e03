#!/usr/bin/env bash
# papers/002's replication and crash figures on this machine, every member on loopback and
# sharing its CPUs with kvmeter (say so next to every figure):
#   rf        update-only throughput against the replication factor (Redis replicas 0..3),
#             without and with WAIT for every replica (wait_replicas = replicas)
#   etcd      etcd 3 members, leader SIGKILLed at 4 s, restarted 2 s later: unavailability
#             and time to recover, REPS repetitions
#   sentinel  Redis primary + 2 replicas + 3 Sentinels, primary SIGKILLed: failover
#   cluster   Redis Cluster 3 masters + 1 replica each, master:1 SIGKILLed: the victim's keys'
#             unavailability against the others' latency
#   servers   throughput against the number of Redis Cluster masters and client threads
#             (kvmeter sweep over store-opt.cluster and threads), workload A
#   aof       Redis with AOF (everysec), N keys loaded, server SIGKILLed and restarted: time
#             until it answers again (loading the AOF), for N = 100k and 1M
#   bench/faults.sh [case ...]   run directories under kvmeter-runs/bench-faults-<date>/<case>/
#                                (not kept in git); the printed lines are what BENCHMARKS.md
#                                quotes, saved in bench/results/<date>-faults.txt
set -euo pipefail
cd "$(dirname "$0")/.."
K=${K:-target/release/kvmeter}
REPS=${REPS:-5}
OUT=${OUT:-kvmeter-runs/bench-faults-$(date -u +%Y-%m-%d)}
CASES=${*:-rf etcd sentinel cluster servers aof}
mkdir -p "$OUT"
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

for c in $CASES; do
  case $c in
  rf)
    for k in 0 1 2 3; do
      for w in $(printf '%s\n' 0 "$k" | sort -u); do
        d="$OUT/rf/r$k-w$w"
        rm -rf "$d"
        $K sweep --store redis --store-opt replicas=$k --param store-opt.wait_replicas=$w \
          -P workloada -p readproportion=0 -p updateproportion=1 --records 10000 \
          --threads 2 --duration 10s --warmup 2s --repeat 3 --out "$d" >/dev/null 2>&1
        printf 'rf\treplicas=%s\twait=%s\t%s\n' "$k" "$w" \
          "$(python3 -c "import json; d=json.load(open('$d/sweep.json')); m=d['points'][0]['phases']['run']['throughput_ops_per_s']; print('%.0f ± %.0f ops/s (n=%d)' % (m['mean'], m['stddev'] or 0, m['n']))")"
      done
    done
    ;;
  etcd)
    for i in $(seq 1 "$REPS"); do
      d="$OUT/etcd/$i"
      rm -rf "$d"
      $K run --store etcd --store-opt members=3 --records 1000 --threads 2 --duration 14s \
        --fault at=4s,kill=leader,restart_after=2s --out "$d" >/dev/null 2>&1
      printf 'etcd\t%s\t%s\n' "$i" "$(field "$d/summary.json" "'unavailable %.2f s, new leader after %.2f s, recovered after %s s, before %.0f ops/s' % (d['phases'][-1]['faults'][0]['unavailable_s'], d['phases'][-1]['faults'][0]['cluster_reported_after_s'] or -1, d['phases'][-1]['faults'][0]['recovered_after_s'], d['phases'][-1]['faults'][0]['before_ops_per_s'])")"
    done
    ;;
  sentinel)
    for i in $(seq 1 3); do
      d="$OUT/sentinel/$i"
      rm -rf "$d"
      $K run --store redis --store-opt replicas=2 --store-opt sentinels=3 -P workloada \
        --records 10000 --threads 2 --duration 14s --fault at=4s,kill=primary --out "$d" >/dev/null 2>&1
      printf 'sentinel\t%s\t%s\n' "$i" "$(field "$d/summary.json" "'unavailable %.2f s, Sentinels named a new primary after %.2f s, recovered after %s s' % (d['phases'][-1]['faults'][0]['unavailable_s'], d['phases'][-1]['faults'][0]['cluster_reported_after_s'] or -1, d['phases'][-1]['faults'][0]['recovered_after_s'])")"
    done
    ;;
  cluster)
    for i in $(seq 1 3); do
      d="$OUT/cluster/$i"
      rm -rf "$d"
      $K run --store redis --store-opt cluster=3 --store-opt cluster_replicas=1 -P workloada \
        --records 10000 --threads 2 --duration 14s --fault at=4s,kill=master:1 --out "$d" >/dev/null 2>&1
      printf 'cluster\t%s\t%s\n' "$i" "$(field "$d/summary.json" "(lambda f: 'victim keys unavailable %.2f s; others p50 %.0f -> %.0f us, p99 %.0f -> %.0f us during recovery' % (f['unavailable_s'], f['latency_before']['p50_us'], f['latency_during_recovery']['p50_us'], f['latency_before']['p99_us'], f['latency_during_recovery']['p99_us']))(d['phases'][-1]['faults'][0])")"
    done
    ;;
  servers)
    d="$OUT/servers"
    rm -rf "$d"
    $K sweep --store redis --param store-opt.cluster=3,6 --param threads=1,2,4 -P workloada \
      --records 10000 --duration 8s --warmup 2s --repeat 2 --out "$d" >/dev/null 2>&1
    python3 -c "
import json; d=json.load(open('$d/sweep.json'))
for p in d['points']:
    m=p['phases']['run']['throughput_ops_per_s']
    print('servers\t%s\t%.0f ± %.0f ops/s (n=%d)' % (' '.join('%s=%s' % kv for kv in p['params'].items()), m['mean'], m['stddev'] or 0, m['n']))"
    ;;
  aof)
    for n in 100000 1000000; do
      d="$OUT/aof/$n"
      rm -rf "$d"
      $K run --store redis --store-opt persistence=aof --phase both -P workloadc --records $n \
        --threads 2 --duration 40s --fault at=5s,kill=primary,restart_after=1s --out "$d" >/dev/null 2>&1
      printf 'aof\t%s keys\t%s\n' "$n" "$(field "$d/summary.json" "(lambda p: 'restarted server answered: %s; unavailable %.2f s' % ([e['cluster'].split('; ')[-1] for e in p['fault_events'] if e['event']=='answered'], p['faults'][0]['unavailable_s']))(d['phases'][-1])")"
    done
    ;;
  *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
