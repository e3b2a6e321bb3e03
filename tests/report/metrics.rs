//! The live Prometheus endpoint (`--metrics-addr`, docs/metrics.md) against a real Prometheus
//! (Debian's 2.42, started here on loopback with a scrape config written here) and a real
//! memcached: what Prometheus stored equals summary.json — every phase's per-operation count
//! exactly, and `histogram_quantile(0.99, …)` within one bucket of summary.json's p99
//! (classic buckets through the text format; native buckets through the protobuf format with
//! `--enable-feature=native-histograms`). Also: errors counted by kind, and bad addresses
//! refused before anything is created.
//!
//! Golden values: summary.json (written by kvmeter from its own HDR histograms) against what
//! Prometheus computed from the scrapes; the bucket bounds are the documented ones
//! (classic: 2^(i/4) s; native: schema 3, (2^((j-1)/8), 2^(j/8)] s), computed here.

use crate::common;
mod dashboard;

use common::servers::{memcached, wait_exit, wait_port, Proc};
use common::{free_port, json, kvmeter};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.0 GET on loopback (no chunked replies); the body.
fn http_get(port: u16, target: &str) -> String {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    match out.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_string(),
        None => out,
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus this test started, scraping `target` every second.
struct Prom {
    _proc: Proc,
    port: u16,
}

impl Prom {
    fn start(dir: &Path, target: u16, native: bool) -> Prom {
        Prom::start_all(dir, &[target], native)
    }

    /// One Prometheus scraping every one of `targets` (one job) every second.
    fn start_all(dir: &Path, targets: &[u16], native: bool) -> Prom {
        let targets: Vec<String> = targets.iter().map(|t| format!("'127.0.0.1:{t}'")).collect();
        let port = free_port();
        std::fs::create_dir_all(dir.join("tsdb")).unwrap();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: kvmeter\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap();
        let mut args = vec![
            format!("--config.file={}", cfg.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        if native {
            args.push("--enable-feature=native-histograms".into());
        }
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let c = Command::new("prometheus")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus is installed (scripts/setup.sh with KVMETER_SETUP_TESTS=1)");
        let p = Prom {
            _proc: Proc(c),
            port,
        };
        wait_port(port);
        let t = Instant::now();
        while !http_get(port, "/-/ready").contains("Ready") {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "prometheus not ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// The single value of an instant query, or None when it returns no series.
    fn scalar(&self, q: &str) -> Option<f64> {
        self.scalar_at(q, None)
    }

    /// The same at a time (Unix seconds): where a series was still live, for what
    /// Prometheus 2.42's `*_over_time` functions do not take (native histograms).
    fn scalar_at(&self, q: &str, time: Option<f64>) -> Option<f64> {
        let at = time.map(|t| format!("&time={t}")).unwrap_or_default();
        let body = http_get(
            self.port,
            &format!("/api/v1/query?query={}{at}", urlencode(q)),
        );
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{q}: {e}: {body}"));
        assert_eq!(v["status"], "success", "{q}: {body}");
        let r = v["data"]["result"].as_array()?;
        assert!(r.len() <= 1, "{q}: more than one series: {body}");
        let s = r.first()?["value"][1].as_str()?.to_string();
        Some(s.parse().unwrap())
    }

    /// The time (Unix seconds) of the last sample Prometheus stored for `series`.
    fn last_sample_time(&self, series: &str) -> f64 {
        let q = format!("{series}[10m]");
        let body = http_get(self.port, &format!("/api/v1/query?query={}", urlencode(&q)));
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{q}: {e}: {body}"));
        let r = &v["data"]["result"][0];
        let samples = r["values"].as_array().or(r["histograms"].as_array());
        let last = samples
            .and_then(|s| s.last())
            .unwrap_or_else(|| panic!("{q}: {body}"));
        last[0].as_f64().unwrap()
    }

    /// Polls `q` until it returns `want` (the last scrape may still be being written), up to
    /// 15 s; returns what it returned last.
    fn settle(&self, q: &str, want: f64) -> Option<f64> {
        let t = Instant::now();
        loop {
            let got = self.scalar(q);
            if got == Some(want) || t.elapsed() > Duration::from_secs(15) {
                return got;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// `kvmeter run` on memcached serving metrics on `mport`, waited for; its run directory.
fn run_kvmeter(dir: &Path, mc: u16, mport: u16, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join("run");
    let log = dir.join("kvmeter.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut c = Command::new(common::bin())
        .args([
            "run",
            "-P",
            "workloada",
            "--store",
            "memcached",
            "--store-opt",
        ])
        .arg(format!("addr=127.0.0.1:{mc}"))
        .args(["--records", "500", "--ops", "0", "--duration", "6s"])
        .args(["--threads", "2", "--telemetry-interval", "0"])
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{mport}"))
        .args(["--metrics-linger", "20s"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .env("NO_COLOR", "1")
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let code = wait_exit(&mut c, Duration::from_secs(60));
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!(
            "metrics: serving http://127.0.0.1:{mport}/metrics (loopback only)"
        )),
        "{said}"
    );
    out
}

/// Each phase × op of summary.json: (phase, op, count, successful count, p99 in seconds).
fn summary_ops(run: &Path) -> Vec<(String, String, u64, u64, f64)> {
    let s = json(&run.join("summary.json"));
    let mut v = vec![];
    for p in s["phases"].as_array().unwrap() {
        for (op, o) in p["ops"].as_object().unwrap() {
            v.push((
                p["name"].as_str().unwrap().to_string(),
                op.clone(),
                o["count"].as_u64().unwrap(),
                o["latency_us"]["count"].as_u64().unwrap(),
                o["latency_us"]["p99"].as_f64().unwrap() * 1e-6,
            ));
        }
    }
    assert!(v.iter().any(|x| x.0 == "run" && x.1 == "READ"), "{s}");
    v
}

/// The bucket `(2^((i-1)/per), 2^(i/per)]` that holds `s`.
fn bucket(s: f64, per: f64) -> (f64, f64) {
    let i = (s.log2() * per).ceil();
    let (lo, hi) = (((i - 1.0) / per).exp2(), (i / per).exp2());
    // log2's rounding at an exact bound: the bound belongs to the lower bucket.
    if s <= lo {
        (((i - 2.0) / per).exp2(), lo)
    } else {
        (lo, hi)
    }
}

fn check_against_summary(prom: &Prom, run: &Path, native: bool) {
    for (phase, op, count, ok, p99) in summary_ops(run) {
        if count == 0 {
            continue; // listed with zeros in summary.json; no series until one completes
        }
        let sel = format!("{{phase=\"{phase}\",op=\"{op}\",store=\"memcached\"}}");
        let got = prom.settle(
            &format!("last_over_time(kvmeter_operations_total{sel}[10m])"),
            count as f64,
        );
        assert_eq!(got, Some(count as f64), "{phase} {op}");
        let (q, per, at) = if native {
            // At the last scrape of the series, where it is live.
            let t = Some(prom.last_sample_time(&format!("kvmeter_latency_seconds{sel}")));
            (
                format!("histogram_quantile(0.99, kvmeter_latency_seconds{sel})"),
                8.0,
                t,
            )
        } else {
            (
                format!("histogram_quantile(0.99, last_over_time(kvmeter_latency_seconds_bucket{sel}[10m]))"),
                4.0,
                None,
            )
        };
        if native {
            let c = format!("histogram_count(kvmeter_latency_seconds{sel})");
            assert_eq!(prom.scalar_at(&c, at), Some(ok as f64), "{c}");
        } else {
            let c = format!("last_over_time(kvmeter_latency_seconds_count{sel}[10m])");
            assert_eq!(prom.scalar(&c), Some(ok as f64), "{c}");
        }
        let v = prom
            .scalar_at(&q, at)
            .unwrap_or_else(|| panic!("{q} at {at:?}: no result"));
        // Within one bucket: the bucket of summary.json's p99 or a neighbour. A neighbour only
        // when the 99th-percentile rank falls exactly on a bucket's last observation (HDR
        // ranks ceil(0.99 n); PromQL compares counts against 0.99·n or 0.01·n in floating
        // point).
        let (lo, hi) = bucket(p99, per);
        let step = (1.0 / per).exp2();
        assert!(
            v >= lo / step * (1.0 - 1e-9) && v <= hi * step * (1.0 + 1e-9),
            "{phase} {op}: Prometheus's p99 {v} s is more than one bucket from ({lo}, {hi}], the bucket of summary.json's {p99} s"
        );
    }
}

/// The store's own statistics (issue 43) as Prometheus stored them: memcached's item memory
/// as memcached says it, and its gets as one of store_stats.csv's samples of the phase.
fn store_statistics_are_served(prom: &Prom, run: &Path, mc: u16) {
    let limit = common::servers::mc_stats(mc)["limit_maxbytes"] as f64;
    let sel = "{phase=\"run\",statistic=\"limit_maxbytes\",unit=\"bytes\"}";
    let q = format!("last_over_time(kvmeter_store_gauge{sel}[10m])");
    assert_eq!(prom.settle(&q, limit), Some(limit), "{q}");
    let q = "last_over_time(kvmeter_store_counter_total{phase=\"run\",statistic=\"cmd_get\"}[10m])";
    let got = prom.scalar(q).unwrap_or_else(|| panic!("{q}: no series"));
    let csv = std::fs::read_to_string(run.join("store_stats.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "cmd_get").unwrap();
    let sampled: Vec<f64> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[0] == "run")
        .filter_map(|f| f[col].parse().ok())
        .collect();
    assert!(sampled.contains(&got), "{got} not among {sampled:?}");
}

#[test]
fn prometheus_stores_the_summary_counts_and_p99_classic_and_native() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mc, mc) = memcached(tmp.path(), "mc", false);
    // Two kvmeter runs side by side, each scraped by its own Prometheus: Prometheus 2.42
    // keeps only the native buckets of a histogram that has them once the feature is on.
    let cases = [(false, vec![]), (true, vec!["--rate", "2000"])];
    std::thread::scope(|s| {
        for (native, extra) in &cases {
            let dir = tmp.path().join(if *native { "native" } else { "classic" });
            std::fs::create_dir_all(&dir).unwrap();
            s.spawn(move || {
                let mport = free_port();
                let prom = Prom::start(&dir.join("prom"), mport, *native);
                let run = run_kvmeter(&dir, mc, mport, extra);
                let m = json(&run.join("manifest.json"));
                common::validate("manifest.schema.json", &m);
                assert_eq!(m["plan"]["metrics"]["addr"], format!("127.0.0.1:{mport}"));
                check_against_summary(&prom, &run, *native);
                store_statistics_are_served(&prom, &run, mc);
                if *native {
                    // The open loop's from-intended histogram is there too, whole.
                    let s = json(&run.join("summary.json"));
                    let p = common::phase(&s, "run");
                    let n = p["ops"]["READ"]["intended_latency_us"]["count"]
                        .as_u64()
                        .unwrap();
                    let sel = "{phase=\"run\",op=\"READ\"}";
                    let t = Some(
                        prom.last_sample_time(&format!("kvmeter_intended_latency_seconds{sel}")),
                    );
                    let q = format!("histogram_count(kvmeter_intended_latency_seconds{sel})");
                    assert_eq!(prom.scalar_at(&q, t), Some(n as f64), "{q}");
                }
            });
        }
    });
}

#[test]
fn errors_are_counted_by_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let (_mc, mc) = memcached(tmp.path(), "mc", false);
    let mport = free_port();
    let out = tmp.path().join("run");
    let log = tmp.path().join("kvmeter.log");
    // 80 KB records read back through a 64 KiB reply bound: every READ fails.
    let mut c = common::servers::spawn(
        &[
            "run",
            "-P",
            "workloadc",
            "--store",
            "memcached",
            "--store-opt",
            &format!("addr=127.0.0.1:{mc}"),
            "--store-opt",
            "max_reply=64KiB",
            "-p",
            "fieldcount=10",
            "-p",
            "fieldlength=8000",
            "--records",
            "20",
            "--ops",
            "200",
            "--threads",
            "1",
            "--telemetry-interval",
            "0",
            "--metrics-addr",
            &format!("127.0.0.1:{mport}"),
            "--metrics-linger",
            "30s",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from),
        &log,
    );
    let t = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("until one scrape reads them")
    {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            c.try_wait().unwrap().is_none(),
            "kvmeter ended before lingering"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let body = http_get(mport, "/metrics");
    wait_exit(&mut c, Duration::from_secs(10));
    let s = json(&out.join("summary.json"));
    let errors = common::phase(&s, "run")["ops"]["READ"]["errors"]
        .as_object()
        .unwrap()
        .clone();
    assert!(!errors.is_empty(), "{s}");
    for (kind, n) in &errors {
        let line = format!(",op=\"READ\",kind=\"{kind}\"}} {}\n", n.as_u64().unwrap());
        assert!(
            body.lines().any(|l| l.starts_with("kvmeter_errors_total{")
                && l.contains("phase=\"run\"")
                && format!("{l}\n").ends_with(&line)),
            "{kind}: {line}\n{body}"
        );
    }
}

#[test]
fn bad_metrics_addresses_are_refused_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    for (addr, says) in [
        ("nonsense".to_string(), "expected HOST:PORT"),
        // A well-formed address whose port is taken is not a syntax error.
        (
            format!("127.0.0.1:{port}"),
            "another process serves there; choose another port",
        ),
    ] {
        let out = tmp.path().join("run");
        let o = kvmeter()
            .args(["run", "--store", "null", "--records", "10", "--ops", "10"])
            .args(["--metrics-addr", &addr])
            .arg("--out")
            .arg(&out)
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{addr}: {err}");
        assert_eq!(err.lines().count(), 1, "{addr}: {err}");
        assert!(
            err.contains("--metrics-addr") && err.contains(says),
            "{addr}: {err}"
        );
        if addr != "nonsense" {
            assert!(!err.contains("expected HOST:PORT"), "{addr}: {err}");
        }
        assert!(!out.exists(), "{addr}: a run directory was created");
    }
    let o = kvmeter()
        .args(["run", "--store", "null", "--metrics-linger", "5s"])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// deploy/grafana-dashboard.json parses, and every panel's query names a metric the exporter
/// emits (the names of docs/metrics.md's table).
#[test]
fn the_grafana_dashboard_queries_documented_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let names: Vec<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|n| n.starts_with("kvmeter_"))
        .map(String::from)
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let d: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = vec![];
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for a in d["annotations"]["list"].as_array().unwrap() {
        if let Some(e) = a["expr"].as_str() {
            exprs.push(e.to_string());
        }
    }
    assert!(exprs.len() >= 5, "{exprs:?}");
    for e in &exprs {
        let used: Vec<&str> = e
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("kvmeter_"))
            .collect();
        assert!(!used.is_empty(), "{e}: names no kvmeter metric");
        for u in used {
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| u.strip_suffix(s))
                .unwrap_or(u);
            assert!(
                names.iter().any(|n| n == u || n == base),
                "{e}: {u} is not in docs/metrics.md's table"
            );
        }
    }
}

/// Spawns kvmeter with `args` (stdout and stderr to `log`) and waits until it says it lingers.
fn spawn_until_lingering(args: &[String], log: &Path) -> std::process::Child {
    let mut c = common::servers::spawn(args, log);
    let t = Instant::now();
    let said = || std::fs::read_to_string(log).unwrap_or_default();
    while !said().contains("until one scrape reads them") {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", said());
        assert!(
            c.try_wait().unwrap().is_none(),
            "ended before lingering: {}",
            said()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c
}

/// `kvmeter_operations_total` samples of a text exposition: (run, phase, op) → count.
fn operations(body: &str) -> std::collections::BTreeMap<(String, String, String), u64> {
    let label = |l: &str, k: &str| {
        let from = l.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
        l[from..].split('"').next().unwrap().to_string()
    };
    body.lines()
        .filter(|l| l.starts_with("kvmeter_operations_total{"))
        .map(|l| {
            let n = l.rsplit_once(' ').unwrap().1.parse().unwrap();
            ((label(l, "run"), label(l, "phase"), label(l, "op")), n)
        })
        .collect()
}

#[test]
fn a_sweep_serves_every_run_under_its_own_run_label() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("sweep");
    let mport = free_port();
    let args = [
        "sweep",
        "--store",
        "null",
        "--param",
        "threads=1,2",
        "--repeat",
        "1",
        "--records",
        "100",
        "--ops",
        "3000",
        "--telemetry-interval",
        "0",
        "--metrics-linger",
        "30s",
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{mport}")]);
    args.extend(["--out".into(), out.display().to_string()]);
    let log = tmp.path().join("kvmeter.log");
    let mut c = spawn_until_lingering(&args, &log);
    let got = operations(&http_get(mport, "/metrics"));
    assert_eq!(wait_exit(&mut c, Duration::from_secs(10)), 0);
    // Every point's run directory, its summary's counts under its own label.
    let mut want = std::collections::BTreeMap::new();
    for point in ["01-threads=1", "02-threads=2"] {
        let run = out.join("points").join(point).join("r1");
        let s = json(&run.join("summary.json"));
        for p in s["phases"].as_array().unwrap() {
            for (op, o) in p["ops"].as_object().unwrap() {
                let n = o["count"].as_u64().unwrap();
                if n > 0 {
                    let key = (
                        run.display().to_string(),
                        p["name"].as_str().unwrap().into(),
                        op.clone(),
                    );
                    want.insert(key, n);
                }
            }
        }
        // A sweep point's manifest (plan.command "sweep") validates too.
        let m = json(&run.join("manifest.json"));
        common::validate("manifest.schema.json", &m);
        assert_eq!(m["plan"]["command"], "sweep");
        assert_eq!(m["plan"]["metrics"]["addr"], format!("127.0.0.1:{mport}"));
        assert_eq!(m["plan"]["metrics"]["linger"], 30.0);
    }
    assert_eq!(got, want);
}

#[test]
fn ctrl_c_ends_the_wait_for_a_last_scrape() {
    let tmp = tempfile::tempdir().unwrap();
    let mport = free_port();
    let args = [
        "run",
        "--store",
        "null",
        "--records",
        "10",
        "--ops",
        "100",
        "--telemetry-interval",
        "0",
        "--metrics-linger",
        "10m",
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{mport}")]);
    args.extend(["--out".into(), tmp.path().join("run").display().to_string()]);
    let log = tmp.path().join("kvmeter.log");
    let mut c = spawn_until_lingering(&args, &log);
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    // The run itself completed: its exit code stands.
    assert_eq!(wait_exit(&mut c, Duration::from_secs(10)), 0);
}

#[test]
fn fault_events_are_counted_by_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mport = free_port();
    // kvmeter's own memcached, stopped for half a second one second into the run phase.
    let args = [
        "run",
        "--store",
        "memcached",
        "--records",
        "100",
        "--duration",
        "3s",
        "--threads",
        "1",
        "--telemetry-interval",
        "0",
        "--fault",
        "at=1s,stop=server,for=500ms",
        "--metrics-linger",
        "30s",
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--metrics-addr".into(), format!("127.0.0.1:{mport}")]);
    args.extend(["--out".into(), out.display().to_string()]);
    let mut c = spawn_until_lingering(&args, &tmp.path().join("kvmeter.log"));
    let body = http_get(mport, "/metrics");
    assert_eq!(wait_exit(&mut c, Duration::from_secs(10)), 0);
    let s = json(&out.join("summary.json"));
    let mut want = std::collections::BTreeMap::<String, u64>::new();
    for e in common::phase(&s, "run")["fault_events"].as_array().unwrap() {
        *want.entry(e["event"].as_str().unwrap().into()).or_default() += 1;
    }
    assert!(
        want.contains_key("stop") && want.contains_key("continue"),
        "{want:?}"
    );
    for (kind, n) in &want {
        let end = format!("phase=\"run\",store=\"memcached\",agent=\"\",kind=\"{kind}\"}} {n}");
        assert!(
            body.lines()
                .any(|l| l.starts_with("kvmeter_fault_events_total{") && l.ends_with(&end)),
            "{kind} {n}:\n{body}"
        );
    }
}

/// A distributed run with two agents and the coordinator each serving metrics, all three
/// scraped by one Prometheus: the agents' series summed by Prometheus equal the coordinator's
/// merged count, which equals the merged summary.json's — per phase and operation, exactly.
#[test]
fn two_agents_summed_by_prometheus_equal_the_coordinators_merged_count() {
    let tmp = tempfile::tempdir().unwrap();
    let (_etcd, url) = common::servers::etcd(tmp.path(), 1);
    let (_mc, mc) = memcached(tmp.path(), "mc", false);
    let ports = [free_port(), free_port(), free_port()];
    let prom = Prom::start_all(&tmp.path().join("prom"), &ports, false);
    let run: Vec<String> = [
        "--store",
        "memcached",
        "--store-opt",
        &format!("addr=127.0.0.1:{mc}"),
        "-P",
        "workloada",
        "--records",
        "1000",
        "--ops",
        "6000",
        "--threads",
        "1",
        "--interval",
        "500ms",
        "--telemetry-interval",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let coord_metrics = format!("127.0.0.1:{}", ports[2]);
    let mut d = common::servers::Dist::start_with(
        &url,
        "metrics",
        2,
        &["--metrics-addr", &coord_metrics, "--metrics-linger", "20s"],
        &run,
        |i| {
            vec![
                "--metrics-addr".into(),
                format!("127.0.0.1:{}", ports[i]),
                "--metrics-linger".into(),
                "20s".into(),
            ]
        },
    );
    let code = d.finish();
    assert_eq!(code, 0, "{}", d.log("coord.log"));
    for (i, port) in ports.iter().take(2).enumerate() {
        let said = d.log(&format!("agent{i}.log"));
        assert!(
            said.contains(&format!(
                "metrics: serving http://127.0.0.1:{port}/metrics (loopback only)"
            )),
            "{said}"
        );
        // The agent's own endpoint is its own flag: recorded in its manifest, not the plan's.
        let m = json(&d.path(&format!("agent{i}/manifest.json")));
        assert_eq!(m["plan"]["metrics"]["addr"], format!("127.0.0.1:{port}"));
    }
    let merged = json(&d.path("merged/summary.json"));
    assert_eq!(merged["status"], "completed");
    let mut checked = 0;
    for p in merged["phases"].as_array().unwrap() {
        let phase = p["name"].as_str().unwrap();
        for (op, o) in p["ops"].as_object().unwrap() {
            let count = o["count"].as_u64().unwrap();
            if count == 0 {
                continue;
            }
            let sel = format!("phase=\"{phase}\",op=\"{op}\"");
            let summed = format!(
                "sum(last_over_time(kvmeter_operations_total{{{sel},agent!=\"merged\"}}[10m]))"
            );
            assert_eq!(
                prom.settle(&summed, count as f64),
                Some(count as f64),
                "{summed}"
            );
            let coord =
                format!("last_over_time(kvmeter_operations_total{{{sel},agent=\"merged\"}}[10m])");
            assert_eq!(
                prom.settle(&coord, count as f64),
                Some(count as f64),
                "{coord}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "{merged}");
    // Both agents were scraped, each under its own index. Over the run, as above: an agent
    // that has ended is down at Prometheus's next scrape, which marks its series stale at once
    // (an instant query without `last_over_time` then counts one agent).
    let agents = "count(count by (agent) (last_over_time(kvmeter_operations_total{agent!=\"merged\"}[10m])))";
    assert_eq!(prom.scalar(agents), Some(2.0), "{agents}");
}
