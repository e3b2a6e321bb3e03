#!/usr/bin/env python3
"""Inputs for `kvmeter table`'s memory figures (issue 41 F7, BENCHMARKS.md "kvmeter table memory").

python3 bench/table-ops320k.py RUN OUT          OUT/manifest.json and OUT/summary.json: RUN's,
    with the run phase's "ops" replaced by 320,000 copies of its READ entry named
    O000000..O319999 (floats rounded, hits/misses/hit_ratio/errors left out as an older
    kvmeter wrote them, so the file stays under the 64-MiB bound).
python3 bench/table-ops320k.py --hostile RUN OUT    RUN's manifest.json and a summary.json of
    64 MiB that is one list of {"a":0} objects.
"""
import json, os, shutil, sys

hostile = sys.argv[1] == '--hostile'
src, out = sys.argv[-2], sys.argv[-1]
os.makedirs(out, exist_ok=True)
shutil.copy(f'{src}/manifest.json', f'{out}/manifest.json')
if hostile:
    n = (64 << 20) // 8 - 100
    with open(f'{out}/summary.json', 'w') as f:
        f.write('{"schema":"kvmeter-summary/1","phases":[],"x":[')
        f.write(','.join(['{"a":0}'] * n))
        f.write(']}')
else:
    s = json.load(open(f'{src}/summary.json'))
    p = [p for p in s['phases'] if p.get('kind') == 'run'][0]
    one = p['ops']['READ']
    one['ops_per_s'] = round(one['ops_per_s'], 1)
    one['latency_us']['avg'] = round(one['latency_us']['avg'], 3)
    for k in ['hits', 'misses', 'hit_ratio', 'errors']:
        one.pop(k, None)
    p['ops'] = {f"O{i:06d}": one for i in range(320000)}
    json.dump(s, open(f'{out}/summary.json', 'w'), separators=(',', ':'))
print(os.path.getsize(f'{out}/summary.json'), 'bytes; the bound is', 64 << 20)
