//! The server's processes as one: a managed store can be several processes (a Redis
//! replica set with its Sentinels, an etcd cluster, Redis Cluster's masters), and a fault can
//! kill and restart any of them under a new pid. Papers 001 and 004 count the CPU of every
//! server process of the deployment when they give CPU per operation; one member's would
//! understate a three-member cluster's cost threefold.
//!
//! Each sample reads the members' current pids (slots the managed servers keep current, 0
//! while one is down) and sums them into one `ProcSample`. Counters must never fall, or a
//! window spanning a kill would read as a wrap: so the CPU ticks and I/O bytes of a process
//! that has gone are kept ("retired") at their last sampled values, and a process that appears
//! counts from zero (it started after the last sample). What a killed member used between its
//! last sample and its death (at most one `--telemetry-interval`) is not counted.

use super::procfs::{read_process, thread_switches, ProcSample, Root};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The slots to read and what earlier samples saw.
pub(super) struct ServerProcesses {
    slots: Vec<Arc<AtomicU32>>,
    books: Mutex<Books>,
}

#[derive(Default)]
struct Books {
    /// The processes the last sample read, by pid.
    last: Vec<(u32, ProcSample)>,
    /// Counters of processes that have gone, at their last sampled values.
    retired_ticks: u64,
    retired_read: u64,
    retired_write: u64,
    /// Whether any sample has read a process (before that the sum is unknown, not zero).
    seen: bool,
}

impl ServerProcesses {
    pub(super) fn new(slots: Vec<Arc<AtomicU32>>) -> Self {
        ServerProcesses {
            slots,
            books: Mutex::new(Books::default()),
        }
    }

    /// The pid the figures name: the first member's that is up (a member that is down at a
    /// window's end has no pid; the figures are still the others').
    pub(super) fn first_pid(&self) -> Option<u32> {
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .find(|&p| p != 0)
    }

    /// The summed sample now and how many processes it covers; `None` when there is no
    /// server, or none of its processes has been read yet. `switches`: sum the context
    /// switches over every thread (a read per thread and process: only the window's ends
    /// need them; the series' rows carry none, and leave the first thread's).
    pub(super) fn sample(
        &self,
        root: &Root,
        page_size: u64,
        switches: bool,
    ) -> Option<(ProcSample, u32)> {
        if self.slots.is_empty() {
            return None;
        }
        let mut pids: Vec<u32> = self
            .slots
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&p| p != 0)
            .collect();
        pids.dedup();
        let now: Vec<(u32, ProcSample)> = pids
            .into_iter()
            .filter_map(|pid| {
                let mut p = read_process(root, pid, page_size)?;
                if let Some((v, i)) = switches.then(|| thread_switches(root, pid)).flatten() {
                    (p.voluntary_cs, p.involuntary_cs) = (v, i);
                }
                Some((pid, p))
            })
            .collect();
        let mut b = self.books.lock().unwrap_or_else(|p| p.into_inner());
        for (pid, gone) in std::mem::take(&mut b.last) {
            if !now.iter().any(|(p, _)| *p == pid) {
                b.retired_ticks += gone.cpu_ticks;
                b.retired_read += gone.read_bytes.unwrap_or(0);
                b.retired_write += gone.write_bytes.unwrap_or(0);
            }
        }
        b.seen |= !now.is_empty();
        b.last = now.clone();
        if !b.seen {
            return None;
        }
        Some((sum(&now, &b), now.len() as u32))
    }
}

