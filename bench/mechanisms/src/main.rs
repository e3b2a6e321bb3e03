//! Issue 30's mechanism candidates, measured (bench/mechanisms.sh, BENCHMARKS.md "Engine
//! mechanism"): one closed-loop memcached GET load generator written three ways with the same
//! shape, so that the only difference between runs is how the sockets are driven.
//!
//! `--threads T` loops, `--conns N` connections in total spread over them, `--depth D` requests
//! in flight on each, refilled as replies arrive; every request timed from its send into an HDR
//! histogram (proto.rs: the per-request work kvmeter's engine does). Mechanisms (`--mech`):
//! - `mio`: epoll edge-triggered through mio 1.x, one `Poll` per thread (kvmeter's engine);
//! - `tokio`: a current_thread runtime per thread, one task per connection;
//! - `tokio-mt`: one multi-thread runtime with T workers, one task per connection;
//! - `uring`: io_uring through the `io-uring` crate, one ring per thread, a recv and a send
//!   SQE per connection (no provided buffers, no multishot).
//!
//! Connections are opened (blocking, in the main thread) before the clock starts; the measured
//! window's client CPU comes from getrusage(RUSAGE_SELF) at its two ends. One output line (TSV,
//! `--header` prints the column names).
//!
//!   kvmeter-mechanisms --addr 127.0.0.1:PORT --load --keys 100000
//!   kvmeter-mechanisms --addr 127.0.0.1:PORT --mech mio --conns 1000 --depth 1 --secs 5

mod mio_mech;
mod proto;
mod tokio_mech;
mod uring_mech;

use proto::Tally;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::exit;
use std::time::{Duration, Instant};

/// What every mechanism's loop gets.
pub struct Job {
    pub socks: Vec<TcpStream>,
    /// Number of socks[0] across the run (its key stream).
    pub first: u64,
    pub depth: usize,
    pub keys: u64,
    pub deadline: Instant,
}

struct Args {
    addr: String,
    mech: String,
    threads: usize,
    conns: usize,
    depth: usize,
    keys: u64,
    secs: f64,
    load: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("kvmeter-mechanisms: {msg}");
    exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        addr: "127.0.0.1:11211".into(),
        mech: "mio".into(),
        threads: 2,
        conns: 2,
        depth: 1,
        keys: 100_000,
        secs: 5.0,
        load: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{f} needs a value")))
        };
        match f.as_str() {
            "--addr" => a.addr = val(),
            "--mech" => a.mech = val(),
            "--threads" => {
                a.threads = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--threads: expected an integer"))
            }
            "--conns" => {
                a.conns = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--conns: expected an integer"))
            }
            "--depth" => {
                a.depth = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--depth: expected an integer"))
            }
            "--keys" => {
                a.keys = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--keys: expected an integer"))
            }
            "--secs" => {
                a.secs = val()
                    .parse()
                    .unwrap_or_else(|_| usage("--secs: expected seconds"))
            }
            "--load" => a.load = true,
            "--probe" => {
                // Whether this kernel allows io_uring, and in which set-up mode.
                let (_, fast) = uring_mech::ring(8, 16);
                println!(
                    "io_uring: available ({})",
                    if fast {
                        "SINGLE_ISSUER|DEFER_TASKRUN"
                    } else {
                        "plain set-up only"
                    }
                );
                exit(0)
            }
            "--header" => {
                println!("mech\tthreads\tconns\tdepth\tsecs\tops\tops_per_s\twin_cpu_s\twin_cpu_ns_per_op\tp50_us\tp99_us\tmisses\terrors\tmaxrss_kib");
                exit(0)
            }
            _ => usage(&format!("unknown flag {f}")),
        }
    }
    if a.threads == 0
        || a.conns < a.threads
        || !(1..=64).contains(&a.depth)
        || a.keys == 0
        || a.keys > 9_999_999
    {
        usage("expected --threads >= 1, --conns >= --threads, --depth 1..=64, --keys 1..=9999999");
    }
    if !["mio", "tokio", "tokio-mt", "uring"].contains(&a.mech.as_str()) {
        usage("--mech: expected mio, tokio, tokio-mt or uring");
    }
    a
}

