//! The durability check on an embedded store: a child kvmeter process (`__durability-writer`)
//! opens the store and inserts unique keys, writing each acknowledged sequence number to a
//! pipe the moment the store returns; the parent SIGKILLs it at a random point (`--kills`
//! times), reopens the store itself and reads back every write logged so far. The write in
//! flight at the kill is indeterminate. A kill keeps the page cache, so this shows
//! process-crash durability (what a WAL without fsync still survives), not power loss.

use super::{key, output, probe_and_check, refuse_for, unavailable, value};
use super::{Outcome, Report, Settings, Verdict, Write};
use crate::driver::datadir::DataDir;
use crate::store::{Status, StoreKind, StoreOptions};
use std::io::{BufRead, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

pub(super) fn run(
    s: &Settings,
    adapter: &'static StoreKind,
    opts: StoreOptions,
    seed: u64,
    slot: &output::Slot,
) -> anyhow::Result<i32> {
    if !s.faults.is_empty() {
        return Err(refuse_for(
            adapter,
            "--fault acts on servers; an embedded store's writer process is killed --kills times instead",
        )
        .into());
    }
    if s.duration.is_some() {
        return Err(refuse_for(
            adapter,
            "--duration is for servers; an embedded store's check runs --kills rounds, each killed 0.2–1.2 s into its writes",
        )
        .into());
    }
    if !adapter.capabilities.persistent {
        return Err(refuse_for(
            adapter,
            "the store keeps nothing across a reopen, so there is nothing to check; choose a persistent store (rocksdb, lmdb, leveldb, wiredtiger, sqlite) or a server",
        )
        .into());
    }
    let kills = if s.kills == 0 { 5 } else { s.kills };
    output::start(s, adapter, &opts, seed, slot)?;
    let data = DataDir::prepare(None)?;
    let store_dir = data.store_dir()?;
    let mut rng = crate::workload::Rng::for_worker(seed, 0xD0AB);
    let mut writes: Vec<Write> = vec![];
    let mut rounds = vec![];
    let mut verdict = Verdict::default();
    let mut next = 1u64;
    let t0 = std::time::Instant::now();
    let interrupted = crate::driver::install_signals();
    let stopped = || interrupted.load(std::sync::atomic::Ordering::Relaxed);
    let mut done = 0;
    for round in 0..kills {
        if stopped() {
            break;
        }
        let kill_after = Duration::from_millis(200 + rng.next_u64_below(1000));
        let (acks, killed_at) = kill_round(adapter, &store_dir, &opts, next, kill_after, t0)
            .map_err(|e| anyhow::anyhow!("round {}: {e:#}", round + 1))?;
        let acked = acks.len() as u64;
        let last = acks.last().map(|a| a.0).unwrap_or(next - 1);
        for (seq, outcome) in &acks {
            writes.push(Write {
                writer: 0,
                seq: *seq,
                outcome: *outcome,
            });
        }
        // The write in flight when the kill came.
        writes.push(Write {
            writer: 0,
            seq: last + 1,
            outcome: Outcome::Indeterminate,
        });
        next = last + 2;
        // Reopen and read back everything written so far; a store that does not reopen
        // leaves the check unavailable (its writes are not "lost": nothing could read them).
        let this = read_back(
            adapter,
            &store_dir,
            &opts,
            &writes,
            seed.wrapping_add(round as u64),
        );
        errln!(
            "durability: kill {}/{kills} after {} ms: {acked} acknowledged this round, {} lost so far",
            round + 1,
            kill_after.as_millis(),
            this.lost
        );
        rounds.push(serde_json::json!({
            "round": round + 1,
            "killed_at_s": killed_at,
            "kill_after_ms": kill_after.as_millis() as u64,
            "acknowledged_this_round": acked,
            "lost_so_far": this.lost,
            "indeterminate_found_so_far": this.indeterminate_found,
        }));
        let stop = this.unavailable.is_some();
        verdict = this;
        done = round + 1;
        if stop {
            break;
        }
    }
    let mode = match stopped() {
        true => {
            format!("process-crash: the writer SIGKILLed {done} of {kills} times (interrupted)")
        }
        false => format!("process-crash: the writer SIGKILLed {kills} times"),
    };
    let mut report = Report::new(
        s,
        adapter,
        &opts,
        mode,
        "process-crash durability: a SIGKILL keeps the operating system's page cache, so this cannot show what a power loss does".into(),
        verdict,
        rounds,
        seed,
    );
    report.interrupted = stopped();
    output::finish(slot, &report, s.fail_on_loss)
}

/// One round: a writer process started at sequence `next`, SIGKILLed `kill_after` into its
/// writes; returns what it acknowledged (in order) and when the kill came (s since `t0`).
fn kill_round(
    adapter: &StoreKind,
    store_dir: &std::path::Path,
    opts: &StoreOptions,
    next: u64,
    kill_after: Duration,
    t0: std::time::Instant,
) -> anyhow::Result<(Vec<(u64, Outcome)>, f64)> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(&exe);
    cmd.args(["__durability-writer", "--store", adapter.name, "--dir"])
        .arg(store_dir)
        .args(["--start", &next.to_string()]);
    for (k, v) in opts.resolved() {
        cmd.arg("--store-opt").arg(format!("{k}={v}"));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start the writer ({}): {e}", exe.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acks = vec![];
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "ready" {
                let _ = ready_tx.send(());
            } else if let Some(n) = line.strip_prefix("ok ") {
                acks.push((n.parse::<u64>().unwrap_or(0), Outcome::Ok));
            } else if let Some(n) = line.strip_prefix("failed ") {
                acks.push((n.parse::<u64>().unwrap_or(0), Outcome::Failed));
            }
        }
        acks
    });
    // The kill comes `kill_after` into the writes (opening the store is not counted).
    let ready = ready_rx.recv_timeout(Duration::from_secs(30)).is_ok();
    if ready {
        std::thread::sleep(kill_after);
    }
    let status = child.try_wait()?;
    let killed_at = (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    child.kill()?; // SIGKILL
    child.wait()?;
    let acks = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the ack reader panicked"))?;
    if let Some(st) = status {
        anyhow::bail!("the writer exited by itself ({st}); see its error above");
    }
    if !ready {
        anyhow::bail!("the writer did not open the store within 30 s");
    }
    Ok((acks, killed_at))
}

