//! The in-process fuzz driver: seeds, byte mutations and random generation, each input run
//! under `catch_unwind` on a worker thread that a watchdog abandons (and reports as a hang)
//! when one input takes longer than the limit. Counts inputs, panics and hangs, measures the
//! target's peak RSS (VmHWM, reset per target through /proc/self/clear_refs) and saves every
//! crashing or hanging input.
//!
//! Blind (no coverage feedback) on purpose: it runs on stable Rust with no instrumentation, so
//! CI and `bench/fuzz.sh` need nothing beyond `cargo test`. Depth comes from structure-aware
//! seeds and dictionaries instead: each target's seeds are valid inputs, its dictionary holds
//! the keys and tokens of its grammar, and inputs the target accepts join the corpus.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A fuzz target: a parser and what valid input looks like.
pub struct Target {
    pub name: &'static str,
    /// Valid (or interesting) inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Tokens of the input's grammar, spliced in by the mutator.
    pub dict: &'static [&'static str],
    /// Runs one input; `true` when the parser accepted it. Must never panic or hang.
    pub run: fn(&[u8]) -> bool,
}

/// One target's figures.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub target: String,
    pub inputs: u64,
    pub accepted: u64,
    pub panics: u64,
    pub hangs: u64,
    pub peak_rss_mb: f64,
    pub secs: f64,
    /// Saved crashing/hanging inputs, with the panic message.
    pub crashes: Vec<(PathBuf, String)>,
}

/// Numbers that break parsers: boundaries of every integer width, floats that overflow
/// conversions, and forms that look like numbers.
pub const INTERESTING: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "7",
    "10",
    "100",
    "255",
    "256",
    "-128",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "340282366920938463463374607431768211456",
    "1e19",
    "1e20",
    "1e308",
    "1e309",
    "-1e308",
    "1e-300",
    "0.0000001",
    "0.5",
    "1.5",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "+1",
    "0x10",
    "1_000",
    "00000000000000000000001",
    " 1",
    "1 ",
    "",
    "1e",
    ".",
    "-",
    "1.",
];

/// Largest input the mutator builds.
const MAX_LEN: usize = 1 << 16;
/// Corpus entries kept per target (seeds plus accepted mutants), each at most MAX_KEPT bytes
/// (at most 8 MiB in all).
const MAX_CORPUS: usize = 2048;
const MAX_KEPT: usize = 4096;

/// xorshift64*: fast, seeded, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// Makes a new input from the corpus: usually a few stacked mutations of one entry,
/// sometimes a fresh random input.
fn mutate(rng: &mut Rng, corpus: &[Vec<u8>], dict: &[&str]) -> Vec<u8> {
    if rng.below(64) == 0 {
        return generate(rng, dict);
    }
    let mut v = rng.pick(corpus).clone();
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut v, corpus, dict);
    }
    v.truncate(MAX_LEN);
    v
}

