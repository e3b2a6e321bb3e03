#!/usr/bin/env bash
# The null store's scaling on this host, with controls: 16 separate one-thread processes (no
# memory shared between them: the machine's own ceiling), 15 threads, 16 threads without the
# telemetry sampler. Prints case rep ops/s.
K=${K:-target/release/kvmeter}
T=$(mktemp -d)
tput() { python3 -c 'import json,sys; s=json.load(open(sys.argv[1]+"/summary.json")); print(round([p for p in s["phases"] if p["name"]=="run"][0]["throughput_ops_per_s"]))' "$1"; }
one() { "$K" run -P workloadc --store null --phase run --ops 0 --duration 5s "$@" >/dev/null 2>&1; }
for rep in 1 2 3; do
  one --threads 1 --out $T/a$rep; echo "t1 $rep $(tput $T/a$rep)"
  one --threads 16 --out $T/b$rep; echo "t16 $rep $(tput $T/b$rep)"
  one --threads 16 --telemetry-interval 0 --out $T/c$rep; echo "t16-notelemetry $rep $(tput $T/c$rep)"
  one --threads 15 --out $T/d$rep; echo "t15 $rep $(tput $T/d$rep)"
  for i in $(seq 0 15); do one --threads 1 --out $T/p$rep-$i & done; wait
  s=0; for i in $(seq 0 15); do s=$((s + $(tput $T/p$rep-$i))); done; echo "p16x1 $rep $s"
  for i in $(seq 0 15); do taskset -c $i "$K" run -P workloadc --store null --phase run --ops 0 --duration 5s --threads 1 --out $T/q$rep-$i >/dev/null 2>&1 & done; wait
  s=0; for i in $(seq 0 15); do s=$((s + $(tput $T/q$rep-$i))); done; echo "p16x1-pinned $rep $s"
done
rm -rf $T
