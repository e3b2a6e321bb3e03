//! The live Prometheus endpoint (`--metrics-addr HOST:PORT`, docs/metrics.md): operators watch
//! a long run in the dashboards they already have, while the run directory stays the record.
//!
//! The driver (and a distributed run's coordinator, with merged intervals) feeds an
//! `Exporter` once per interval from its interval loop — never from workers: the hot path is
//! untouched. The exporter keeps cumulative per run × phase × operation counts and latency
//! buckets (`series`), renders the exposition once per update into bytes in both formats
//! (`model` → `text`, `proto`) and swaps them in for the server thread (`http`), which only
//! copies a pointer per scrape. One exporter serves the whole process: a sweep's, a capacity
//! search's or an experiment's runs are told apart by the `run` label (the run directory's
//! path), so every series starts at zero and only ever grows — no counter resets to explain.
//!
//! Layer: imported by `driver`, `experiment` and `dist`; imports `measure` and below.

pub mod http;
pub mod model;
pub mod proto;
pub mod series;
pub mod text;

use crate::error::UsageError;
use crate::measure::Stats;
use series::{Key, PhaseSeries};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use series::Key as SeriesKey;

/// `--metrics-linger`'s default: how long the process waits, after its last interval, for a
/// scrape to read the final values.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(30);

/// One interval as the exporter takes it.
pub struct Interval<'a> {
    pub stats: &'a Stats,
    /// The interval's length (for the achieved rate).
    pub seconds: f64,
    /// Warm-up intervals update the gauges only: the counters and histograms hold the
    /// measured window, as summary.json does.
    pub warmup: bool,
    /// Open loop: the schedule's offered rate and how far behind it the sender was.
    pub offered_ops_per_s: Option<f64>,
    pub behind_s: Option<f64>,
}

#[derive(Default)]
struct State {
    phases: BTreeMap<Key, PhaseSeries>,
    /// Power's source and whether it is an estimate, per series.
    power: BTreeMap<Key, (String, bool)>,
    generation: u64,
}

/// A running endpoint.
pub struct Exporter {
    addr: SocketAddr,
    state: Mutex<State>,
    shared: Arc<http::Shared>,
}

