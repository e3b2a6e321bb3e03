for i in $(seq 1 12); do for v in old new2; do
  d=/tmp/abr/$v-$i; /tmp/kvmeter-$v run -P workloadc -p fieldcount=1 -p fieldlength=1000 -p requestdistribution=uniform --records 100000 --ops 2000000 --phase run --store-opt block_cache_mb=256 --store-opt compression=none --store-opt bloom_bits=0 --data-dir /tmp/rdb --out $d >/dev/null 2>&1
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]+"/summary.json")); print(sys.argv[2], round(s["phases"][0]["throughput_ops_per_s"]))' $d $v
done; done
