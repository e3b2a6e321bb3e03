//! RESP: Redis, Redis Cluster (where a server sends kvmeter, F9) and Sentinel.

use super::*;

// ---- Redis (RESP) ----

const INFO: &[u8] = b"$40\r\nredis_version:7.0.0\r\nloading:0\r\nrole:m\r\n\r\n";

/// Sane answers to the ping (INFO) and the connection setup; `hostile` to the reads.
macro_rules! redis {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            if has(req, b"INFO") {
                say(INFO)
            } else {
                $hostile
            }
        }
        tcp_server(answer)
    }};
}

/// Sane answers to the ping, the reads (every key a miss) and the writes; `hostile` to the
/// statistics (`INFO all`, on a connection of its own).
macro_rules! redis_info {
    ($hostile:expr) => {{
        fn answer(req: &[u8]) -> Act {
            // The statistics' INFO: several sections (Redis 7), or `all` after a refusal.
            if has(req, b"INFO\r\n$3\r\nall") || has(req, b"INFO\r\n$5\r\nstats") {
                $hostile
            } else if has(req, b"INFO") {
                say(INFO)
            } else {
                say(b"*0\r\n")
            }
        }
        tcp_server(answer)
    }};
}

/// A Redis before 7.0 refuses INFO with several sections: the statistics ask for `INFO all`
/// instead and get them.
#[test]
fn redis_before_7_refuses_info_sections_and_answers_info_all() {
    fn answer(req: &[u8]) -> Act {
        let body = b"$45\r\n# Stats\r\nkeyspace_hits:7\r\nkeyspace_misses:3\r\n\r\n";
        if has(req, b"INFO\r\n$5\r\nstats") {
            say(b"-ERR syntax error\r\n")
        } else if has(req, b"INFO\r\n$3\r\nall") {
            say(body)
        } else if has(req, b"INFO") {
            say(INFO)
        } else {
            say(b"*0\r\n")
        }
    }
    let o = run("redis", tcp_server(answer), &[]);
    sane(&o);
    let summary = json(&o.out.join("summary.json"));
    let stats = &phase(&summary, "run")["store_stats"]["stats"];
    assert_eq!(stats["keyspace_hits"]["increase"], 0, "{stats}");
    assert_eq!(stats["keyspace_misses"]["increase"], 0, "{stats}");
}

#[test]
fn redis_info_bulk_of_a_terabyte() {
    let port = redis_info!(say(b"$999999999999\r\n"));
    stats_unavailable(&run("redis", port, &[]), "max_reply");
}

#[test]
fn redis_info_endless() {
    let port = redis_info!(Act::Endless(b"$200000\r\n".to_vec(), b"x".to_vec()));
    stats_unavailable(&run("redis", port, &[]), "a bulk without its end");
}

#[test]
fn redis_info_one_byte_a_second() {
    let port = redis_info!(drip(b"$5\r\nhello\r\n"));
    stats_unavailable(&run("redis", port, &[]), "no complete reply within 1000 ms");
}

/// A server whose statistics take 700 ms to come (inside the 1 s deadline) while intervals
/// are 200 ms: the store is asked on a thread of its own, so the interval loop keeps its
/// clock, the boundaries met while a sample is outstanding are skipped and counted, and the
/// samples that came are the figures.
#[test]
fn redis_info_slower_than_the_interval_is_sampled_less_often_not_waited_for() {
    const BODY: &[u8] = b"$45\r\n# Stats\r\nkeyspace_hits:7\r\nkeyspace_misses:3\r\n\r\n";
    let port = redis_info!(Act::Late(BODY.to_vec(), Duration::from_millis(700)));
    let o = run("redis", port, &["--interval=200ms"]);
    sane(&o);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let summary = json(&o.out.join("summary.json"));
    let p = phase(&summary, "run");
    assert_eq!(
        p["store_stats"]["stats"]["keyspace_hits"]["increase"], 0,
        "{p}"
    );
    let samples = p["store_stats"]["unavailable"]["samples"]
        .as_str()
        .unwrap_or("");
    assert!(
        samples.contains("interval boundaries skipped"),
        "{}",
        p["store_stats"]
    );
    // Every 200 ms interval of the 2 s phase has its row; the statistics far fewer.
    let rows = |f: &str| {
        std::fs::read_to_string(o.out.join(f))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("run,"))
            .count()
    };
    let (intervals, samples) = (rows("intervals.csv"), rows("store_stats.csv"));
    assert!(intervals >= 9, "{intervals} intervals");
    assert!(
        (2..=6).contains(&samples),
        "{samples} samples in 2 s at 700 ms each"
    );
}