/// Reopens the store and checks every write logged so far.
fn read_back(
    adapter: &StoreKind,
    dir: &std::path::Path,
    opts: &StoreOptions,
    writes: &[Write],
    tag: u64,
) -> Verdict {
    let open = || -> anyhow::Result<_> {
        let store = (adapter.open)(dir, opts)?;
        Ok((store.session()?, store))
    };
    match open() {
        Ok((mut session, store)) => {
            let v = probe_and_check(session.as_mut(), writes, tag);
            let _ = session.close();
            if let Err(e) = store.close() {
                let mut v = v;
                v.unavailable
                    .get_or_insert(format!("closing the store after the check failed: {e:#}"));
                return v;
            }
            v
        }
        Err(e) => unavailable(
            writes,
            format!("cannot reopen the store after the kill: {e:#}"),
        ),
    }
}

/// The child: opens the store at `--dir` and inserts keys from `--start` on, printing
/// "ok N" (or "failed N") after each, until it is killed.
pub fn writer_main(store: &str, dir: &std::path::Path, start: u64, opts: &[String]) -> i32 {
    let run = || -> anyhow::Result<()> {
        let adapter =
            crate::store::find(store).ok_or_else(|| anyhow::anyhow!("unknown store '{store}'"))?;
        let o = StoreOptions::parse(adapter.name, adapter.options, opts)?;
        let st = (adapter.open)(dir, &o)?;
        let mut session = st.session()?;
        let out = std::io::stdout();
        let mut out = out.lock();
        writeln!(out, "ready")?;
        out.flush()?;
        let mut seq = start;
        loop {
            let s = session.insert("usertable", key(0, seq).as_bytes(), &value(0, seq));
            let word = if matches!(s, Status::Ok) {
                "ok"
            } else {
                "failed"
            };
            writeln!(out, "{word} {seq}")?;
            out.flush()?;
            seq += 1;
        }
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            errln!("error: durability writer: {e:#}");
            1
        }
    }
}
