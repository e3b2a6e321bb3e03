#!/usr/bin/env python3
"""A Twitter-format cache trace with known ground truth, for EXPERIMENTS.md's replay entry.

20 s; the rate follows 1,000 + 1,000·sin(π·s/20) records per second (1,000 → 2,000 → 1,000);
5,000 keys drawn Zipf(0.9); 80 % get, 15 % set, 4 % delete, 1 % incr (not replayed); set
value sizes lognormal(5.5, 0.8) bytes. Seeded: the same file every time.
Usage: bench/gen-twitter-trace.py OUT.csv
"""
import bisect
import math
import random
import sys

random.seed(32)
KEYS, ALPHA = 5000, 0.9
weights = [1 / (i + 1) ** ALPHA for i in range(KEYS)]
total = sum(weights)
cdf, acc = [], 0.0
for w in weights:
    acc += w / total
    cdf.append(acc)
OPS = [("get", 0.80), ("set", 0.15), ("delete", 0.04), ("incr", 0.01)]
lines = []
for sec in range(20):
    for _ in range(int(1000 + 1000 * math.sin(sec / 20 * math.pi))):
        k = bisect.bisect_left(cdf, random.random())
        r, acc = random.random(), 0.0
        for name, p in OPS:
            acc += p
            if r < acc:
                break
        size = int(random.lognormvariate(5.5, 0.8))
        if name == "set":
            size = min(max(size, 1), 100000)
        elif name != "get":
            size = 0
        lines.append(f"{sec},key:{k:05d},9,{size},{random.randint(1, 20)},{name},0")
with open(sys.argv[1], "w") as f:
    f.write("\n".join(lines) + "\n")
print(len(lines), "records")
