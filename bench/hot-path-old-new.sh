#!/bin/bash
# Old binary against new, interleaved (3 rounds): null store 1 thread, RocksDB 1 thread (100k
# records loaded once), memcached GET 1 KiB through the engine at 100 and 1,000 connections
# (memcached 1.6.18 -t 4 started here). Usage: OLD=path/to/old/kvmeter bench/hot-path-old-new.sh
set -u
OLD=${OLD:?the old binary}; NEW=${NEW:-target/release/kvmeter}; NEW=$(realpath "$NEW"); OLD=$(realpath "$OLD")
W=$(mktemp -d /tmp/kvb.XXXX); cd $W
memcached -u nobody -p 21299 -l 127.0.0.1 -t 4 -c 4096 -m 1024 & MC=$!
sleep 1
$NEW run -P workloadc --phase load --store memcached --store-opt addr=127.0.0.1:21299 -p fieldcount=1 -p fieldlength=1024 -p insertorder=ordered --records 100000 --threads 2 --telemetry-interval 0 --out $W/mcload >/dev/null 2>&1
$NEW run -P workloadc --phase load --records 100000 --threads 1 --data-dir $W/rdb --telemetry-interval 0 --out $W/rload >/dev/null 2>&1
ops() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]+'/summary.json')); p=[x for x in s['phases'] if x['name']=='run'][0]; print(round(p['throughput_ops_per_s']))" $1; }
n=0
for round in 1 2 3; do
 for who in old new; do
  B=$OLD; [ $who = new ] && B=$NEW
  n=$((n+1))
  $B run -P workloadc --store null --phase run --ops 0 --duration 4s --threads 1 --telemetry-interval 0 --out $W/null-$who-$round >/dev/null 2>&1
  $B run -P workloadc --phase run --records 100000 --threads 1 --ops 0 --duration 4s --data-dir $W/rdb --telemetry-interval 0 --out $W/rdb-$who-$round >/dev/null 2>&1
  for c in 100 1000; do
  $B run -P workloadc --phase run --store memcached --store-opt addr=127.0.0.1:21299 -p fieldcount=1 -p fieldlength=1024 -p requestdistribution=uniform -p insertorder=ordered --records 100000 --ops 0 --duration 4s --connections $c --depth 1 --threads 2 --telemetry-interval 0 --out $W/mc$c-$who-$round >/dev/null 2>&1
  done
  echo "round $round $who: null $(ops $W/null-$who-$round) rocksdb $(ops $W/rdb-$who-$round) mc100 $(ops $W/mc100-$who-$round) mc1000 $(ops $W/mc1000-$who-$round)"
 done
done
kill $MC
echo "dir $W"