/// The processes' sample summed, with the retired counters: CPU and I/O never fall; RSS and
/// context switches are the live processes' (a gauge, and per-thread sums that fall anyway
/// when a thread ends, which the window's saturating difference allows for).
fn sum(now: &[(u32, ProcSample)], b: &Books) -> ProcSample {
    let all_io = |f: fn(&ProcSample) -> Option<u64>| -> Option<Vec<u64>> {
        now.iter().map(|(_, p)| f(p)).collect()
    };
    ProcSample {
        cpu_ticks: b.retired_ticks + now.iter().map(|(_, p)| p.cpu_ticks).sum::<u64>(),
        rss_bytes: now.iter().map(|(_, p)| p.rss_bytes).sum(),
        voluntary_cs: now.iter().map(|(_, p)| p.voluntary_cs).sum(),
        involuntary_cs: now.iter().map(|(_, p)| p.involuntary_cs).sum(),
        read_bytes: all_io(|p| p.read_bytes).map(|v| b.retired_read + v.iter().sum::<u64>()),
        write_bytes: all_io(|p| p.write_bytes).map(|v| b.retired_write + v.iter().sum::<u64>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc/PID with `ticks` of CPU, `rss_pages` pages and `io` bytes read/written.
    fn write_pid(root: &std::path::Path, pid: u32, ticks: u64, rss_pages: u64, io: u64) {
        let d = root.join(format!("proc/{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        // utime (field 14) and stime (15) split the ticks; rss is field 24.
        let mut f: Vec<String> = (3..=24).map(|_| "0".to_string()).collect();
        f[14 - 3] = (ticks / 2).to_string();
        f[15 - 3] = (ticks - ticks / 2).to_string();
        f[24 - 3] = rss_pages.to_string();
        std::fs::write(d.join("stat"), format!("{pid} (srv x) {}", f.join(" "))).unwrap();
        std::fs::write(
            d.join("status"),
            "voluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t1\n",
        )
        .unwrap();
        std::fs::write(
            d.join("io"),
            format!("read_bytes: {io}\nwrite_bytes: {}\n", 2 * io),
        )
        .unwrap();
    }

    #[test]
    fn members_are_summed_and_a_killed_one_keeps_what_it_used() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        let slots: Vec<Arc<AtomicU32>> = [11, 12, 13]
            .iter()
            .map(|&p| Arc::new(AtomicU32::new(p)))
            .collect();
        write_pid(t.path(), 11, 100, 10, 1000);
        write_pid(t.path(), 12, 200, 20, 2000);
        write_pid(t.path(), 13, 300, 30, 3000);
        let s = ServerProcesses::new(slots.clone());
        let (a, n) = s.sample(&root, 4096, true).unwrap();
        assert_eq!(n, 3);
        assert_eq!(a.cpu_ticks, 600);
        assert_eq!(a.rss_bytes, 60 * 4096);
        assert_eq!(a.read_bytes, Some(6000));
        assert_eq!(a.write_bytes, Some(12000));
        // Member 12 is killed after using 250 ticks and restarted as 22, which has used 7.
        write_pid(t.path(), 12, 250, 20, 2500);
        s.sample(&root, 4096, true).unwrap();
        std::fs::remove_dir_all(t.path().join("proc/12")).unwrap();
        slots[1].store(0, Ordering::Relaxed);
        let (down, n) = s.sample(&root, 4096, true).unwrap();
        assert_eq!((down.cpu_ticks, n), (650, 2));
        slots[1].store(22, Ordering::Relaxed);
        write_pid(t.path(), 22, 7, 5, 10);
        let (b, n) = s.sample(&root, 4096, true).unwrap();
        assert_eq!(n, 3);
        // 100 + 250 (retired) + 300 + 7: never below the first sample.
        assert_eq!(b.cpu_ticks, 657);
        assert_eq!(b.rss_bytes, 45 * 4096);
        assert_eq!(b.read_bytes, Some(1000 + 2500 + 3000 + 10));
        assert_eq!(s.first_pid(), Some(11));
        // The first member down: the figures name the next one up.
        slots[0].store(0, Ordering::Relaxed);
        assert_eq!(s.first_pid(), Some(22));
    }

    #[test]
    fn no_server_and_a_server_never_read_have_no_sample() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        assert!(ServerProcesses::new(vec![])
            .sample(&root, 4096, true)
            .is_none());
        let s = ServerProcesses::new(vec![Arc::new(AtomicU32::new(99))]);
        assert!(s.sample(&root, 4096, true).is_none());
    }
}