/// Random bytes, or random tokens of the grammar joined by separators.
fn generate(rng: &mut Rng, dict: &[&str]) -> Vec<u8> {
    let n = rng.below(64);
    if rng.below(4) == 0 || dict.is_empty() {
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut v = Vec::new();
    for _ in 0..n {
        let t = if rng.below(3) == 0 {
            *rng.pick(INTERESTING)
        } else {
            *rng.pick(dict)
        };
        v.extend_from_slice(t.as_bytes());
        v.push(*rng.pick(b"\n,=: \"-/"));
    }
    v
}

fn mutate_once(rng: &mut Rng, v: &mut Vec<u8>, corpus: &[Vec<u8>], dict: &[&str]) {
    let at = |rng: &mut Rng, v: &Vec<u8>| rng.below(v.len() + 1);
    match rng.below(11) {
        0 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] ^= 1 << rng.below(8);
        }
        1 if !v.is_empty() => {
            let i = rng.below(v.len());
            v[i] = *rng.pick(b"\0\x7f\x80\xff\n\r\t =,:-./\\\"'{}[]#$*+0123456789e");
        }
        2 if !v.is_empty() => {
            let i = rng.below(v.len());
            let n = 1 + rng.below((v.len() - i).min(32));
            v.drain(i..i + n);
        }
        3 if !v.is_empty() => {
            // A long repeat of a chunk: lengths, nesting and buffers at scale.
            let i = rng.below(v.len());
            let n = 1 + rng.below((v.len() - i).min(16));
            let chunk = v[i..i + n].to_vec();
            let most = if rng.below(8) == 0 { 4096 } else { 16 };
            let times = 1 + rng.below(most);
            let tail = v.split_off(i);
            for _ in 0..times {
                v.extend_from_slice(&chunk);
            }
            v.extend_from_slice(&tail);
        }
        4 => {
            // Splice: a piece of another entry.
            let o = rng.pick(corpus);
            if !o.is_empty() {
                let a = rng.below(o.len());
                let b = a + rng.below(o.len() - a + 1);
                let i = at(rng, v);
                v.splice(i..i, o[a..b].iter().copied());
            }
        }
        5 | 6 => replace_number(rng, v),
        7 | 8 if !dict.is_empty() => {
            let t = rng.pick(dict).as_bytes();
            let i = at(rng, v);
            v.splice(i..i, t.iter().copied());
        }
        9 => {
            let t = rng.pick(INTERESTING).as_bytes();
            let i = at(rng, v);
            v.splice(i..i, t.iter().copied());
        }
        _ => {
            // Cut: a prefix (a reply or file ended early).
            let i = at(rng, v);
            v.truncate(i);
        }
    }
}

/// Replaces a run of digits (with sign, dot, exponent) by an interesting number.
fn replace_number(rng: &mut Rng, v: &mut Vec<u8>) {
    let starts: Vec<usize> = (0..v.len())
        .filter(|&i| v[i].is_ascii_digit() && (i == 0 || !v[i - 1].is_ascii_digit()))
        .collect();
    let t = rng.pick(INTERESTING).as_bytes();
    if starts.is_empty() {
        let i = rng.below(v.len() + 1);
        v.splice(i..i, t.iter().copied());
        return;
    }
    let s = *rng.pick(&starts);
    let mut e = s;
    while e < v.len() && (v[e].is_ascii_digit() || b".eE-+".contains(&v[e])) {
        e += 1;
    }
    v.splice(s..e, t.iter().copied());
}

/// VmHWM of this process in MiB.
pub fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Resets VmHWM to the current RSS, so each target's peak is its own.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

type Job = (Vec<u8>, mpsc::Sender<Result<bool, String>>);

/// A worker thread that runs inputs of `run` under catch_unwind.
fn worker(run: fn(&[u8]) -> bool) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("fuzz-worker".into())
        .spawn(move || {
            for (input, reply) in rx {
                let r = std::panic::catch_unwind(AssertUnwindSafe(|| run(&input)))
                    .map_err(|_| last_panic());
                let _ = reply.send(r);
            }
        })
        .expect("spawn fuzz worker");
    tx
}

thread_local! {
    static PANIC: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Quiet panics (a fuzzer expects some) but keep the message and place for the report.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = match (
            info.payload().downcast_ref::<&str>(),
            info.payload().downcast_ref::<String>(),
        ) {
            (Some(s), _) => s.to_string(),
            (_, Some(s)) => s.clone(),
            _ => "panic".into(),
        };
        let place = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {place}"));
    }));
}

fn last_panic() -> String {
    PANIC.with(|p| std::mem::take(&mut *p.borrow_mut()))
}

/// Settings of one campaign.
pub struct Settings {
    pub secs_per_target: f64,
    pub hang_limit: Duration,
    pub seed: u64,
    /// Where crashing and hanging inputs are saved.
    pub crash_dir: PathBuf,
    /// Write each input to `<crash_dir>/<target>-last-input` before running it (slower; for
    /// finding the input behind an abort).
    pub trace: bool,
    /// Start with mutants (a restart after an abort: the seeds already ran).
    pub skip_seeds: bool,
}