impl Exporter {
    /// Binds `addr` (HOST:PORT) and starts serving; prints where. A bad address or a port in
    /// use is a usage error (exit 2), raised before anything else is created.
    pub fn bind(addr: &str) -> Result<Arc<Exporter>, UsageError> {
        let bad = |why: String| {
            UsageError::new(format!(
                "--metrics-addr {addr:?}: expected HOST:PORT (e.g. 127.0.0.1:9464); {why}"
            ))
        };
        let sock = addr
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("it names no address".into()))?;
        // The address is well formed from here on: a port in use is not a syntax error.
        let refused = |why: String| UsageError::new(format!("--metrics-addr {addr:?}: {why}"));
        let listener = TcpListener::bind(sock).map_err(|e| {
            refused(match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    format!(
                        "cannot listen: {e} (another process serves there; choose another port)"
                    )
                }
                _ => format!("cannot listen: {e}"),
            })
        })?;
        let local = listener.local_addr().map_err(|e| refused(e.to_string()))?;
        let shared = Arc::new(http::Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("kvm-metrics".into())
            .spawn(move || http::serve(listener, s))
            .map_err(|e| refused(format!("cannot start its thread: {e}")))?;
        if local.ip().is_loopback() {
            errln!("metrics: serving http://{local}/metrics (loopback only)");
        } else {
            errln!(
                "metrics: serving http://{local}/metrics, reachable from the network (no authentication)"
            );
        }
        let e = Arc::new(Exporter {
            addr: local,
            state: Mutex::new(State::default()),
            shared,
        });
        e.publish();
        Ok(e)
    }

    /// The address it serves (the port chosen when PORT was 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one interval of `key`'s phase and publishes.
    pub fn interval(&self, key: &Key, iv: &Interval) {
        {
            let mut st = self.state();
            let p = st.phases.entry(key.clone()).or_default();
            if !iv.warmup {
                p.add(iv.stats);
            }
            if iv.seconds > 0.0 {
                let rate = iv.stats.transactions() as f64 / iv.seconds;
                p.gauges.insert("kvmeter_achieved_ops_per_second", rate);
            }
            if let Some(o) = iv.offered_ops_per_s {
                p.gauges.insert("kvmeter_offered_ops_per_second", o);
            }
            if let Some(b) = iv.behind_s {
                p.gauges.insert("kvmeter_behind_seconds", b);
            }
        }
        self.publish();
    }

    /// Sets gauges of `key` (names from `model::GAUGES`; others are ignored); published with
    /// the next interval.
    pub fn gauges(&self, key: &Key, values: &[(&'static str, f64)]) {
        let mut st = self.state();
        let p = st.phases.entry(key.clone()).or_default();
        for (n, v) in values {
            if let Some((name, _)) = model::GAUGES.iter().find(|(g, _)| g == n) {
                p.gauges.insert(name, *v);
            }
        }
    }

    /// Sets counters of `key` whole (names from `model::TOTALS`, without `_total`; others
    /// are ignored): a counter read from elsewhere, such as a process's CPU seconds. Published
    /// with the next interval.
    pub fn totals(&self, key: &Key, values: &[(&'static str, f64)]) {
        let mut st = self.state();
        let p = st.phases.entry(key.clone()).or_default();
        for (n, v) in values {
            if let Some((name, _)) = model::TOTALS.iter().find(|(c, _)| c == n) {
                p.totals.insert(name, *v);
            }
        }
    }

    /// The store's own statistics of `key` at their latest sample (`store::stats`): a value
    /// the store did not give is withdrawn rather than left stale. Published with the next
    /// interval.
    pub fn store_stats(
        &self,
        key: &Key,
        specs: &[crate::store::stats::StatSpec],
        values: &[Option<u64>],
    ) {
        let mut st = self.state();
        let p = st.phases.entry(key.clone()).or_default();
        for (s, v) in specs.iter().zip(values) {
            match v {
                Some(v) => {
                    let counter = s.kind == crate::store::stats::StatKind::Counter;
                    p.store.insert(s.name, (counter, s.unit, *v as f64));
                }
                None => {
                    p.store.remove(s.name);
                }
            }
        }
    }

    /// The events the store logged in `key`'s phase so far, by kind.
    pub fn store_events(&self, key: &Key, counts: &BTreeMap<String, u64>) {
        let mut st = self.state();
        st.phases.entry(key.clone()).or_default().store_events = counts.clone();
    }

    /// Where `key`'s power figures come from, and whether they are an estimate.
    pub fn power_source(&self, key: &Key, source: &str, estimate: bool) {
        self.state()
            .power
            .insert(key.clone(), (source.to_string(), estimate));
    }

    /// Counts one fault event of `kind`; published with the next interval.
    pub fn fault(&self, key: &Key, kind: &str) {
        let mut st = self.state();
        let p = st.phases.entry(key.clone()).or_default();
        *p.faults.entry(kind.to_string()).or_default() += 1;
    }

    /// Renders the exposition and swaps it in.
    pub fn publish(&self) {
        let bodies = {
            let mut st = self.state();
            st.generation += 1;
            let fams = model::families(&st.phases, &st.power);
            http::Bodies {
                generation: st.generation,
                text: text::render(&fams).into_bytes(),
                proto: proto::render(&fams),
            }
        };
        *self.shared.bodies.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(bodies);
    }

    /// After the last interval: publishes, then keeps serving until a scrape has read the
    /// final values, `linger` has passed, or `stop` is set (Ctrl-C). Says so on stderr.
    /// Returns whether a scrape read them.
    pub fn finish(&self, linger: Duration, stop: &AtomicBool) -> bool {
        self.publish();
        let last = self.state().generation;
        let read = || self.shared.served.load(Ordering::Acquire) >= last;
        if read() || linger.is_zero() {
            return read();
        }
        errln!(
            "metrics: the run is over; serving its final values on http://{}/metrics until one scrape reads them (at most {}, Ctrl-C ends the wait)",
            self.addr,
            humantime::format_duration(linger)
        );
        let until = Instant::now() + linger;
        while !read() && Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        read()
    }
}

/// The run directory's path, relative to the working directory when it lies under it (a
/// sweep's `kvmeter-runs/<time>-sweep-redis/points/01-threads=1/r1`), else absolute: unique
/// among the runs of one process, where the directory's name alone is not (every sweep
/// point's first repeat is `r1`).
pub fn run_label(rundir: &std::path::Path) -> String {
    let abs = std::path::absolute(rundir).unwrap_or_else(|_| rundir.to_path_buf());
    let rel = std::env::current_dir()
        .ok()
        .and_then(|c| abs.strip_prefix(c).ok().map(|p| p.to_path_buf()))
        .filter(|p| !p.as_os_str().is_empty());
    rel.unwrap_or(abs).to_string_lossy().into_owned()
}

static CURRENT: Mutex<Option<Arc<Exporter>>> = Mutex::new(None);

/// Makes `e` the process's exporter: every run started from now on feeds it.
pub fn install(e: Arc<Exporter>) {
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
}

/// The process's exporter, if `--metrics-addr` started one.
pub fn current() -> Option<Arc<Exporter>> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Metric;
    use crate::store::Status;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, req: &str) -> String {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn hostile_requests_are_refused_and_the_server_goes_on() {
        let e = Exporter::bind("127.0.0.1:0").unwrap();
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(http::MAX_REQUEST)
        );
        let mut c = std::net::TcpStream::connect(e.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.write_all(big.as_bytes());
        let mut out = String::new();
        // The server closes without reading the rest: the reply, or a reset before it.
        let _ = c.read_to_string(&mut out);
        assert!(out.is_empty() || out.starts_with("HTTP/1.1 431"), "{out}");
        assert!(get(e.addr(), "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(get(e.addr(), "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn an_interval_is_served_and_a_scrape_ends_the_linger() {
        let e = Exporter::bind("127.0.0.1:0").unwrap();
        let key = Key {
            run: "r1".into(),
            phase: "run".into(),
            store: "memcached".into(),
            agent: String::new(),
        };
        let mut s = Stats::new(&[Metric::Read], false);
        for _ in 0..7 {
            s.record(Metric::Read, Status::Ok, 1_000_000, 0, 10);
        }
        s.record(Metric::Read, Status::NotFound, 1_000_000, 0, 0);
        let iv = |warmup| Interval {
            stats: &s,
            seconds: 1.0,
            warmup,
            offered_ops_per_s: None,
            behind_s: None,
        };
        e.interval(&key, &iv(true));
        e.interval(&key, &iv(false));
        e.interval(&key, &iv(false));
        let body = get(e.addr(), "GET /metrics HTTP/1.1\r\n\r\n");
        let l = "{run=\"r1\",phase=\"run\",store=\"memcached\",agent=\"\",op=\"READ\"";
        assert!(
            body.contains(&format!("kvmeter_operations_total{l}}} 16\n")),
            "{body}"
        );
        assert!(body.contains(&format!("kvmeter_errors_total{l},kind=\"not_found\"}} 2\n")));
        assert!(body.contains(&format!("kvmeter_latency_seconds_count{l}}} 14\n")));
        assert!(
            body.contains(&format!("kvmeter_hits_total{l}}} 14\n")),
            "{body}"
        );
        assert!(body.contains(&format!("kvmeter_misses_total{l}}} 2\n")));
        assert!(body.contains(&format!("kvmeter_hit_ratio{l}}} 0.875\n")));
        assert!(body.contains(&format!("kvmeter_missed_latency_seconds_count{l}}} 2\n")));
        assert!(get(e.addr(), "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        // The final values: the scrape above read generation 4; finish publishes a 5th.
        let (stop, e2) = (Arc::new(AtomicBool::new(false)), e.clone());
        let h = std::thread::spawn(move || e2.finish(Duration::from_secs(20), &stop));
        std::thread::sleep(Duration::from_millis(200));
        assert!(get(e.addr(), "GET /metrics HTTP/1.0\r\n\r\n").contains("200 OK"));
        assert!(h.join().unwrap());
    }
}
