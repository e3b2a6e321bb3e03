//! The durability check on a server store: writers insert unique keys for `--duration` while
//! the `--fault` schedule breaks the cluster kvmeter started; then the cluster is let recover
//! (pending restarts and continues happen, a primary is found or promoted) and every logged
//! write is read back from the primary or leader that serves now.

use super::{duration, key, output, probe_and_check, refuse_for, unavailable, value};
use super::{Outcome, Report, Settings, Write};
use crate::driver::datadir::DataDir;
use crate::error::UsageError;
use crate::fault::schedule::Schedule;
use crate::plan::Fault;
use crate::store::cluster::StartCtx;
use crate::store::{Status, StoreKind, StoreOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) fn run(
    s: &Settings,
    adapter: &'static StoreKind,
    opts: StoreOptions,
    seed: u64,
    slot: &output::Slot,
) -> anyhow::Result<i32> {
    let (d, faults) = accept(s, adapter, &opts)?;
    let user_server = !opts.str("addr").is_empty();
    // Input accepted: now things are created.
    let dir = output::start(s, adapter, &opts, seed, slot)?;
    let data = DataDir::prepare(None)?;
    let (cluster, mut opts) = if user_server {
        (None, opts)
    } else {
        start_cluster(adapter, &opts, &data, &dir)?
    };
    let store = (adapter.open)(&data.store_dir()?, &opts)?;
    let t0 = Instant::now();
    let schedule = cluster.as_ref().filter(|_| !faults.is_empty()).map(|c| {
        Schedule::start(
            faults.clone(),
            c.clone(),
            t0,
            crate::report::fault_files::events_csv(&dir, "durability"),
        )
    });
    errln!(
        "durability: {} writer(s) for {:.1} s",
        s.writers,
        d.as_secs_f64()
    );
    let interrupted = crate::driver::install_signals();
    let writes = write_all(s, store.as_ref(), &dir, t0, d, &interrupted)?;
    let _ = store.close();
    let events = schedule.map(Schedule::finish).unwrap_or_default();
    // A cluster that does not serve, or a store that cannot be read, makes the check
    // unavailable: the writes are not "lost" because nothing could read them.
    let mut note = String::new();
    let verdict = match cluster.as_ref().map(|c| serving(c, &mut opts)) {
        Some(Err(why)) => unavailable(&writes, why),
        Some(Ok(how)) => {
            note = how;
            read_back(adapter, &data, &opts, &writes, seed)
        }
        None => read_back(adapter, &data, &opts, &writes, seed),
    };
    let mut rounds: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or_default())
        .collect();
    if !note.is_empty() {
        rounds.push(serde_json::json!({ "event": "promote", "note": note }));
    }
    let kind = match (faults.is_empty(), interrupted.load(Ordering::Relaxed)) {
        (true, false) => "writes, no faults",
        (true, true) => "writes, no faults (interrupted)",
        (false, false) => "faults on a managed cluster",
        (false, true) => "faults on a managed cluster (interrupted)",
    };
    let method = if user_server {
        format!(
            "every write read back from the server at {}",
            opts.str("addr")
        )
    } else {
        format!(
            "every write read back from the primary or leader serving after the faults{}{}",
            if note.is_empty() { "" } else { "; " },
            note
        )
    };
    let mut report = Report::new(
        s,
        adapter,
        &opts,
        kind.into(),
        method,
        verdict,
        rounds,
        seed,
    );
    report.interrupted = interrupted.load(Ordering::Relaxed);
    if let Some(c) = cluster {
        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
        report.members = c.manifest();
        c.stop();
    }
    output::finish(slot, &report, s.fail_on_loss)
}

type SharedCluster = Arc<Mutex<crate::store::cluster::Cluster>>;

/// Starts the store's cluster (its topology from the options); returns it and the options
/// its members answer on.
fn start_cluster(
    adapter: &'static StoreKind,
    opts: &StoreOptions,
    data: &DataDir,
    rundir: &std::path::Path,
) -> anyhow::Result<(Option<SharedCluster>, StoreOptions)> {
    let spec = adapter.server.expect("a server store");
    let ctx = StartCtx {
        name: adapter.name,
        spec,
        opts,
        dir: &data.store_dir()?,
        rundir,
        timeout: Duration::from_secs(30),
    };
    let c = (spec.topology)(opts).start(&ctx)?;
    errln!(
        "durability: {} member(s) started; {}",
        c.members.len(),
        c.status()
    );
    let o = c.opts.clone();
    Ok((Some(Arc::new(Mutex::new(c))), o))
}