/// Runs `t` for the configured time.
pub fn fuzz(t: &Target, s: &Settings) -> Outcome {
    let mut rng = Rng::new(s.seed ^ fnv(t.name));
    let mut corpus = (t.seeds)();
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    let mut out = Outcome {
        target: t.name.to_string(),
        ..Default::default()
    };
    reset_peak();
    let mut tx = worker(t.run);
    let (mut rtx, mut rrx) = mpsc::channel();
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(s.secs_per_target);
    let mut seeds_left = if s.skip_seeds { 0 } else { corpus.len() };
    let trace = s.trace.then(|| {
        let _ = std::fs::create_dir_all(&s.crash_dir);
        s.crash_dir.join(format!("{}-last-input", t.name))
    });
    while t0.elapsed() < budget {
        // Every seed once, then mutants.
        let input = if seeds_left > 0 {
            seeds_left -= 1;
            corpus[seeds_left].clone()
        } else {
            mutate(&mut rng, &corpus, t.dict)
        };
        if let Some(p) = &trace {
            // The input about to run, for a crash that takes the process (an abort).
            let _ = std::fs::write(p, &input);
        }
        if tx.send((input.clone(), rtx.clone())).is_err() {
            tx = worker(t.run);
            continue;
        }
        out.inputs += 1;
        match rrx.recv_timeout(s.hang_limit) {
            Ok(Ok(true)) => {
                out.accepted += 1;
                // Small inputs only: the corpus's own memory stays out of the RSS figure.
                let keep = input.len() <= MAX_KEPT;
                if keep && corpus.len() < MAX_CORPUS {
                    corpus.push(input);
                } else if keep && rng.below(16) == 0 {
                    let i = rng.below(corpus.len());
                    corpus[i] = input;
                }
            }
            Ok(Ok(false)) => {}
            Ok(Err(msg)) => {
                out.panics += 1;
                let p = save(&s.crash_dir, t.name, "panic", &input, &msg);
                out.crashes.push((p, msg));
            }
            Err(_) => {
                // The stuck worker is abandoned (it cannot be killed); a new one goes on, and
                // its late reply goes to a channel nobody reads.
                out.hangs += 1;
                let msg = format!("no answer within {:?}", s.hang_limit);
                let p = save(&s.crash_dir, t.name, "hang", &input, &msg);
                out.crashes.push((p, msg));
                tx = worker(t.run);
                (rtx, rrx) = mpsc::channel();
                if out.hangs >= 3 {
                    break;
                }
            }
        }
    }
    out.secs = t0.elapsed().as_secs_f64();
    out.peak_rss_mb = peak_rss_mb();
    out
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Saves an input as `<dir>/<target>-<kind>-<hash>` (and the message beside it).
fn save(dir: &Path, target: &str, kind: &str, input: &[u8], msg: &str) -> PathBuf {
    let _ = std::fs::create_dir_all(dir);
    let h = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let p = dir.join(format!("{target}-{kind}-{h:016x}"));
    let _ = std::fs::write(&p, input);
    let _ = std::fs::write(p.with_extension("txt"), format!("{msg}\n"));
    p
}

/// The table `bench/fuzz.sh` prints.
pub fn table(rows: &[Outcome]) -> String {
    let mut s = format!(
        "{:<18} {:>10} {:>10} {:>7} {:>6} {:>13}\n",
        "target", "inputs", "accepted", "panics", "hangs", "peak RSS MB"
    );
    for r in rows {
        s += &format!(
            "{:<18} {:>10} {:>10} {:>7} {:>6} {:>13.1}\n",
            r.target, r.inputs, r.accepted, r.panics, r.hangs, r.peak_rss_mb
        );
    }
    let total: u64 = rows.iter().map(|r| r.inputs).sum();
    let peak = rows.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max);
    s += &format!(
        "{:<18} {:>10} {:>10} {:>7} {:>6} {:>13.1}\n",
        "total",
        total,
        rows.iter().map(|r| r.accepted).sum::<u64>(),
        rows.iter().map(|r| r.panics).sum::<u64>(),
        rows.iter().map(|r| r.hangs).sum::<u64>(),
        peak
    );
    s
}
