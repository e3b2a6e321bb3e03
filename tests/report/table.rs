//! `kvmeter table` end to end on a real sweep (embedded RocksDB, 2 points × 2 runs): the
//! table against the sweep's own sweep.csv, every row's figures against the run's
//! summary.json read here with serde_json, the three formats against each other (Parquet read
//! back with the `parquet` crate), and bad input refused in one line with nothing created.

use crate::common;

use common::*;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Every kvmeter this file starts is killed after this (a table of a few runs takes
/// milliseconds; the sweep four times this).
const LIMIT: Duration = Duration::from_secs(60);

/// One sweep for every test of the file (made once, a second or two).
fn sweep() -> &'static Path {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("sw");
        let o = kvmeter()
            .args(["sweep", "--store", "rocksdb", "-P", "workloada"])
            .args(["--records", "200", "--ops", "2000", "--seed", "5"])
            .args(["--param", "threads=1,2", "--repeat", "2", "--out"])
            .arg(&out)
            .timeout(LIMIT * 4)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (t, out)
    })
    .1
}

/// `kvmeter table ARGS...`: its stdout, after checking it succeeded.
fn table(args: &[&str]) -> String {
    let o = kvmeter()
        .arg("table")
        .args(args)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// RFC 4180 records (quoted fields, doubled quotes), written here rather than taken from
/// kvmeter, whose reader is the code under test's sibling.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = vec![];
    let (mut row, mut field, mut quoted) = (vec![], String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    rows
}

/// The table's CSV as maps from column to text, and its header.
fn csv_rows(text: &str) -> (Vec<String>, Vec<Map<String, Value>>) {
    let mut recs = parse_csv(text);
    let header = recs.remove(0);
    let rows = recs
        .into_iter()
        .map(|r| {
            assert_eq!(r.len(), header.len());
            header
                .iter()
                .cloned()
                .zip(r.into_iter().map(Value::String))
                .collect()
        })
        .collect();
    (header, rows)
}

fn jsonl_rows(text: &str) -> Vec<Map<String, Value>> {
    text.lines()
        .map(|l| match serde_json::from_str(l).unwrap() {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        })
        .collect()
}

fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}")),
        v => v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

/// sweep.csv's mean of each metric per point and phase equals the mean of the table's `ALL`
/// rows of that point's runs, and the shared columns (the parameter, the phase) agree.
#[test]
fn a_sweeps_table_equals_its_sweep_csv_for_the_shared_columns() {
    let sw = sweep();
    let (header, rows) = csv_rows(&table(&[sw.to_str().unwrap()]));
    let sweep_csv = std::fs::read_to_string(sw.join("sweep.csv")).unwrap();
    let (sheader, srows) = csv_rows(&sweep_csv);
    assert_eq!(sheader[..3], ["point", "threads", "phase"]);
    let mut checked = std::collections::BTreeSet::new();
    for s in &srows {
        let metric = s["metric"].as_str().unwrap();
        if !header.iter().any(|h| h == metric) {
            continue; // a figure the table names otherwise (e.g. kvmeter_cpu_pct)
        }
        let point = format!(
            "/points/{:02}-",
            s["point"].as_str().unwrap().parse::<u32>().unwrap()
        );
        let mine: Vec<&Map<String, Value>> = rows
            .iter()
            .filter(|r| {
                r["run_dir"].as_str().unwrap().contains(&point)
                    && r["phase"] == s["phase"]
                    && r["operation"] == "ALL"
            })
            .collect();
        assert_eq!(mine.len().to_string(), s["n"].as_str().unwrap(), "{s:?}");
        for r in &mine {
            assert_eq!(r["threads"], s["threads"], "the parameter's column");
        }
        let mean = mine.iter().map(|r| num(&r[metric])).sum::<f64>() / mine.len() as f64;
        let want = num(&s["mean"]);
        // sweep.csv writes 6 decimals.
        assert!(
            (mean - want).abs() <= 1e-6 + 1e-12 * want.abs(),
            "{metric}: {mean} vs {want}"
        );
        checked.insert(metric.to_string());
    }
    for m in [
        "throughput_ops_per_s",
        "throughput_mb_per_s",
        "latency_avg_us",
        "latency_p50_us",
        "latency_p99_us",
        "latency_p99_9_us",
    ] {
        assert!(checked.contains(m), "{m} not compared: {checked:?}");
    }
}

/// The JSON path `a.b.c` in `v` (a key may hold a dot itself: a thread named `.kvbin`).
fn at<'v>(v: &'v Value, path: &str) -> &'v Value {
    if let Some(x) = v.get(path) {
        return x;
    }
    for (i, _) in path.match_indices('.') {
        if let Some(x) = v.get(&path[..i]) {
            let found = at(x, &path[i + 1..]);
            if !found.is_null() {
                return found;
            }
        }
    }
    &Value::Null
}

