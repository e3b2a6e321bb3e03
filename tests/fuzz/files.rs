//! Fuzz targets over what kvmeter reads back: HdrHistogram bytes, the interval wire JSON
//! agents post, HdrHistogram interval logs, run directories (`report`, `compare`) and agent
//! directories (`dist merge`). Directory targets rewrite one file of a real directory kept in
//! tests/fuzz/seeds/ (the input's first byte picks the file) and call the command's loader.

use super::engine::Target;
use super::targets::{files_in, scratch, seed_dir, text, unsafe_input};
use std::path::{Path, PathBuf};

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "hdr",
            seeds: seeds_hdr,
            dict: &[],
            run: hdr,
        },
        Target {
            name: "wire",
            seeds: seeds_wire,
            dict: WIRE_DICT,
            run: wire,
        },
        Target {
            name: "hlog",
            seeds: seeds_hlog,
            dict: &["#", ",", "\n", "HISTEw", "HISTFAAAA"],
            run: hlog,
        },
        Target {
            name: "rundir",
            seeds: seeds_rundir,
            dict: RUNDIR_DICT,
            run: rundir,
        },
        Target {
            name: "report",
            seeds: seeds_rundir,
            dict: RUNDIR_DICT,
            run: report,
        },
        Target {
            name: "merge",
            seeds: seeds_merge,
            dict: MERGE_DICT,
            run: merge,
        },
        Target {
            name: "relay_frames",
            seeds: seeds_relay,
            dict: RELAY_DICT,
            run: relay_frames,
        },
    ]
}

const RELAY_DICT: &[&str] = &[
    "hello/2/0000",
    "hello",
    "iv/0/000000/0000",
    "done/0/0000",
    "challenge/2",
    "\u{0}\u{c}",
    "\u{ff}\u{ff}",
];

fn relay_key() -> kvmeter::distributed::seal::Seal {
    kvmeter::distributed::seal::Seal::load(None, Some("fuzz-plan-key-0123456789".into()))
        .unwrap()
        .for_run("fuzz-nonce")
}

/// Byte streams an agent could send: a hello (sealed for a challenge the coordinator never
/// sent: the real inbox refuses it, the direct parse goes on), reports, an old hello.
fn seeds_relay() -> Vec<Vec<u8>> {
    use kvmeter::distributed::relay::encode_frame;
    let seal = relay_key();
    let pre = "/kvmeter/fuzz/";
    let c = "00112233445566778899aabbccddeeff";
    let mut a = vec![];
    encode_frame(
        &mut a,
        "hello/2/0000",
        &seal.seal_frame(&format!("{pre}hello/2/0000"), c, 0, ""),
    );
    for (n, k) in ["iv/0/000000/0000", "done/0/0000"].iter().enumerate() {
        encode_frame(
            &mut a,
            k,
            &seal.seal_frame(&format!("{pre}{k}"), c, n as u64 + 1, "{\"agent\":0}"),
        );
    }
    let mut old = vec![];
    encode_frame(&mut old, "hello", &seal.seal(&format!("{pre}hello"), ""));
    vec![a, old]
}

