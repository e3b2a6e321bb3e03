#!/usr/bin/env python3
"""docs/figures/table-sweep.svg from `kvmeter table` of a sweep (bench/table-figure.sh makes
both). The four lines from `t = pd.read_csv` on, with the import, are docs/table.md's
five-line pandas example (the file name aside)."""
import sys

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402

table_csv, out = sys.argv[1], sys.argv[2]

t = pd.read_csv(table_csv)
run = t[(t.phase == "run") & t.operation.isin(["READ", "UPDATE"])]
p99 = run.groupby(["threads", "operation"])["latency_p99_us"].median().unstack()
ax = p99.plot(marker="o", xticks=p99.index, ylabel="p99 latency (µs), median of 3 runs")
ax.set_title("RocksDB, workload A, 10,000 records, 3 s runs (2-core VM)")
ax.figure.savefig(out, metadata={"Date": None})