/// Recovery: waits for a primary or leader (promotes one where nothing else would) and points
/// `opts` at it; how it was found, or why the cluster does not serve.
fn serving(cluster: &SharedCluster, opts: &mut StoreOptions) -> Result<String, String> {
    let mut c = cluster.lock().unwrap_or_else(|p| p.into_inner());
    let topology = c.topology;
    match topology.serving(&mut c, Duration::from_secs(30)) {
        Ok((addr, how)) => {
            opts.set("addr", &addr);
            errln!("durability: reading back from {addr}; {}", c.status());
            Ok(how)
        }
        Err(e) => Err(format!("after the faults the cluster does not serve: {e}")),
    }
}

/// Checks the input before anything is created: the writes' duration and the faults.
fn accept(
    s: &Settings,
    adapter: &'static StoreKind,
    opts: &StoreOptions,
) -> anyhow::Result<(Duration, Vec<Fault>)> {
    let spec = adapter.server.expect("a server store");
    let d = duration(s)?;
    if s.kills != 0 {
        return Err(refuse_for(
            adapter,
            "--kills is for embedded stores (a writer process is killed); a server is broken with --fault",
        )
        .into());
    }
    let faults = s
        .faults
        .iter()
        .map(|f| Fault::parse(f))
        .collect::<Result<Vec<_>, _>>()?;
    let user_server = !opts.str("addr").is_empty();
    if user_server && !faults.is_empty() {
        return Err(UsageError::new(format!(
            "--fault: kvmeter signals only servers it started, not yours at --store-opt addr={}",
            opts.str("addr")
        ))
        .into());
    }
    let topology = (spec.topology)(opts);
    let shape = topology.shape(opts);
    for f in &faults {
        f.check_target(&shape)?;
        if f.at >= d {
            return Err(UsageError::new(format!(
                "--fault '{}': at={:.3} s is not before the end of the writes (--duration {:.3} s)",
                f.spec,
                f.at.as_secs_f64(),
                d.as_secs_f64()
            ))
            .into());
        }
    }
    if user_server {
        (spec.ping)(opts, opts.str("addr")).map_err(|why| {
            UsageError::new(format!(
                "--store-opt addr={}: no {} answers there: {why}",
                opts.str("addr"),
                adapter.name
            ))
        })?;
    }
    Ok((d, faults))
}

/// How often a writer's log is flushed to writes-<w>.csv while it writes.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// `--writers` threads insert unique keys until `d` has passed since `t0` or `interrupted` is
/// set, each logging every write to writes-<w>.csv as it completes; returns every logged write.
fn write_all(
    s: &Settings,
    store: &dyn crate::store::Store,
    dir: &std::path::Path,
    t0: Instant,
    d: Duration,
    interrupted: &AtomicBool,
) -> anyhow::Result<Vec<Write>> {
    let stop = interrupted;
    let mut writes: Vec<Write> = vec![];
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let mut handles = vec![];
        for w in 0..s.writers as u32 {
            let mut session = store.session()?;
            let dir = &dir;
            handles.push(sc.spawn(move || -> anyhow::Result<Vec<Write>> {
                let mut log = crate::report::durability_files::WritesLog::create(dir, w)?;
                let mut out = vec![];
                let mut seq = 0u64;
                // The log reaches the file at least every FLUSH_EVERY: a kill of kvmeter
                // (or of the machine) keeps all but the last few ms of acknowledged writes,
                // without a system call per write.
                let mut flushed = Instant::now();
                while !stop.load(Ordering::Relaxed) && t0.elapsed() < d {
                    seq += 1;
                    let st = session.insert("usertable", key(w, seq).as_bytes(), &value(w, seq));
                    let outcome = Outcome::of(st);
                    log.write(seq, outcome.name(), t0.elapsed().as_secs_f64())?;
                    out.push(Write {
                        writer: w,
                        seq,
                        outcome,
                    });
                    if flushed.elapsed() >= FLUSH_EVERY {
                        log.flush()?;
                        flushed = Instant::now();
                    }
                    if matches!(st, Status::Error { fatal: true, .. }) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                log.flush()?;
                let _ = session.close();
                Ok(out)
            }));
        }
        for h in handles {
            let r = h.join().map_err(|_| anyhow::anyhow!("a writer panicked"))?;
            writes.extend(r?);
        }
        Ok(())
    })?;
    Ok(writes)
}

/// Opens the store at `opts` (the serving address) and checks every write; a store that
/// cannot be opened makes the check unavailable.
fn read_back(
    adapter: &StoreKind,
    data: &DataDir,
    opts: &StoreOptions,
    writes: &[Write],
    seed: u64,
) -> super::Verdict {
    let open = || -> anyhow::Result<_> {
        let store = (adapter.open)(&data.store_dir()?, opts)?;
        Ok((store.session()?, store))
    };
    let opened = open();
    match opened {
        Ok((mut session, reader)) => {
            let v = probe_and_check(session.as_mut(), writes, seed);
            let _ = session.close();
            let _ = reader.close();
            v
        }
        Err(e) => unavailable(writes, format!("cannot open the store to read back: {e:#}")),
    }
}
