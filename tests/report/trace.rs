//! `kvmeter trace stats` end to end on traces this file generates with known ground truth, in
//! each format kvmeter reads (Twitter CSV, also zstd-compressed; RocksDB's human-readable
//! trace; cachebench's CSV with op_count repeats; Redis MONITOR): the counts per op and kind,
//! distinct keys, the rate per second and the size percentiles equal what the test computed
//! (percentiles by nearest rank, computed here by sorting); a Zipf trace (this file's own
//! generator, α = 0.99 over 1000 keys) fits α within ±0.1; a bad or truncated line is one
//! `file:line: what`, exit 2, nothing created, or counted with --skip-bad.

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// splitmix64: the test's own deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Runs `trace stats` with `args` and --out DIR; returns stats.json.
fn stats(trace: &Path, out: &Path, extra: &[&str]) -> Value {
    let o = kvmeter()
        .args(["trace", "stats"])
        .arg(trace)
        .args(extra)
        .arg("--out")
        .arg(out)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    json(&out.join("stats.json"))
}

/// Nearest-rank percentile: the ⌈q·n⌉-th smallest (the first for q = 0).
fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let k = ((q * sorted.len() as f64).ceil() as usize).max(1);
    sorted[k - 1]
}

fn check_sizes(v: &Value, mut sizes: Vec<u64>, what: &str) {
    sizes.sort_unstable();
    assert_eq!(v["n"], sizes.len() as u64, "{what}");
    for (name, q) in [
        ("min", 0.0),
        ("p50", 0.5),
        ("p90", 0.9),
        ("p99", 0.99),
        ("max", 1.0),
    ] {
        assert_eq!(v[name], nearest_rank(&sizes, q), "{what} {name}");
    }
    assert_eq!(v["rounded_to"], 1, "{what}");
}

fn counts(v: &Value) -> BTreeMap<String, u64> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

#[test]
fn twitter_trace_stats_equal_the_generated_truth_plain_and_zstd() {
    let t = tempfile::tempdir().unwrap();
    let mut r = Rng(7);
    let (mut text, mut per_sec) = (String::new(), vec![]);
    let (mut ops, mut kinds) = (
        BTreeMap::<String, u64>::new(),
        BTreeMap::<String, u64>::new(),
    );
    let (mut keys, mut ksizes, mut vsizes) = (HashSet::new(), vec![], vec![]);
    let names = [
        ("get", "read"),
        ("gets", "read"),
        ("set", "write"),
        ("delete", "delete"),
        ("incr", "unreplayable"),
    ];
    for s in 0..20u64 {
        let n = 30 + 11 * s; // a ramp: every second's count differs
        per_sec.push(n);
        for _ in 0..n {
            let key = format!("k{}", r.below(500));
            let (op, kind) = names[r.below(5) as usize];
            let v = 1 + r.below(3000);
            text += &format!(
                "{},{key},{},{v},{},{op},0\n",
                1_600_000_000 + s,
                key.len(),
                r.below(4)
            );
            *ops.entry(op.into()).or_default() += 1;
            *kinds.entry(kind.into()).or_default() += 1;
            ksizes.push(key.len() as u64);
            if kind == "write" {
                vsizes.push(v);
            }
            keys.insert(key);
        }
    }
    let plain = t.path().join("cluster.csv");
    std::fs::write(&plain, &text).unwrap();
    let zst = t.path().join("cluster.csv.zst");
    std::fs::write(&zst, zstd::stream::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
    let records: u64 = per_sec.iter().sum();
    for (trace, out) in [(&plain, "plain"), (&zst, "zst")] {
        let out = t.path().join(out);
        let s = stats(trace, &out, &[]); // the format told from the first lines
        assert_eq!(s["format"], "twitter");
        assert_eq!(s["records"], records);
        assert_eq!(s["duration_s"], 19.0);
        // The mean over the 20 whole seconds the trace spans.
        assert_eq!(s["rate"]["mean_per_s"], records as f64 / 20.0);
        assert_eq!(s["whole_second_times"], true);
        assert_eq!(counts(&s["ops"]), ops);
        assert_eq!(counts(&s["kinds"]), kinds);
        assert_eq!(s["keys"]["distinct"], keys.len() as u64);
        assert_eq!(s["keys"]["distinct_is_lower_bound"], false);
        check_sizes(&s["key_size"], ksizes.clone(), "key size");
        check_sizes(&s["value_size_of_writes"], vsizes.clone(), "value size");
        let csv = std::fs::read_to_string(out.join("rate.csv")).unwrap();
        let got: Vec<u64> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap().parse().unwrap())
            .collect();
        assert_eq!(got, per_sec);
        assert_eq!(
            s["rate"]["peak_per_s"],
            *per_sec.iter().max().unwrap() as f64
        );
        for f in ["figures/rate.svg", "figures/ops.svg"] {
            let svg = std::fs::read_to_string(out.join(f)).unwrap();
            assert!(svg.starts_with("<svg") && svg.contains("</svg>"), "{f}");
        }
    }
}