#[test]
fn redis_info_not_a_bulk() {
    let port = redis_info!(say(b"-ERR unknown section\r\n"));
    stats_unavailable(&run("redis", port, &[]), "INFO: not a bulk string");
}

#[test]
fn redis_bulk_length_past_i64() {
    let port = redis!(say(b"$9000000000000000000\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_bulk_of_a_terabyte() {
    let port = redis!(say(b"$999999999999\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_array_of_a_trillion() {
    let port = redis!(say(b"*999999999999\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_gigabyte_bulk_then_silence() {
    // Above the workload's max_reply: refused before a byte is read.
    let port = redis!(say(b"$1000000000\r\n"));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_bulk_within_the_limit_then_silence() {
    // Within max_reply, and never sent: the deadline ends each read.
    let port = redis!(say(b"$1000000\r\nabc"));
    reads_failed(&run("redis", port, &[]), "timeout");
}

#[test]
fn redis_endless_reply() {
    let port = redis!(Act::Endless(
        b"*300000\r\n".to_vec(),
        b"$1\r\na\r\n".to_vec()
    ));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_line_without_newline() {
    let port = redis!(Act::Endless(b"+".to_vec(), b"a".to_vec()));
    reads_failed(&run("redis", port, &[]), "protocol");
}

#[test]
fn redis_one_byte_a_second() {
    let port = redis!(drip(b"*2\r\n$6\r\nfield0\r\n$3\r\nabc\r\n"));
    reads_failed(&run("redis", port, &[]), "timeout");
}

#[test]
fn redis_max_reply_option_bounds_a_valid_reply() {
    // A valid 100 KiB field: refused under max_reply=64KiB, read under the default.
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            return say(INFO);
        }
        let mut r = b"*2\r\n$6\r\nfield0\r\n$102400\r\n".to_vec();
        r.extend(std::iter::repeat_n(b'v', 102400));
        r.extend_from_slice(b"\r\n");
        Act::Say(r)
    }
    let port = tcp_server(answer);
    reads_failed(&run("redis", port, &["max_reply=64KiB"]), "protocol");
    let o = run("redis", port, &[]);
    sane(&o);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let summary = json(&o.out.join("summary.json"));
    let read = &phase(&summary, "run")["ops"]["READ"];
    assert!(read["ok"].as_u64().unwrap() > 0, "{read}");
    assert!(read["errors"].get("protocol").is_none(), "{read}");
    // The bound the run used is in the manifest: derived from the workload.
    let manifest = json(&o.out.join("manifest.json"));
    let text = manifest.to_string();
    assert!(text.contains("\"max_reply\":\"1048576\""), "{text}");
}

#[test]
fn redis_bad_max_reply_is_a_usage_error() {
    let o = run("redis", free_port(), &["max_reply=12"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("max_reply=12"), "{}", o.stderr);
    let o = run("redis", free_port(), &["timeout_ms=99999999999999999"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("timeout_ms="), "{}", o.stderr);
}

#[test]
fn ping_redis_drip() {
    fn answer(_: &[u8]) -> Act {
        drip(INFO)
    }
    let o = run("redis", tcp_server(answer), &[]);
    ping_refused(&o, "no complete reply within 1000 ms");
}

#[test]
fn ping_redis_huge_bulk() {
    fn answer(_: &[u8]) -> Act {
        say(b"$9000000000000000000\r\n")
    }
    let o = run("redis", tcp_server(answer), &[]);
    ping_refused(&o, "max_reply");
}

// ---- Redis Cluster: where a server sends kvmeter (F9) ----

/// The hostile node's own port, for its CLUSTER SLOTS reply (answers are plain functions).
static NODE_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);

#[test]
fn redis_cluster_redirect_to_another_host_is_warned_about_once() {
    // The node owns every slot, then answers each read with MOVED to a host the options did
    // not name (nothing listens there: the run ends on that connection's error).
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            say(INFO)
        } else if has(req, b"AUTH") {
            say(b"+OK\r\n")
        } else if has(req, b"SLOTS") {
            let port = NODE_PORT.load(std::sync::atomic::Ordering::Relaxed);
            Act::Say(
                format!("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n")
                    .into_bytes(),
            )
        } else {
            say(b"-MOVED 3999 127.0.0.3:1\r\n")
        }
    }
    let port = tcp_server(answer);
    NODE_PORT.store(port, std::sync::atomic::Ordering::Relaxed);
    let o = run("redis", port, &["cluster=3", "password=S3cret"]);
    sane(&o);
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: Redis:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", o.stderr);
    assert!(
        warnings[0].contains("a MOVED or ASK redirect sends kvmeter to 127.0.0.3:1")
            && warnings[0].contains("sends AUTH there"),
        "{}",
        warnings[0]
    );
    assert!(o.code == 0 || o.code == 1, "exit {}: {}", o.code, o.stderr);
    validate("summary.schema.json", &json(&o.out.join("summary.json")));
}

#[test]
fn redis_cluster_slots_naming_2000_nodes_is_refused() {
    fn answer(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            return say(INFO);
        }
        let mut r = b"*2000\r\n".to_vec();
        for i in 0..2000u32 {
            r.extend(
                format!(
                    "*3\r\n:{i}\r\n:{i}\r\n*2\r\n$9\r\n127.0.0.2\r\n:{}\r\n",
                    20000 + i
                )
                .into_bytes(),
            );
        }
        Act::Say(r)
    }
    let o = run("redis", tcp_server(answer), &["cluster=3"]);
    sane(&o);
    assert!(o.code == 1 || o.code == 2, "exit {}: {}", o.code, o.stderr);
    assert!(
        o.stderr
            .contains("CLUSTER SLOTS names more than 1000 nodes"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("warning: Redis:"), "{}", o.stderr);
}

#[test]
fn redis_sentinel_naming_another_host_is_warned_about_once() {
    // The primary answers a read with garbage (a protocol error; the connection is reopened
    // through the Sentinels), and the Sentinel names a primary on a host the options did not
    // name (nothing listens there: the run ends on that connection's error).
    fn primary(req: &[u8]) -> Act {
        if has(req, b"INFO") {
            say(INFO)
        } else if has(req, b"AUTH") {
            say(b"+OK\r\n")
        } else {
            say(b"?garbage\r\n")
        }
    }
    fn sentinel(_: &[u8]) -> Act {
        say(b"*2\r\n$9\r\n127.0.0.4\r\n$1\r\n1\r\n")
    }
    let port = tcp_server(primary);
    let sentinel = format!("sentinel_addr=127.0.0.1:{}", tcp_server(sentinel));
    let o = run("redis", port, &[&sentinel, "password=S3cret"]);
    sane(&o);
    let warnings: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: Redis:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", o.stderr);
    assert!(
        warnings[0].contains("a Sentinel sends kvmeter to 127.0.0.4:1"),
        "{}",
        warnings[0]
    );
    let summary = json(&o.out.join("summary.json"));
    let read = &phase(&summary, "run")["ops"]["READ"];
    assert!(
        read["errors"]["protocol"].as_u64().unwrap_or(0) > 0,
        "{read}"
    );
}

/// Found by the fuzzer (bench/results/fuzz-20261124-132608, resp): HGET (one field,
/// `readallfields=false`) answered with an array of other fields panicked indexing the empty
/// field list (ops.rs:28). The field did not come back: every read is NOT_FOUND, nothing panics.
#[test]
fn redis_hget_answered_with_other_fields() {
    let port = redis!(say(b"*2\r\n$5\r\nhello\r\n$1\r\n0\r\n"));
    let o = run("redis", port, &["-preadallfields=false"]);
    sane(&o);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let summary = json(&o.out.join("summary.json"));
    let read = &phase(&summary, "run")["ops"]["READ"];
    assert!(
        read["errors"]["not_found"].as_u64().unwrap_or(0) > 0,
        "{read}"
    );
    assert_eq!(read["ok"].as_u64().unwrap_or(0), 0, "{read}");
}

/// Security review F6: a replay's queues are bounded in bytes, not only in records. 20 trace
/// records of 60-KiB keys, each replayed 1,000 times (`--amplify`), against a Redis that never
/// answers a read: 16 workers' queues of 1,024 records held about 1 GB before; now the feeder
/// waits at 64 MiB of queued keys. The run ends by its duration with its summary written.
#[test]
// The child is reaped by `reap` (wait4), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn replay_of_huge_keys_against_a_stalled_server_stays_bounded_in_bytes() {
    let port = redis!(say(b""));
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("big.csv");
    let mut text = String::new();
    for i in 0..20 {
        let key = format!("{i:02}{}", "k".repeat(60 * 1024));
        text.push_str(&format!("1,{key},{},10,1,get,0\n", key.len()));
    }
    std::fs::write(&trace, text).unwrap();
    let out = dir.path().join("run");
    let t = Instant::now();
    let child = Command::new(bin())
        .arg("replay")
        .arg(&trace)
        .args(["--store", "redis", "--store-opt"])
        .arg(format!("addr=127.0.0.1:{port}"))
        .args(["--store-opt", "timeout_ms=1000", "--amplify", "1000"])
        .args([
            "--threads",
            "16",
            "--duration",
            "3s",
            "--telemetry-interval",
            "0",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut peak_kib = 0;
    let code = loop {
        if let Some(kib) = vm_hwm_kib(child.id()) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some((code, _)) = reap(child.id()) {
            break code;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "replay did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code == 0 || code == 1, "exit {code}");
    assert!(peak_kib < 300 << 10, "peak RSS {peak_kib} KiB");
    let s = json(&out.join("summary.json"));
    assert!(phase(&s, "replay").is_object());
}

// ---- One classification of Redis's errors, on worker threads and on the engine (issue 42) ----

/// A resharding cluster's TRYAGAIN (Redis's own words for a multi-key command while a slot
/// moves) is `busy` on both paths; before, worker threads counted it as `error`. A real
/// cluster sends TRYAGAIN only to multi-key commands, which kvmeter does not send, so the
/// node here is scripted.
#[test]
fn redis_tryagain_is_busy_on_worker_threads_and_on_the_engine() {
    for extra in [&[][..], &["--connections=2"][..]] {
        let port = redis!(say(
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
        ));
        let o = run("redis", port, extra);
        reads_failed(&o, "busy");
        let summary = json(&o.out.join("summary.json"));
        let errors = &phase(&summary, "run")["ops"]["READ"]["errors"];
        assert_eq!(errors.as_object().unwrap().len(), 1, "{extra:?}: {errors}");
    }
}

/// A login the server stops accepting mid-run (NOAUTH) ends the phase with one line naming
/// it, on both paths; before, the engine counted it as an error per request and went on.
#[test]
fn redis_noauth_ends_the_phase_on_worker_threads_and_on_the_engine() {
    for extra in [&[][..], &["--connections=2"][..]] {
        let port = redis!(say(b"-NOAUTH Authentication required.\r\n"));
        let o = run("redis", port, extra);
        sane(&o);
        assert_eq!(o.code, 1, "{extra:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("NOAUTH Authentication required"),
            "{extra:?}: {}",
            o.stderr
        );
        let summary = json(&o.out.join("summary.json"));
        validate("summary.schema.json", &summary);
        let read = &phase(&summary, "run")["ops"]["READ"];
        assert_eq!(read["ok"].as_u64().unwrap_or(0), 0, "{read}");
        assert!(read["errors"]["error"].as_u64().unwrap_or(0) >= 1, "{read}");
    }
}