/// Every row (JSON lines) against its run's summary.json and manifest.json, read here.
#[test]
fn every_rows_figures_equal_its_runs_summary_json() {
    let sw = sweep();
    let rows = jsonl_rows(&table(&[sw.to_str().unwrap(), "--format", "jsonl"]));
    let mut expected_rows = 0;
    let runs: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["run_dir"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 4);
    for run in &runs {
        let s = json(&Path::new(run).join("summary.json"));
        for p in s["phases"].as_array().unwrap() {
            if p["kind"] != "clear" {
                expected_rows += p["ops"].as_object().unwrap().len() + 1;
            }
        }
    }
    assert_eq!(rows.len(), expected_rows);
    let lat = ["min", "avg", "p50", "p90", "p99", "p99_9", "p99_99", "max"];
    for r in &rows {
        let dir = Path::new(r["run_dir"].as_str().unwrap());
        let (s, m) = (
            json(&dir.join("summary.json")),
            json(&dir.join("manifest.json")),
        );
        let p = phase(&s, r["phase"].as_str().unwrap());
        let op = r["operation"].as_str().unwrap();
        let (figures, latency) = if op == "ALL" {
            assert_eq!(r["ops_per_s"], p["throughput_ops_per_s"]);
            assert_eq!(r["count"], p["all_ops"]["count"]);
            assert_eq!(r["errors"], p["errors"]);
            (&p["all_ops"], &p["all_ops"]["latency_us"])
        } else {
            let o = &p["ops"][op];
            for k in ["count", "ok", "ops_per_s", "mb_per_s"] {
                assert_eq!(r[k], o[k], "{op} {k}");
            }
            let kinds = o["errors"].as_object().unwrap();
            assert_eq!(
                r["errors"],
                kinds.values().map(|n| n.as_u64().unwrap()).sum::<u64>()
            );
            (o, &o["latency_us"])
        };
        for f in lat {
            assert_eq!(r[&format!("latency_{f}_us")], latency[f], "{op} {f}");
            let intended = &figures["intended_latency_us"][f];
            assert_eq!(r[&format!("intended_{f}_us")], *intended, "{op} {f}");
        }
        assert!(r["latency_p99_us"].is_number());
        for k in ["throughput_ops_per_s", "threads", "measured_seconds"] {
            assert_eq!(r[k], p[k], "{k}");
        }
        assert_eq!(r["phase_operations"], p["operations"]);
        assert_eq!(r["seed"], s["seed"]);
        // Telemetry and energy columns are the phase's JSON paths; energy keeps its label.
        let mut nested = 0;
        for (k, v) in r
            .iter()
            .filter(|(k, _)| k.starts_with("telemetry.") || k.starts_with("energy."))
        {
            let want = at(p, k);
            assert_eq!(
                v,
                if want.is_null() || want.is_array() {
                    &Value::Null
                } else {
                    want
                },
                "{k}"
            );
            nested += !v.is_null() as usize;
        }
        assert!(nested > 10, "telemetry and energy columns: {nested}");
        if !p["energy"].is_null() {
            assert_eq!(r["energy.estimate"], p["energy"]["estimate"]);
            assert_eq!(r["energy.source"], p["energy"]["source"]);
        }
        // The variables from manifest.json.
        assert_eq!(r["store"], "rocksdb");
        assert_eq!(r["store"], m["store"]["name"]);
        assert_eq!(r["machine.cpu_model"], m["machine"]["cpu_model"]);
        let plan = m["plan"]["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == r["phase"])
            .unwrap();
        assert_eq!(r["p.recordcount"], plan["workload"]["recordcount"]);
        assert_eq!(r["p.recordcount"], 200);
        assert_eq!(
            r["store-opt.compression"],
            m["store"]["options"]["compression"]
        );
    }
}

/// The same rows and columns in CSV, JSON lines and Parquet (read back with `parquet`).
#[test]
fn json_lines_and_parquet_round_trip() {
    let sw = sweep().to_str().unwrap();
    let (header, csv) = csv_rows(&table(&[sw]));
    let jl = jsonl_rows(&table(&[sw, "--format", "jsonl"]));
    assert_eq!(csv.len(), jl.len());
    assert_eq!(
        jl[0].keys().cloned().collect::<Vec<_>>().len(),
        header.len()
    );
    for (c, j) in csv.iter().zip(&jl) {
        for k in &header {
            let text = match &j[k] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                v => v.to_string(),
            };
            assert_eq!(c[k].as_str().unwrap(), text, "{k}");
        }
    }
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("t.parquet");
    let o = kvmeter()
        .args(["table", sw, "--format", "parquet", "--output"])
        .arg(&file)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty());
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    assert_eq!(
        reader.metadata().file_metadata().num_rows() as usize,
        jl.len()
    );
    let names: Vec<String> = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(names, header);
    let mut n = 0;
    for (row, j) in reader.get_row_iter(None).unwrap().zip(&jl) {
        let row = row.unwrap();
        for (name, field) in row.get_column_iter() {
            let want = &j[name];
            match field {
                Field::Null => assert!(want.is_null(), "{name}"),
                Field::Str(s) => assert_eq!(want.as_str(), Some(s.as_str()), "{name}"),
                // A number is a number whether the JSON has it as one or as text ("64").
                Field::Long(x) => assert_eq!(as_num::<i64>(want), Some(*x), "{name}"),
                Field::ULong(x) => assert_eq!(as_num::<u64>(want), Some(*x), "{name}"),
                Field::Double(x) => assert_eq!(as_num::<f64>(want), Some(*x), "{name}"),
                Field::Bool(x) => assert_eq!(want.as_bool(), Some(*x), "{name}"),
                other => panic!("{name}: unexpected {other:?}"),
            }
        }
        n += 1;
    }
    assert_eq!(n, jl.len());
    // A few values by name, typed as a reader sees them.
    let first = reader.get_row_iter(None).unwrap().next().unwrap().unwrap();
    let get = |k: &str| {
        first
            .get_column_iter()
            .find(|(n, _)| *n == k)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(get("store"), Field::Str("rocksdb".into()));
    assert_eq!(get("threads"), Field::Long(1));
    assert!(matches!(get("latency_p99_us"), Field::Double(_)));
}