#[test]
fn rocksdb_cachebench_and_monitor_traces_count_what_they_hold() {
    let t = tempfile::tempdir().unwrap();
    let hex = |k: &str| -> String { k.bytes().map(|b| format!("{b:02X}")).collect() };
    // RocksDB (trace_analyzer writes the hex key first); 10 records a second for 3 s.
    let names = [
        "get",
        "put",
        "delete",
        "single_delete",
        "range_delete",
        "merge",
        "iterator_Seek",
        "iterator_SeekForPrev",
    ];
    let mut text = String::new();
    let mut ops = BTreeMap::<String, u64>::new();
    for i in 0..30u64 {
        let ty = (i % 8) as usize;
        let time = 1_600_000_000_000_000 + i / 10 * 1_000_000 + i;
        text += &format!(
            "0x{} {ty} 0 {} {time}\n",
            hex(&format!("key{}", i % 7)),
            10 * ty
        );
        *ops.entry(names[ty].into()).or_default() += 1;
    }
    let p = t.path().join("human_readable_trace.txt");
    std::fs::write(&p, &text).unwrap();
    let s = stats(&p, &t.path().join("r"), &["--format", "rocksdb"]);
    assert_eq!(
        (s["records"].as_u64(), s["keys"]["distinct"].as_u64()),
        (Some(30), Some(7))
    );
    assert_eq!(counts(&s["ops"]), ops);
    // get 4 (i%8==0: 0,8,16,24), delete+single_delete 4+4, put 4, seek 4, the rest 10.
    let kinds = counts(&s["kinds"]);
    assert_eq!(kinds["read"], 4);
    assert_eq!(kinds["write"], 4);
    assert_eq!(kinds["delete"], 8);
    assert_eq!(kinds["scan"], 3); // i = 6, 14, 22
    assert_eq!(kinds["unreplayable"], 11);
    let rate: Vec<String> = std::fs::read_to_string(t.path().join("r/rate.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(2).unwrap().to_string())
        .collect();
    assert_eq!(rate, ["10", "10", "10"]);

    // cachebench: each line stands for op_count requests.
    let mut text = String::from("op_time,key,key_size,op,op_count,size,cache_hits,ttl\n");
    let mut want = BTreeMap::<String, u64>::new();
    for i in 0..12u64 {
        let op = ["GET", "SET", "DELETE", "GET_LEASE"][i as usize % 4];
        let n = 1 + i % 5;
        text += &format!(
            "{},{:x},16,{op},{n},{},0,0\n",
            1000 + 250 * i,
            0xabc0 + i % 3,
            100 + i
        );
        *want.entry(op.into()).or_default() += n;
    }
    let p = t.path().join("kvcache.csv");
    std::fs::write(&p, &text).unwrap();
    let s = stats(&p, &t.path().join("c"), &[]);
    assert_eq!(s["format"], "cachebench");
    assert_eq!(counts(&s["ops"]), want);
    assert_eq!(s["records"], want.values().sum::<u64>());
    assert_eq!(s["keys"]["distinct"], 3);
    assert_eq!(s["duration_s"], 2.75); // op_time in ms: 1000 to 3750

    // Redis MONITOR, with the OK it prints first and escaped arguments.
    let text = concat!(
        "OK\n",
        "1700000000.000001 [0 127.0.0.1:51234] \"SET\" \"user:1\" \"abc\\\"de\"\n",
        "1700000000.500000 [0 127.0.0.1:51234] \"get\" \"user:1\"\n",
        "1700000001.250000 [0 lua] \"HSET\" \"h\\x01\" \"f\" \"0123456789\"\n",
        "1700000001.750000 [0 127.0.0.1:51234] \"DEL\" \"user:1\"\n",
        "1700000002.000001 [0 127.0.0.1:51234] \"PING\"\n",
    );
    let p = t.path().join("monitor.log");
    std::fs::write(&p, text).unwrap();
    let s = stats(&p, &t.path().join("m"), &[]);
    assert_eq!(s["format"], "monitor");
    assert_eq!(s["records"], 5);
    assert_eq!(
        counts(&s["ops"]),
        BTreeMap::from([
            ("DEL".into(), 1),
            ("GET".into(), 1),
            ("HSET".into(), 1),
            ("PING".into(), 1),
            ("SET".into(), 1)
        ])
    );
    assert_eq!(s["keys"]["distinct"], 2);
    assert_eq!(s["duration_s"], 2.0);
    check_sizes(&s["value_size_of_writes"], vec![6, 10], "monitor values");
}

#[test]
fn a_zipf_trace_fits_its_alpha() {
    // The test's own Zipf generator: inverse CDF over ranks 1..=1000, weights r^-0.99.
    let (n_keys, alpha) = (1000usize, 0.99f64);
    let mut cdf = Vec::with_capacity(n_keys);
    let mut sum = 0.0;
    for r in 1..=n_keys {
        sum += (r as f64).powf(-alpha);
        cdf.push(sum);
    }
    let mut rng = Rng(42);
    let mut text = String::new();
    for i in 0..300_000u64 {
        let u = rng.unit() * sum;
        let rank = cdf.partition_point(|&c| c < u).min(n_keys - 1);
        text += &format!("{},key{rank},7,10,0,get,0\n", i / 10_000);
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("zipf.csv");
    std::fs::write(&p, text).unwrap();
    let s = stats(&p, &t.path().join("z"), &["--format", "twitter"]);
    let fit = &s["keys"]["zipf_fit"];
    let a = fit["alpha"].as_f64().unwrap();
    assert!(
        (a - alpha).abs() <= 0.1,
        "fitted α {a}, generated {alpha}: {fit}"
    );
    assert!(fit["r2"].as_f64().unwrap() > 0.9, "{fit}");
    assert_eq!(s["keys"]["distinct"], 1000);
}

#[test]
fn bad_lines_name_file_and_line_exit_2_create_nothing_or_are_counted() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("bad.csv");
    std::fs::write(
        &p,
        "1,a,1,10,0,get,0\n2,b,1,x,0,set,0\n3,c,1,10,0,get,0\n4,d,1\n",
    )
    .unwrap();
    let out = t.path().join("o");
    let o = kvmeter()
        .args(["trace", "stats"])
        .arg(&p)
        .args(["--format", "twitter", "--out"])
        .arg(&out)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("{}:2: value size \"x\"", p.display())),
        "{err}"
    );
    assert!(!out.exists());
    // A truncated MONITOR line (its closing quote cut off) names its line too.
    let m = t.path().join("m.log");
    std::fs::write(
        &m,
        "OK\n1.0 [0 a] \"GET\" \"k\"\n1.5 [0 a] \"SET\" \"k\" \"v",
    )
    .unwrap();
    let o = kvmeter()
        .args(["trace", "stats"])
        .arg(&m)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{}:3: ", m.display())) && err.contains("truncated"),
        "{err}"
    );
    // --skip-bad counts them.
    let s = stats(&p, &out, &["--format", "twitter", "--skip-bad"]);
    assert_eq!(
        (s["records"].as_u64(), s["bad_lines"].as_u64()),
        (Some(2), Some(2))
    );
    // An existing --out is refused before anything is read.
    let o = kvmeter()
        .args(["trace", "stats"])
        .arg(&p)
        .arg("--out")
        .arg(&out)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    // Past the key cap the distinct count is a lower bound.
    let s = stats(
        &p,
        &t.path().join("cap"),
        &["--format", "twitter", "--skip-bad", "--key-cap", "1"],
    );
    assert_eq!(
        (
            s["keys"]["distinct"].as_u64(),
            s["keys"]["distinct_is_lower_bound"].as_bool()
        ),
        (Some(1), Some(true))
    );
}