/// The report channel's frames: the parser over the whole input (as the inbox walks a
/// connection's buffer, each frame opened at its place), then the input sent to a real
/// `relay::Inbox` on 127.0.0.1, which must close the connection (a bad frame, or the end).
fn relay_frames(input: &[u8]) -> bool {
    use kvmeter::distributed::relay::{parse_frame, Inbox, MAX_FRAME, MAX_HELLO_FRAME};
    use std::io::{Read, Write};
    use std::sync::OnceLock;
    static INBOX: OnceLock<Inbox> = OnceLock::new();
    let seal = relay_key();
    let (mut at, mut seq, mut frames) = (0, 0u64, 0);
    loop {
        let max = if seq == 0 { MAX_HELLO_FRAME } else { MAX_FRAME };
        match parse_frame(&input[at..], max) {
            Ok(Some((k, v, len))) => {
                assert!(len > 0 && at + len <= input.len(), "a frame past the input");
                let _ = seal.open_frame(&format!("/kvmeter/fuzz/{k}"), "c", seq, v);
                at += len;
                seq += 1;
                frames += 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    fn agent(k: &str) -> Option<usize> {
        k.rsplit('/').next()?.parse().ok()
    }
    let inbox = INBOX.get_or_init(|| {
        Inbox::bind(
            "127.0.0.1:0".parse().unwrap(),
            None,
            relay_key(),
            "/kvmeter/fuzz/".into(),
            2,
            agent,
        )
        .unwrap()
    });
    let mut s = std::net::TcpStream::connect(inbox.addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    let _ = s.write_all(input);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 256];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    assert!(
        inbox.take().is_empty(),
        "a frame without the challenge was accepted"
    );
    let _ = inbox.take_rejected();
    frames > 0
}

// ---- Histograms: HDR bytes, the wire JSON, hlog lines ---------------------------------------

fn sample_stats() -> kvmeter::measure::Stats {
    use kvmeter::measure::{Metric, Stats};
    use kvmeter::store::{ErrorKind, Status};
    let mut s = Stats::new(&[Metric::Read, Metric::Update], true);
    for v in [1u64, 999, 1_000, 35_000, 1_000_000, 3_600_000_000_000] {
        s.record(Metric::Read, Status::Ok, v, v + 10, 100);
    }
    let err = Status::Error {
        kind: ErrorKind::Timeout,
        fatal: false,
    };
    s.record(Metric::Update, err, 50_000, 60_000, 0);
    s.record_lag(123);
    s
}

fn seeds_hdr() -> Vec<Vec<u8>> {
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    let mut out = vec![];
    for v in [1u64, 7, 1000, 123_456, 9_999_999] {
        h.record(v).unwrap();
        let mut a = vec![];
        V2Serializer::new().serialize(&h, &mut a).unwrap();
        let mut b = vec![];
        V2DeflateSerializer::new().serialize(&h, &mut b).unwrap();
        out.extend([a, b]);
    }
    // The review's bomb, raw.
    use base64::Engine as _;
    out.push(
        base64::engine::general_purpose::STANDARD
            .decode("HISTE/////8AAAAAAAAAAwAAAAAAAAABAAAAAAAAAAI/8AAAAAAAAA==")
            .unwrap(),
    );
    out
}

fn hdr(input: &[u8]) -> bool {
    use base64::Engine as _;
    let raw = kvmeter::measure::hdr::decode(input).is_ok();
    let text = base64::engine::general_purpose::STANDARD.encode(input);
    let _ = kvmeter::measure::hdr::decode_base64(&text);
    raw
}

const WIRE_DICT: &[&str] = &[
    "\"paced\"",
    "\"lag\"",
    "\"ops\"",
    "\"metric\"",
    "\"ok\"",
    "\"failed\"",
    "\"intended\"",
    "\"statuses\"",
    "\"bytes\"",
    "\"READ\"",
    "\"UPDATE\"",
    "\"SCAN\"",
    "\"INSERT\"",
    "true",
    "false",
    "null",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    "\"HISTFAAAA",
    "\"HISTE/////8AAAAAAAAAAwAAAAAAAAABAAAAAAAAAAI/8AAAAAAAAA==\"",
];

fn seeds_wire() -> Vec<Vec<u8>> {
    vec![serde_json::to_vec(&sample_stats().to_wire()).unwrap()]
}

fn wire(input: &[u8]) -> bool {
    let Ok(w) = serde_json::from_slice::<kvmeter::measure::wire::WireStats>(input) else {
        return false;
    };
    kvmeter::measure::Stats::from_wire(&w).is_ok()
}

fn seeds_hlog() -> Vec<Vec<u8>> {
    files_in(&seed_dir("rundir").join("latency"))
}

fn hlog(input: &[u8]) -> bool {
    let t = text(input);
    kvmeter::report::rundata::read_hlog(&t, 0.0).is_some()
        | kvmeter::report::rundata::read_hlog(&t, 1.0).is_some()
}

// ---- Run directories (report, compare) and agent directories (dist merge) ------------------

/// Files of a run directory the fuzzer rewrites, by the input's first byte.
const RUNDIR_FILES: &[&str] = &[
    "summary.json",
    "manifest.json",
    "intervals.csv",
    "telemetry.csv",
    "threads.csv",
    "latency/run.READ.hlog",
    "latency/load.INSERT.hlog",
];

const RUNDIR_DICT: &[&str] = &[
    "\"status\"",
    "\"completed\"",
    "\"running\"",
    "\"phases\"",
    "\"name\"",
    "\"ops\"",
    "\"count\"",
    "\"p99_us\"",
    "\"throughput_ops_per_s\"",
    "null",
    "[]",
    "{}",
    ",",
    "\n",
    "phase,start_s,end_s,warmup,metric,count",
    "run",
    "load",
    "READ",
    "UPDATE",
    "INSERT",
    "true",
    "false",
    "NaN",
    "HISTFAAAA",
    "1e308",
];

/// Input: one byte choosing the file, then its new contents.
fn seeds_rundir() -> Vec<Vec<u8>> {
    let dir = seed_dir("rundir");
    RUNDIR_FILES
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let mut v = vec![i as u8];
            v.extend(std::fs::read(dir.join(f)).ok()?);
            Some(v)
        })
        .collect()
}

/// A fresh copy of a seed directory in the scratch space.
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    for e in walk(from) {
        let rel = e.strip_prefix(from).unwrap();
        let dst = to.join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&e, &dst).unwrap();
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Writes the input's file into a fresh copy of the seed run directory.
fn rundir_with(input: &[u8]) -> Option<PathBuf> {
    let (&which, body) = input.split_first()?;
    let dir = scratch().join(format!("rundir-{:?}", std::thread::current().id()));
    copy_dir(&seed_dir("rundir"), &dir);
    let file = RUNDIR_FILES[which as usize % RUNDIR_FILES.len()];
    std::fs::write(dir.join(file), body).ok()?;
    Some(dir)
}

/// What `report` and `compare` read: RunData::load and every histogram in it.
fn rundir(input: &[u8]) -> bool {
    let Some(dir) = rundir_with(input) else {
        return false;
    };
    match kvmeter::report::rundata::RunData::load(&dir) {
        Ok(d) => {
            for p in d.phase_names() {
                for m in d.metrics(&p) {
                    let _ = d.histogram(&p, &m, 0.0);
                    let _ = d.histogram(&p, &m, 0.5);
                }
                let _ = d.phase(&p);
            }
            true
        }
        Err(_) => false,
    }
}

/// The whole `kvmeter report DIR` and `kvmeter compare SEED DIR` on the mutated directory.
fn report(input: &[u8]) -> bool {
    let Some(dir) = rundir_with(input) else {
        return false;
    };
    let ok = kvmeter::report::html::write_with_cost(&dir, None).is_ok();
    if let Ok(c) = kvmeter::report::compare::compare(
        &[seed_dir("rundir")],
        std::slice::from_ref(&dir),
        0.05,
        &[],
    ) {
        let _ = (c.render(), c.html(), c.regressed());
    }
    ok
}

/// Files of an agent's run directory that `dist merge` reads, by the input's first byte.
const MERGE_FILES: &[&str] = &[
    "dist/agent.json",
    "dist/intervals.jsonl",
    "dist/phases.jsonl",
];

const MERGE_DICT: &[&str] = &[
    "\"agent\"",
    "\"phase_index\"",
    "\"phase\"",
    "\"index\"",
    "\"start_s\"",
    "\"end_s\"",
    "\"warmup\"",
    "\"stats\"",
    "\"intervals\"",
    "\"outcome\"",
    "\"operations\"",
    "\"request\"",
    "\"registration\"",
    "\"published\"",
    "\"starts\"",
    "\"count\"",
    "\"duration\"",
    "\"store\"",
    "\"threads\"",
    "\"records\"",
    "null",
    "true",
    "false",
    "\n",
    ",",
    ":",
    "\"HISTE/////8AAAAAAAAAAwAAAAAAAAABAAAAAAAAAAI/8AAAAAAAAA==\"",
];

fn seeds_merge() -> Vec<Vec<u8>> {
    let dir = seed_dir("merge");
    MERGE_FILES
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let mut v = vec![i as u8];
            v.extend(std::fs::read(dir.join(f)).ok()?);
            Some(v)
        })
        .collect()
}

fn merge(input: &[u8]) -> bool {
    let Some((&which, body)) = input.split_first() else {
        return false;
    };
    if unsafe_input(&text(body)) {
        return false;
    }
    let base = scratch().join(format!("merge-{:?}", std::thread::current().id()));
    let dir = base.join("agent");
    copy_dir(&seed_dir("merge"), &dir);
    std::fs::write(
        dir.join(MERGE_FILES[which as usize % MERGE_FILES.len()]),
        body,
    )
    .unwrap();
    let out = base.join("merged");
    let _ = std::fs::remove_dir_all(&out);
    let ok = kvmeter::distributed::offline::offline(&[dir], Some(out.clone()), None).is_ok();
    let _ = std::fs::remove_dir_all(&out);
    ok
}