/// A JSON number, or text that is one, as `T`.
fn as_num<T: serde::de::DeserializeOwned>(v: &Value) -> Option<T> {
    match v {
        Value::String(s) => serde_json::from_str(s).ok(),
        v => serde_json::from_value(v.clone()).ok(),
    }
}

/// A Parquet file's rows as (column, field) lists.
fn parquet_rows(file: &Path) -> Vec<Vec<(String, parquet::record::Field)>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(std::fs::File::open(file).unwrap()).unwrap();
    reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| {
            r.unwrap()
                .get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect()
}

/// Issue 40 item 10 on a real memcached the test starts: a store option that is a number is a
/// number in Parquet as in the CSV (8 sorts before 64), a sweep's point and repetition are
/// columns, and an operation with no successes (every read a miss) has null latency cells
/// (empty in CSV), with its hits, misses, hit ratio and the misses' own latency beside them.
#[test]
fn a_memcached_sweeps_table_is_typed_with_repetitions_and_null_latency() {
    use parquet::record::Field;
    let t = tempfile::tempdir().unwrap();
    let (_mc, port) = servers::memcached(t.path(), "mc", false);
    let out = t.path().join("sw");
    // --phase run on an empty server: every read misses.
    let o = kvmeter()
        .args([
            "sweep",
            "--store",
            "memcached",
            "-P",
            "workloadc",
            "--phase",
            "run",
        ])
        .args(["--store-opt", &format!("addr=127.0.0.1:{port}")])
        .args(["--records", "100", "--ops", "300", "--threads", "1"])
        .args([
            "--param",
            "store-opt.pipeline=8,64",
            "--repeat",
            "2",
            "--out",
        ])
        .arg(&out)
        .timeout(LIMIT * 4)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let misses = servers::mc_stats(port)["get_misses"];
    assert_eq!(misses, 4 * 300, "memcached's own count of misses");
    let file = t.path().join("t.parquet");
    let o = kvmeter()
        .args([
            "table",
            out.to_str().unwrap(),
            "--format",
            "parquet",
            "--output",
        ])
        .arg(&file)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows = parquet_rows(&file);
    let reads: Vec<_> = rows
        .iter()
        .filter(|r| r.contains(&("operation".into(), Field::Str("READ".into()))))
        .collect();
    assert_eq!(reads.len(), 4);
    let mut seen = vec![];
    let mut read_misses = 0;
    for r in reads {
        let get = |k: &str| {
            r.iter()
                .find(|(n, _)| n == k)
                .unwrap_or_else(|| panic!("no column {k}"))
                .1
                .clone()
        };
        let Field::Str(dir) = get("run_dir") else {
            panic!("run_dir")
        };
        let Field::Long(pipeline) = get("store-opt.pipeline") else {
            panic!("store-opt.pipeline: {:?}", get("store-opt.pipeline"))
        };
        let (Field::Long(point), Field::Long(rep)) = (get("point"), get("repetition")) else {
            panic!(
                "point {:?}, repetition {:?}",
                get("point"),
                get("repetition")
            )
        };
        // The point and repetition are where the sweep put the run (index.csv says the same).
        assert!(dir.ends_with(&format!("r{rep}")), "{dir} {rep}");
        assert!(
            dir.contains(&format!("/0{point}-store-opt.pipeline={pipeline}/")),
            "{dir}"
        );
        seen.push((point, rep, pipeline));
        for f in ["min", "avg", "p50", "p99", "max"] {
            assert_eq!(get(&format!("latency_{f}_us")), Field::Null, "{f}");
            assert!(matches!(get(&format!("missed_{f}_us")), Field::Double(x) if x > 0.0));
        }
        assert_eq!(get("hits"), Field::Long(0));
        assert_eq!(get("hit_ratio"), Field::Double(0.0));
        let Field::Long(m) = get("misses") else {
            panic!("misses")
        };
        read_misses += m as u64;
    }
    assert_eq!(read_misses, misses);
    seen.sort();
    assert_eq!(seen, [(1, 1, 8), (1, 2, 8), (2, 1, 64), (2, 2, 64)]);
    // The CSV: the same rows, the latency cells empty, the option's digits as they are.
    let (_, csv) = csv_rows(&table(&[out.to_str().unwrap()]));
    for r in csv.iter().filter(|r| r["operation"] == "READ") {
        assert_eq!(r["latency_p99_us"], "");
        assert!(r["store-opt.pipeline"] == "8" || r["store-opt.pipeline"] == "64");
        assert_eq!(r["misses"], "300");
    }
}

