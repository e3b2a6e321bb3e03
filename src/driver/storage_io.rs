//! The kernel's account of a phase's storage I/O (issue 43 item 4): `/proc/PID/io` of the
//! store's threads — kvmeter's own process less the threads that write kvmeter's results
//! (the main thread's intervals and summaries, telemetry, the metrics endpoint, I/O
//! antagonists), for an embedded store — or of each server process kvmeter started, read when
//! the phase starts and when its workers stop; with the data directory's size on disk at the
//! end. `report/storage_io.rs` turns it and the store's own counters into amplification.
//!
//! Threads that end during the phase keep counting: the process's file adds every ended
//! thread's bytes, so the store's share is the process's increase less the increase of the
//! excluded threads, which live through the phase.

use super::companion::Companion;
use crate::report::on_disk::on_disk;
use crate::report::rundir::RunDir;
use crate::report::storage_io::StorageIo;
use crate::report::PhaseSummary;
use crate::telemetry::procfs::{read_io, read_thread_io, thread_group, Root, TaskIo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Whose I/O is the store's.
enum Subject {
    /// kvmeter's own process, less its bookkeeping threads.
    Embedded { pid: u32 },
    /// Server processes kvmeter started.
    Servers { pids: Vec<u32> },
}

pub(super) struct StorageIoCompanion {
    root: Root,
    subject: Subject,
    /// The store's data directory (its size on disk at the end).
    dir: Option<PathBuf>,
    /// The processes' and the excluded threads' counters at the phase's start, or why the
    /// kernel's figures cannot be had.
    start: Result<Reading, String>,
    source: String,
}

/// A reading: each process's counters and the excluded threads' (by tid).
struct Reading {
    processes: Vec<TaskIo>,
    excluded: BTreeMap<u32, TaskIo>,
}

/// Whether a thread of kvmeter's process writes kvmeter's results rather than the store's
/// data: the main thread (the interval loop, summaries, the report) and every `kvm-` thread
/// but the ones that call the store (workers, event loops, the probe, the replay feeder).
/// A store's own threads keep their names (`rocksdb:low`) or inherit their creator's.
pub fn is_bookkeeping(pid: u32, tid: u32, comm: &str) -> bool {
    if tid == pid || comm == "signals" {
        return true;
    }
    let group = thread_group(comm);
    group.starts_with("kvm-")
        && !matches!(
            group.as_str(),
            "kvm-worker" | "kvm-loop" | "kvm-probe" | "kvm-replay-feeder"
        )
}

impl StorageIoCompanion {
    /// The phase's first reading; `None` for a store that keeps nothing on disk.
    pub(super) fn start(ctx: &super::ctx::PhaseCtx) -> Option<Self> {
        let caps = &ctx.adapter.capabilities;
        // A managed server that keeps nothing on disk by default may be told to: Redis with
        // RDB snapshots or an append-only file (a snapshot's child counts once it has ended).
        let told_to_persist = ctx.adapter.server.is_some()
            && ctx.cluster.is_some()
            && matches!(ctx.opts.str("persistence"), "rdb" | "aof" | "aof-always");
        if !(caps.persistent || told_to_persist) || !caps.stores_data {
            return None;
        }
        let root = Root::system();
        let placement = &ctx.manifest.data_dir.placement;
        let (subject, source, not_known) = match (ctx.adapter.server, ctx.cluster) {
            (None, _) => {
                let pid = std::process::id();
                (
                    Subject::Embedded { pid },
                    format!("kernel: /proc/{pid}/io (kvmeter's process: the store's threads and kvmeter's workers) less kvmeter's threads that write its results"),
                    None,
                )
            }
            (Some(_), Some(c)) => {
                let pids: Vec<u32> = c
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .members
                    .iter()
                    .map(|m| m.server.pid)
                    .collect();
                let list: Vec<String> = pids.iter().map(|p| format!("/proc/{p}/io")).collect();
                (
                    Subject::Servers { pids },
                    format!("kernel: {} (the server's process; a child it forks to save, as Redis's BGSAVE and AOF rewrite do, counts once it has ended: the kernel adds a reaped child's I/O to its parent's)", list.join(" + ")),
                    None,
                )
            }
            (Some(_), None) => (
                Subject::Servers { pids: vec![] },
                "kernel".to_string(),
                Some("unavailable: the server was not started by kvmeter, so its process is not known here".to_string()),
            ),
        };
        let dir = match &subject {
            Subject::Embedded { .. } => Some(ctx.data.root().join("store")),
            Subject::Servers { pids } if !pids.is_empty() => Some(ctx.data.root().join("store")),
            _ => None,
        };
        let tmpfs = placement.filesystem == "tmpfs" || placement.filesystem == "ramfs";
        let start = match not_known {
            Some(why) => Err(why),
            None if tmpfs => Err(format!(
                "unavailable: the data directory is on {}, whose writes never reach a storage device",
                placement.filesystem
            )),
            None => read(&root, &subject),
        };
        Some(StorageIoCompanion {
            root,
            subject,
            dir,
            start,
            source,
        })
    }
}

/// One reading of the subject's counters.
fn read(root: &Root, subject: &Subject) -> Result<Reading, String> {
    let why = |e: String| format!("unavailable: {e}");
    match subject {
        Subject::Embedded { pid } => {
            let process = read_io(root, *pid).map_err(why)?;
            let excluded = read_thread_io(root, *pid)
                .into_iter()
                .filter(|(tid, comm, _)| is_bookkeeping(*pid, *tid, comm))
                .map(|(tid, _, io)| (tid, io))
                .collect();
            Ok(Reading {
                processes: vec![process],
                excluded,
            })
        }
        Subject::Servers { pids } => Ok(Reading {
            processes: pids
                .iter()
                .map(|p| {
                    read_io(root, *p).map_err(|e| match root.read(&format!("proc/{p}/stat")) {
                        // A fault killed (or restarted) it, or it crashed: its count died with it.
                        Err(_) => format!(
                            "unavailable: the server process (pid {p}) ended during the phase, and the kernel's count of its I/O with it"
                        ),
                        Ok(_) => why(e),
                    })
                })
                .collect::<Result<_, _>>()?,
            excluded: BTreeMap::new(),
        }),
    }
}

/// The store's (written, cancelled, read) bytes between two readings: the processes'
/// increases less the excluded threads' (a thread new since the start counts from zero).
fn between(a: &Reading, b: &Reading) -> Result<TaskIo, String> {
    if a.processes.len() != b.processes.len() {
        return Err("unavailable: the server processes changed during the phase".into());
    }
    let mut d = TaskIo::default();
    let grew = |x: &TaskIo, y: &TaskIo| {
        y.write_bytes >= x.write_bytes
            && y.read_bytes >= x.read_bytes
            && y.cancelled_write_bytes >= x.cancelled_write_bytes
    };
    for (x, y) in a.processes.iter().zip(&b.processes) {
        if !grew(x, y) {
            return Err(
                "unavailable: a server process was replaced during the phase (its counters went back)"
                    .into(),
            );
        }
        d.write_bytes += y.write_bytes - x.write_bytes;
        d.read_bytes += y.read_bytes - x.read_bytes;
        d.cancelled_write_bytes += y.cancelled_write_bytes - x.cancelled_write_bytes;
    }
    for (tid, y) in &b.excluded {
        let x = a.excluded.get(tid).copied().unwrap_or_default();
        let less = |a: u64, b: u64| a.saturating_sub(b);
        d.write_bytes = less(d.write_bytes, less(y.write_bytes, x.write_bytes));
        d.read_bytes = less(d.read_bytes, less(y.read_bytes, x.read_bytes));
        d.cancelled_write_bytes = less(
            d.cancelled_write_bytes,
            less(y.cancelled_write_bytes, x.cancelled_write_bytes),
        );
    }
    Ok(d)
}

impl Companion for StorageIoCompanion {
    fn finish(
        self: Box<Self>,
        _end: Duration,
        ps: &mut PhaseSummary,
        _rundir: &mut RunDir,
    ) -> anyhow::Result<()> {
        let this = *self;
        let measured = this
            .start
            .and_then(|a| between(&a, &read(&this.root, &this.subject)?));
        let mut io = StorageIo {
            source: this.source,
            ..Default::default()
        };
        match measured {
            Ok(d) => {
                io.write_bytes = Some(d.write_bytes);
                io.read_bytes = Some(d.read_bytes);
                io.cancelled_write_bytes = Some(d.cancelled_write_bytes);
            }
            Err(why) => io.unavailable = Some(why),
        }
        if let Some(dir) = &this.dir {
            // A store in this process holds POSIX locks on its files, which opening and
            // closing one of them would release (report::on_disk): only a server's are opened.
            let look_inside = matches!(this.subject, Subject::Servers { .. });
            let d = on_disk(dir, look_inside);
            if d.unread == 0 {
                (io.on_disk_bytes, io.reserved_bytes) = (Some(d.data), Some(d.reserved));
            }
        }
        // The ratios wait for the phase's op table: `derive` below, once it is filled.
        ps.storage_io = Some(io);
        Ok(())
    }
}

/// The phase's amplification ratios, once its op table and the store's statistics are in
/// its summary.
pub(super) fn derive(ctx: &super::ctx::PhaseCtx, ps: &mut PhaseSummary) {
    let loaded = load_into_empty(ctx, ps);
    let Some(io) = ps.storage_io.as_mut() else {
        return;
    };
    let ops = &ps.ops;
    let asked = crate::report::storage_io::asked(
        |name| ops.get(name).map(|o| o.mb_per_s),
        ps.measured_seconds,
        ps.warmup_seconds,
    );
    io.derive(ps.store_stats.as_ref(), &asked);
    io.space(loaded);
}

/// Whether the phase is a load into an empty store, whose logical data is then exactly what
/// it inserted: a load, into a data directory this run made (a managed server's included),
/// with nothing written to the store since the run began or its last clear.
fn load_into_empty(ctx: &super::ctx::PhaseCtx, ps: &PhaseSummary) -> Result<(), String> {
    use crate::plan::PhaseKind;
    if ps.kind != PhaseKind::Load {
        return Err("only a load into an empty store has a known logical size".into());
    }
    if ctx.data.reused {
        return Err("the data directory held a store before this run".into());
    }
    let wrote_before = ctx
        .summary
        .phases
        .iter()
        .rev()
        .take_while(|p| p.kind != PhaseKind::Clear)
        .any(|p| p.operations > 0);
    if wrote_before {
        return Err("an earlier phase of this run wrote to the store".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_results_writers_are_not_the_stores() {
        let pid = 100;
        assert!(is_bookkeeping(pid, 100, "kvmeter"));
        assert!(
            !is_bookkeeping(pid, 101, "kvmeter"),
            "a store's thread inherits the name"
        );
        for c in [
            "kvm-telemetry",
            "kvm-io-3",
            "kvm-metrics",
            "signals",
            "kvm-faults",
        ] {
            assert!(is_bookkeeping(pid, 102, c), "{c}");
        }
        for c in [
            "kvm-worker-12",
            "kvm-loop-0",
            "kvm-probe",
            "rocksdb:low0",
            "rocksdb:high",
        ] {
            assert!(!is_bookkeeping(pid, 103, c), "{c}");
        }
    }

    fn io(w: u64, c: u64, r: u64) -> TaskIo {
        TaskIo {
            read_bytes: r,
            write_bytes: w,
            cancelled_write_bytes: c,
        }
    }

    #[test]
    fn the_store_gets_the_process_less_the_bookkeepers() {
        let a = Reading {
            processes: vec![io(1_000, 100, 50)],
            excluded: [(1, io(200, 0, 0))].into(),
        };
        let b = Reading {
            processes: vec![io(11_000, 600, 450)],
            excluded: [(1, io(700, 0, 40)), (9, io(300, 0, 0))].into(),
        };
        // 10,000 written less 500 and 300 by the bookkeepers; 500 cancelled; 400 − 40 read.
        assert_eq!(between(&a, &b), Ok(io(9_200, 500, 360)));
        let back = Reading {
            processes: vec![io(10, 0, 0)],
            excluded: BTreeMap::new(),
        };
        assert!(between(&a, &back).unwrap_err().contains("replaced"));
    }
}