/// `--load`: every key set to 1,024 bytes, over 8 connections, 100 sets pipelined per write.
fn load(a: &Args) {
    let per = a.keys.div_ceil(8);
    std::thread::scope(|s| {
        for c in 0..8u64 {
            let addr = a.addr.clone();
            let (lo, hi) = (c * per, ((c + 1) * per).min(a.keys));
            s.spawn(move || {
                let mut sock = TcpStream::connect(&addr)
                    .unwrap_or_else(|e| usage(&format!("--addr {addr}: {e}")));
                let value = vec![b'v'; 1024];
                let mut k = lo;
                let mut reply = vec![0u8; 8 * 100];
                while k < hi {
                    let n = (hi - k).min(100);
                    let mut out = Vec::with_capacity(1100 * n as usize);
                    for i in k..k + n {
                        out.extend_from_slice(b"set key:");
                        proto::push_key(&mut out, i);
                        out.extend_from_slice(b" 0 0 1024\r\n");
                        out.extend_from_slice(&value);
                        out.extend_from_slice(b"\r\n");
                    }
                    sock.write_all(&out).unwrap();
                    let want = 8 * n as usize; // "STORED\r\n"
                    sock.read_exact(&mut reply[..want]).unwrap();
                    assert!(
                        reply[..want].chunks(8).all(|r| r == b"STORED\r\n"),
                        "set failed"
                    );
                    k += n;
                }
            });
        }
    });
}

fn cpu_seconds() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn max_rss_kib() -> i64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss
}

fn main() {
    let a = parse_args();
    if a.load {
        load(&a);
        return;
    }
    let mut socks = Vec::with_capacity(a.conns);
    for _ in 0..a.conns {
        let s = TcpStream::connect(&a.addr)
            .unwrap_or_else(|e| usage(&format!("--addr {}: connect: {e}", a.addr)));
        s.set_nodelay(true).unwrap();
        socks.push(s);
    }
    // Spread: thread t gets connections t, t+T, ... (contiguous numbering per job).
    let mut jobs: Vec<Vec<TcpStream>> = (0..a.threads).map(|_| Vec::new()).collect();
    for (i, s) in socks.into_iter().enumerate() {
        jobs[i % a.threads].push(s);
    }
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.secs);
    let mut first = 0u64;
    let jobs: Vec<Job> = jobs
        .into_iter()
        .map(|socks| {
            let j = Job {
                first,
                depth: a.depth,
                keys: a.keys,
                deadline,
                socks,
            };
            first += j.socks.len() as u64;
            j
        })
        .collect();
    let tally: Tally = match a.mech.as_str() {
        "mio" => run_threads(jobs, mio_mech::run),
        "uring" => run_threads(jobs, uring_mech::run),
        "tokio" => run_threads(jobs, tokio_mech::run_current_thread),
        _ => tokio_mech::run_multi_thread(jobs, a.threads),
    };
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let ops = tally.hist.len();
    let q = |p: f64| tally.hist.value_at_quantile(p) as f64 / 1000.0;
    println!(
        "{}\t{}\t{}\t{}\t{:.3}\t{}\t{:.0}\t{:.3}\t{:.0}\t{:.1}\t{:.1}\t{}\t{}\t{}",
        a.mech,
        a.threads,
        a.conns,
        a.depth,
        elapsed,
        ops,
        ops as f64 / elapsed,
        cpu,
        if ops > 0 { cpu * 1e9 / ops as f64 } else { 0.0 },
        q(0.5),
        q(0.99),
        tally.misses,
        tally.errors,
        max_rss_kib()
    );
    if tally.errors > 0 || tally.misses > 0 {
        eprintln!(
            "warning: {} errors, {} misses (was the key space loaded?)",
            tally.errors, tally.misses
        );
    }
}

/// One OS thread per job, each running `f`, tallies merged.
fn run_threads(jobs: Vec<Job>, f: fn(Job) -> Tally) -> Tally {
    let hs: Vec<_> = jobs
        .into_iter()
        .map(|j| std::thread::spawn(move || f(j)))
        .collect();
    let mut t = Tally::new();
    for h in hs {
        t.merge(&h.join().expect("loop panicked"));
    }
    t
}