/// One line on stderr, exit 2, and nothing created.
fn refused(args: &[&std::ffi::OsStr], needle: &str, created: &Path) {
    let o = kvmeter()
        .arg("table")
        .args(args)
        .timeout(LIMIT)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(o.stdout.is_empty());
    assert!(!created.exists(), "{}", created.display());
}

#[test]
fn bad_input_is_refused_in_one_line_before_anything_is_created() {
    let sw = sweep();
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("new.csv");
    let os = |s: &Path| s.as_os_str().to_owned();
    let (o, sw_os) = (os(&out), os(sw));
    let flag = |s: &str| std::ffi::OsString::from(s);
    let missing = t.path().join("no-such-dir");
    refused(
        &[&os(&missing), &flag("--output"), &o],
        "no-such-dir: not a directory",
        &out,
    );
    refused(
        &[
            &sw_os,
            &flag("--format"),
            &flag("bogus"),
            &flag("--output"),
            &o,
        ],
        "--format bogus: expected csv, jsonl or parquet",
        &out,
    );
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(
        &[&os(&empty), &flag("--output"), &o],
        "no run directory",
        &out,
    );
    // An existing --output is never overwritten.
    let mine = t.path().join("mine.csv");
    std::fs::write(&mine, "keep me\n").unwrap();
    refused(
        &[&sw_os, &flag("--output"), &os(&mine)],
        "already exists",
        &out,
    );
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "keep me\n");
    // A summary with a key of the wrong shape: its file and key.
    let bad = t.path().join("bad/r1");
    std::fs::create_dir_all(&bad).unwrap();
    let run = sw.join("points/01-threads=1/r1");
    std::fs::copy(run.join("manifest.json"), bad.join("manifest.json")).unwrap();
    let mut s = json(&run.join("summary.json"));
    s["phases"][1]["ops"]["READ"]["count"] = serde_json::json!({"n": 1});
    std::fs::write(bad.join("summary.json"), s.to_string()).unwrap();
    refused(
        &[&sw_os, &os(&t.path().join("bad")), &flag("--output"), &o],
        "summary.json: phases[1].ops.READ.count: expected a number",
        &out,
    );
}

/// A compare directory holds no runs, only compare.json naming them: its runs are read from
/// there with their side, each once even when the sweep is given too.
#[test]
fn a_compare_directorys_runs_carry_their_side() {
    let sw = sweep();
    let t = tempfile::tempdir().unwrap();
    let cmp = t.path().join("cmp");
    let p = |s: &str| sw.join("points").join(s);
    let o = kvmeter()
        .arg("compare")
        .args([p("01-threads=1/r1"), p("01-threads=1/r2")])
        .arg("--vs")
        .args([p("02-threads=2/r1"), p("02-threads=2/r2")])
        .arg("--out")
        .arg(&cmp)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(
        cmp.join("compare.json").is_file(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows = jsonl_rows(&table(&[
        cmp.to_str().unwrap(),
        sw.to_str().unwrap(),
        "--format",
        "jsonl",
    ]));
    let all = jsonl_rows(&table(&[sw.to_str().unwrap(), "--format", "jsonl"]));
    assert_eq!(rows.len(), all.len(), "each run once");
    for r in &rows {
        let threads = r["threads"].as_u64().unwrap();
        let side = if threads == 1 { "A" } else { "B" };
        assert_eq!(r["compare.side"], side, "{}", r["run_dir"]);
        assert_eq!(r["compare.dir"], cmp.to_str().unwrap());
    }
}

/// Issue 41 F7: a table streamed in bytes-bounded pieces (a file of its own to keep this one
/// short; the same test binary).
mod streaming;
