#!/usr/bin/env bash
# Engine open loop, old binary against new, interleaved: a sustained rate and an overload.
cd /tmp/ab
for r in 1 2 3 4 5; do
 for b in old new; do
  for shape in sustained overload; do
   rate=20000; [[ $shape == overload ]] && rate=300000
   rm -rf run-$b-$shape-$r
   /tmp/kvmeter-$b run -P workloadc --store memcached --store-opt addr=127.0.0.1:22122 --records 1000 --phase run --connections 8 --threads 2 --rate $rate --duration 4s --out run-$b-$shape-$r >/dev/null 2>&1
   python3 - run-$b-$shape-$r $b $shape $r <<'PY'
import json,sys
s=json.load(open(sys.argv[1]+'/summary.json'))
p=[p for p in s['phases'] if p['name']=='run'][0]
po=p.get('per_op') or {}
print(sys.argv[2],sys.argv[3],sys.argv[4],round(p['throughput_ops_per_s']),po.get('cpu_us'),p['ops']['READ']['intended_latency_us']['p99'],sep='\t')
PY
  done
 done
done
