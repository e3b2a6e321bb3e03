#!/usr/bin/env bash
# Distributed runs on this machine (docs/distributed.md): every agent, the coordinator, etcd and
# the server are processes on loopback sharing its 2 vCPUs, unpinned (say so next to every
# figure).
#   overhead  one agent under coordination against the same run standalone (kvmeter run),
#             memcached and Redis, REPS interleaved rounds: the cost of coordinating
#   scale     memcached and Redis throughput with 1, 2, 4 agents of 2 threads each; the start
#             skew across agents and the bytes of one interval report sent to etcd
#   bench/dist.sh [case ...]   run directories under kvmeter-runs/bench-dist-<date>/ (not in git)
set -euo pipefail
cd "$(dirname "$0")/.."
K=${K:-target/release/kvmeter}
REPS=${REPS:-3}
DUR=${DUR:-10s}
OUT=${OUT:-kvmeter-runs/bench-dist-$(date -u +%Y-%m-%d)}
CASES=${*:-overhead scale}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(port); PP=$(port); MP=$(port); RP=$(port)
etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
  --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "default=http://127.0.0.1:$PP" >"$tmp/etcd.log" 2>&1 & pids+=($!)
memcached -u root -l 127.0.0.1 -p "$MP" -t 2 -U 0 >"$tmp/mc.log" 2>&1 & pids+=($!)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 & pids+=($!)
sleep 2
COORD="http://127.0.0.1:$EP"
addr() { case $1 in memcached) echo "127.0.0.1:$MP";; redis) echo "127.0.0.1:$RP";; esac; }
args() { echo "--store $1 --store-opt addr=$(addr "$1") -P workloadc --records 10000 --threads 2 --duration $DUR --warmup 2s --telemetry-interval 0"; }
ops() { python3 -c "import json,sys; p=[p for p in json.load(open(sys.argv[1]))['phases'] if p['name']=='run'][0]; print('%.0f' % p['throughput_ops_per_s'])" "$1"; }
# dist STORE N DIR: a coordinator and N agents; waits for all.
dist() {
  local store=$1 n=$2 d=$3 job="bench-$RANDOM$RANDOM"
  rm -rf "$d"; mkdir -p "$d"
  # shellcheck disable=SC2046
  $K dist run --coord "$COORD" --job "$job" --agents "$n" --out "$d/merged" $(args "$store") >"$d/coord.log" 2>&1 &
  local c=$! agents=()
  for i in $(seq 0 $((n - 1))); do
    $K agent --coord "$COORD" --job "$job" --index "$i" --out "$d/agent$i" >"$d/agent$i.log" 2>&1 &
    agents+=($!)
  done
  wait "$c" "${agents[@]}"
}
for c in $CASES; do
  case $c in
  overhead)
    for store in memcached redis; do
      for r in $(seq 1 "$REPS"); do
        d="$OUT/overhead/$store-standalone-$r"; rm -rf "$d"
        # shellcheck disable=SC2046
        $K run --out "$d" $(args "$store") >/dev/null 2>&1
        s=$(ops "$d/summary.json")
        d="$OUT/overhead/$store-coordinated-$r"
        dist "$store" 1 "$d"
        a=$(ops "$d/merged/summary.json")
        printf 'overhead\t%s\tround %s\tstandalone %s ops/s\tone agent coordinated %s ops/s\tratio %s\n' \
          "$store" "$r" "$s" "$a" "$(python3 -c "print('%.3f' % ($a/$s))")"
      done
    done
    ;;
  scale)
    for store in memcached redis; do
      for n in 1 2 4; do
        d="$OUT/scale/$store-$n"
        dist "$store" "$n" "$d"
        python3 - "$d" "$store" "$n" <<'PY'
import json, sys
d, store, n = sys.argv[1:]
s = json.load(open(f"{d}/merged/summary.json"))
info = json.load(open(f"{d}/merged/dist.json"))
run = [p for p in s["phases"] if p["name"] == "run"][0]
skew = max(p["start_skew_ms"] for p in info["phases"])
print(f"scale\t{store}\tagents={n}\t{run['throughput_ops_per_s']:.0f} ops/s\tp99 {run['all_ops']['latency_us']['p99']:.0f} us\t"
      f"threads {run['threads']}\tstart skew {skew:.3f} ms\t{info['bytes_per_interval_report']:.0f} B per interval report\tstatus {s['status']}")
PY
      done
    done
    ;;
  esac
done
