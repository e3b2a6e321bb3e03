#!/bin/bash
# A/B: telemetry's server sampling, old (one pid) vs new (every member summed)
cd /tmp/ab
for r in 1 2 3 4 5; do
  for v in old new; do
    rm -rf /tmp/ab/mc-$v-$r
    /tmp/kvmeter-$v run -P workloadc --store memcached --records 1000 --threads 1 --duration 8s --out /tmp/ab/mc-$v-$r > /dev/null 2>&1
    python3 - "$v" "$r" <<'PY'
import json,sys
s=json.load(open(f'/tmp/ab/mc-{sys.argv[1]}-{sys.argv[2]}/summary.json'))
p=[p for p in s['phases'] if p['name']=='run'][0]
t=p['telemetry']
print(sys.argv[1], sys.argv[2], round(p['throughput_ops_per_s']), t['process']['cpu_pct_by_thread'].get('kvm-telemetry'), round(t['process']['cpu_pct'],1), t.get('server',{}).get('processes'), round(t.get('server',{}).get('cpu_pct',0),1))
PY
  done
done
