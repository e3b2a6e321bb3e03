//! Parsers and rate computations for /proc and /sys (papers/001 §3.4 reads CPU and disk
//! utilisation; papers/000 and /002 read power). Every reader takes a filesystem root so tests
//! can point it at fixture trees. Hand-written rather than the `procfs` crate because the
//! samplers need a root other than `/` for fixtures and exact control of counter wrap-around.

use std::path::{Path, PathBuf};

/// The filesystem the samplers read: `/` in a run, a fixture directory in tests.
#[derive(Clone, Debug)]
pub struct Root(pub PathBuf);

impl Root {
    pub fn system() -> Self {
        Root(PathBuf::from("/"))
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel.trim_start_matches('/'))
    }
    pub fn read(&self, rel: &str) -> std::io::Result<String> {
        std::fs::read_to_string(self.path(rel))
    }
}

/// Difference of a monotonically increasing kernel counter that may wrap: counters below
/// 2^32 are taken as 32-bit (the millisecond fields of /proc/diskstats are `unsigned int` on
/// many kernels), larger ones as 64-bit.
pub fn counter_delta(prev: u64, cur: u64) -> u64 {
    if cur >= prev {
        cur - prev
    } else if prev <= u32::MAX as u64 {
        cur + (1u64 << 32) - prev
    } else {
        cur.wrapping_sub(prev)
    }
}

// ---------------------------------------------------------------- CPU (/proc/stat)

/// Jiffies of one `cpu` line. `guest` and `guest_nice` are already inside `user` and `nice`,
/// so they are not added again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    pub fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }
}

/// Shares of capacity over an interval, in percent.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuShare {
    pub busy: f64,
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
    pub idle: f64,
}

impl CpuShare {
    pub fn between(a: &CpuTimes, b: &CpuTimes) -> Option<Self> {
        let total = counter_delta(a.total(), b.total()) as f64;
        if total <= 0.0 {
            return None;
        }
        let p = |x: u64, y: u64| counter_delta(x, y) as f64 * 100.0 / total;
        let idle = p(a.idle, b.idle);
        let iowait = p(a.iowait, b.iowait);
        Some(CpuShare {
            busy: 100.0 - idle - iowait,
            user: p(a.user, b.user),
            nice: p(a.nice, b.nice),
            system: p(a.system, b.system),
            iowait,
            irq: p(a.irq, b.irq),
            softirq: p(a.softirq, b.softirq),
            steal: p(a.steal, b.steal),
            idle,
        })
    }
}

/// The aggregate line and one entry per CPU, in order.
pub fn parse_stat(text: &str) -> Option<(CpuTimes, Vec<CpuTimes>)> {
    let mut total = None;
    let mut cpus = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        if !name.starts_with("cpu") {
            continue;
        }
        let v: Vec<u64> = it.map(|x| x.parse().unwrap_or(0)).collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0);
        let t = CpuTimes {
            user: g(0),
            nice: g(1),
            system: g(2),
            idle: g(3),
            iowait: g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        };
        if name == "cpu" {
            total = Some(t);
        } else {
            cpus.push(t);
        }
    }
    total.map(|t| (t, cpus))
}

// ------------------------------------------------------------ disk (/proc/diskstats)

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub reads: u64,
    pub read_sectors: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    pub io_ms: u64,
    pub weighted_ms: u64,
}

pub fn parse_diskstats(text: &str, device: &str) -> Option<DiskCounters> {
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 14 && f[2] == device {
            let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
            return Some(DiskCounters {
                reads: n(3),
                read_sectors: n(5),
                read_ms: n(6),
                writes: n(7),
                write_sectors: n(9),
                write_ms: n(10),
                io_ms: n(12),
                weighted_ms: n(13),
            });
        }
    }
    None
}

#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DiskRates {
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_mb_per_s: f64,
    pub write_mb_per_s: f64,
    /// Share of the interval with I/O in flight (io_ticks).
    pub util_pct: f64,
    /// Average requests in flight (weighted io_ticks / time).
    pub queue_depth: f64,
    /// Average time per completed request, queueing included (ms); absent when no request
    /// completed (a latency with no samples has no value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub await_ms: Option<f64>,
}

impl DiskRates {
    /// Rates between two samples `secs` apart. Sectors are 512 bytes in /proc/diskstats
    /// whatever the device's block size.
    pub fn between(a: &DiskCounters, b: &DiskCounters, secs: f64) -> Self {
        let d = |x: u64, y: u64| counter_delta(x, y) as f64;
        let ios = d(a.reads, b.reads) + d(a.writes, b.writes);
        let ms = d(a.read_ms, b.read_ms) + d(a.write_ms, b.write_ms);
        DiskRates {
            read_iops: d(a.reads, b.reads) / secs,
            write_iops: d(a.writes, b.writes) / secs,
            read_mb_per_s: d(a.read_sectors, b.read_sectors) * 512.0 / secs / 1e6,
            write_mb_per_s: d(a.write_sectors, b.write_sectors) * 512.0 / secs / 1e6,
            util_pct: (d(a.io_ms, b.io_ms) / (secs * 1000.0) * 100.0).min(100.0),
            queue_depth: d(a.weighted_ms, b.weighted_ms) / (secs * 1000.0),
            await_ms: (ios > 0.0).then(|| ms / ios),
        }
    }
}

/// The whole disk under `dev` (a partition's parent; a device-mapper device's first slave),
/// by name, using /sys/class/block.
pub fn whole_disk(root: &Root, dev: &str) -> String {
    let mut name = dev.trim_start_matches("/dev/").to_string();
    for _ in 0..4 {
        let base = format!("sys/class/block/{name}");
        if root.path(&format!("{base}/partition")).exists() {
            // /sys/class/block/<part> links into .../<disk>/<part>.
            if let Ok(target) = std::fs::canonicalize(root.path(&base)) {
                if let Some(parent) = target
                    .parent()
                    .and_then(|p| p.file_name())
                    .and_then(|n| n.to_str())
                {
                    name = parent.to_string();
                    continue;
                }
            }
            return name;
        }
        if let Ok(mut slaves) = std::fs::read_dir(root.path(&format!("{base}/slaves"))) {
            if let Some(Ok(s)) = slaves.next() {
                name = s.file_name().to_string_lossy().into_owned();
                continue;
            }
        }
        break;
    }
    name
}

// ------------------------------------------------------------ a process (/proc/PID)

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcSample {
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    pub rss_bytes: u64,
    pub voluntary_cs: u64,
    pub involuntary_cs: u64,
    /// Storage-level bytes (/proc/PID/io read_bytes, write_bytes); None without permission.
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
}

/// (comm, utime + stime) from a `stat` file; the comm may hold spaces and parentheses.
pub fn parse_pid_stat(text: &str) -> Option<(String, u64, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15, rss (pages) 24.
    let n = |field: usize| rest.get(field - 3).and_then(|v| v.parse::<u64>().ok());
    Some((comm, n(14)? + n(15)?, n(24).unwrap_or(0)))
}

pub fn read_process(root: &Root, pid: u32, page_size: u64) -> Option<ProcSample> {
    let (_, ticks, rss_pages) = parse_pid_stat(&root.read(&format!("proc/{pid}/stat")).ok()?)?;
    let status = root.read(&format!("proc/{pid}/status")).unwrap_or_default();
    let field = |text: &str, key: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    let io = root.read(&format!("proc/{pid}/io")).ok();
    Some(ProcSample {
        cpu_ticks: ticks,
        rss_bytes: rss_pages * page_size,
        // The first thread's only: `thread_switches` and `own_context_switches` count them all.
        voluntary_cs: field(&status, "voluntary_ctxt_switches:").unwrap_or(0),
        involuntary_cs: field(&status, "nonvoluntary_ctxt_switches:").unwrap_or(0),
        read_bytes: io.as_deref().and_then(|t| field(t, "read_bytes:")),
        write_bytes: io.as_deref().and_then(|t| field(t, "write_bytes:")),
    })
}

/// (voluntary, involuntary) context switches of every live thread of a process, summed:
/// /proc/PID/status counts its first thread's only. Those of threads that ended are gone.
pub fn thread_switches(root: &Root, pid: u32) -> Option<(u64, u64)> {
    let field = |text: &str, key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    tasks(root, pid)
        .into_iter()
        .filter_map(|(_, dir)| std::fs::read_to_string(dir.join("status")).ok())
        .map(|t| {
            (
                field(&t, "voluntary_ctxt_switches:"),
                field(&t, "nonvoluntary_ctxt_switches:"),
            )
        })
        .reduce(|(v, i), (tv, ti)| (v + tv, i + ti))
}

/// (voluntary, involuntary) context switches of this process: every thread's, those that
/// ended included (`getrusage`), without reading a file per thread.
pub fn own_context_switches() -> Option<(u64, u64)> {
    // SAFETY: getrusage writes only the struct it is given, which is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0;
    ok.then(|| (ru.ru_nvcsw.max(0) as u64, ru.ru_nivcsw.max(0) as u64))
}

/// A thread's group: its name without a trailing worker number ("kvm-worker-3" → "kvm-worker",
/// "rocksdb:low0" → "rocksdb:low"), so the harness's cost shows apart from the store's.
pub fn thread_group(comm: &str) -> String {
    let t = comm.trim_end_matches(|c: char| c.is_ascii_digit());
    let t = t.trim_end_matches(['-', '_', ' ', '#']);
    if t.is_empty() {
        comm.to_string()
    } else {
        t.to_string()
    }
}

/// (tid, /proc/PID/task/TID) of every live thread of a process; none when it is gone.
fn tasks(root: &Root, pid: u32) -> Vec<(u32, std::path::PathBuf)> {
    let Ok(dir) = std::fs::read_dir(root.path(&format!("proc/{pid}/task"))) else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((tid, e.path()))
        })
        .collect()
}

/// (tid, thread group, CPU ticks) of every thread of a process.
pub fn read_threads(root: &Root, pid: u32) -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    for (tid, dir) in tasks(root, pid) {
        let Ok(text) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        let Some((comm, ticks, _)) = parse_pid_stat(&text) else {
            continue;
        };
        out.push((tid, thread_group(&comm), ticks));
    }
    out
}

/// A task's storage-level I/O (`/proc/PID/io`, `/proc/PID/task/TID/io`): bytes the kernel
/// read from a device for it, bytes it dirtied for writeback, and bytes of those a truncate
/// or delete cancelled before they were written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIo {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub cancelled_write_bytes: u64,
}

/// Parses an `io` file; `None` without its three storage lines.
pub fn parse_io(text: &str) -> Option<TaskIo> {
    let field = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(TaskIo {
        read_bytes: field("read_bytes:")?,
        write_bytes: field("write_bytes:")?,
        cancelled_write_bytes: field("cancelled_write_bytes:")?,
    })
}

/// A process's I/O: every thread's, those that ended included.
pub fn read_io(root: &Root, pid: u32) -> Result<TaskIo, String> {
    let rel = format!("proc/{pid}/io");
    let text = root.read(&rel).map_err(|e| format!("/{rel}: {e}"))?;
    parse_io(&text).ok_or_else(|| format!("/{rel}: not the kernel's format"))
}

/// (tid, thread name, I/O) of every live thread of a process.
pub fn read_thread_io(root: &Root, pid: u32) -> Vec<(u32, String, TaskIo)> {
    let mut out = Vec::new();
    for (tid, dir) in tasks(root, pid) {
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let Some(io) = std::fs::read_to_string(dir.join("io"))
            .ok()
            .and_then(|t| parse_io(&t))
        else {
            continue;
        };
        out.push((tid, comm.trim_end().to_string(), io));
    }
    out
}

// ---------------------------------------------------------------- memory and PSI

#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Memory {
    pub total_mb: f64,
    pub used_mb: f64,
    pub available_mb: f64,
    pub cached_mb: f64,
    pub dirty_mb: f64,
}

pub fn parse_meminfo(text: &str) -> Option<Memory> {
    let kb = |key: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
    };
    let total = kb("MemTotal:")?;
    let available = kb("MemAvailable:").unwrap_or(0.0);
    Some(Memory {
        total_mb: total / 1024.0,
        used_mb: (total - available) / 1024.0,
        available_mb: available / 1024.0,
        cached_mb: kb("Cached:").unwrap_or(0.0) / 1024.0,
        dirty_mb: kb("Dirty:").unwrap_or(0.0) / 1024.0,
    })
}

/// `some` and `full` stall totals (µs) of one /proc/pressure file.
pub fn parse_pressure(text: &str) -> (Option<u64>, Option<u64>) {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))
            .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("total=")))
            .and_then(|v| v.parse().ok())
    };
    (total("some"), total("full"))
}

pub fn exists(root: &Root, rel: &str) -> bool {
    Path::new(&root.path(rel)).exists()
}

/// Sockets listening on TCP `port` (/proc/net/tcp and tcp6, state 0A), by inode; at most 16.
pub fn listening_inodes(tcp_tables: &[String], port: u16) -> Vec<u64> {
    let want = format!(":{port:04X}");
    let mut out = vec![];
    for table in tcp_tables {
        for line in table.lines().skip(1).take(100_000) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            if local.ends_with(&want) && *state == "0A" {
                if let Ok(i) = inode.parse::<u64>() {
                    if i != 0 && out.len() < 16 && !out.contains(&i) {
                        out.push(i);
                    }
                }
            }
        }
    }
    out
}

/// The process listening on TCP `port` on this host — a user's own server (`addr=`), for
/// `--profile` — found through the kernel's socket tables and each process's descriptors.
/// Err says why not: nothing listens there, or the listener's descriptors are another user's.
pub fn listening_pid(root: &Root, port: u16) -> Result<u32, String> {
    let tables: Vec<String> = ["proc/net/tcp", "proc/net/tcp6"]
        .iter()
        .filter_map(|t| root.read(t).ok())
        .collect();
    let inodes = listening_inodes(&tables, port);
    if inodes.is_empty() {
        return Err(format!("nothing on this host listens on TCP port {port}"));
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let Ok(procs) = std::fs::read_dir(root.path("proc")) else {
        return Err("/proc cannot be read".into());
    };
    let mut unreadable = 0usize;
    for e in procs.flatten().take(1_000_000) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            unreadable += 1;
            continue;
        };
        for fd in fds.flatten().take(1_000_000) {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if wanted.iter().any(|w| target.as_os_str() == w.as_str()) {
                    return Ok(pid);
                }
            }
        }
    }
    Err(if unreadable > 0 {
        format!("the process listening on port {port} is not one this user may inspect (another user's: run as root)")
    } else {
        format!("no process holds the socket listening on port {port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_shares_count_guest_once() {
        let a = "cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 50 0 25 400 25 0 0 0 30 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1\n";
        // +60 user (30 of it guest), +20 system, +100 idle, +10 iowait, +10 steal: total 200.
        let b = "cpu  160 0 70 900 60 0 0 10 60 0\ncpu0 110 0 45 450 30 0 0 10 60 0\ncpu1 50 0 25 450 30 0 0 0 0 0\n";
        let (ta, ca) = parse_stat(a).unwrap();
        let (tb, cb) = parse_stat(b).unwrap();
        assert_eq!(ca.len(), 2);
        let s = CpuShare::between(&ta, &tb).unwrap();
        assert_eq!(s.user, 30.0);
        assert_eq!(s.system, 10.0);
        assert_eq!(s.idle, 50.0);
        assert_eq!(s.iowait, 5.0);
        assert_eq!(s.steal, 5.0);
        assert_eq!(s.busy, 45.0);
        // cpu0: +60 user, +20 system, +50 idle, +5 iowait, +10 steal = 145.
        let s0 = CpuShare::between(&ca[0], &cb[0]).unwrap();
        assert!((s0.busy - 90.0 * 100.0 / 145.0).abs() < 1e-9);
    }

    #[test]
    fn disk_rates_and_32_bit_wrap() {
        let line = |r, rs, rms, w, ws, wms, io, wt| {
            format!("   8       0 sda {r} 0 {rs} {rms} {w} 0 {ws} {wms} 0 {io} {wt} 0 0 0 0\n   8       1 sda1 1 0 1 1 1 0 1 1 0 1 1\n")
        };
        let a = parse_diskstats(
            &line(
                1000,
                8000,
                500,
                2000,
                16000,
                4_294_967_000u64,
                4_294_966_796u64,
                100,
            ),
            "sda",
        )
        .unwrap();
        // In 2 s: +500 reads of 4 KiB, +1000 writes of 8 KiB, write_ms wraps (+796), io_ms
        // wraps (+1500 ms of the 2000), weighted +3000 ms.
        let b = parse_diskstats(
            &line(1500, 12000, 1000, 3000, 32000, 500, 1000, 3100),
            "sda",
        )
        .unwrap();
        let r = DiskRates::between(&a, &b, 2.0);
        assert_eq!(r.read_iops, 250.0);
        assert_eq!(r.write_iops, 500.0);
        assert_eq!(r.read_mb_per_s, 4000.0 * 512.0 / 2.0 / 1e6);
        assert_eq!(r.write_mb_per_s, 16000.0 * 512.0 / 2.0 / 1e6);
        assert_eq!(r.util_pct, 75.0);
        assert_eq!(r.queue_depth, 1.5);
        assert!((r.await_ms.unwrap() - (500.0 + 796.0) / 1500.0).abs() < 1e-12);
        // No request completed: no await, where 0 ms would read as an instant disk.
        let idle = DiskRates::between(&b, &b, 2.0);
        assert_eq!((idle.read_iops, idle.await_ms), (0.0, None));
        let json = serde_json::to_value(idle).unwrap();
        assert!(json.get("await_ms").is_none(), "{json}");
        assert!(parse_diskstats(&line(1, 1, 1, 1, 1, 1, 1, 1), "sdb").is_none());
        assert_eq!(counter_delta(u64::MAX - 1, 3), 5);
    }

    #[test]
    fn pid_stat_with_odd_comm() {
        let text = "1234 (rocks db) (x)) S 1 1 1 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 100 1000000 2560 18446744073709551615";
        let (comm, ticks, rss) = parse_pid_stat(text).unwrap();
        assert_eq!(comm, "rocks db) (x)");
        assert_eq!(ticks, 300);
        assert_eq!(rss, 2560);
        assert_eq!(thread_group("kvm-worker-12"), "kvm-worker");
        assert_eq!(thread_group("rocksdb:low0"), "rocksdb:low");
        assert_eq!(thread_group("kvmeter"), "kvmeter");
        assert_eq!(thread_group("123"), "123");
    }

    #[test]
    fn meminfo_and_pressure() {
        let m = parse_meminfo("MemTotal: 2048000 kB\nMemFree: 100 kB\nMemAvailable: 1024000 kB\nCached: 512000 kB\nDirty: 1024 kB\n").unwrap();
        assert_eq!(m.total_mb, 2000.0);
        assert_eq!(m.used_mb, 1000.0);
        assert_eq!(m.dirty_mb, 1.0);
        let (s, f) = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=678\n");
        assert_eq!((s, f), (Some(12345), Some(678)));
        assert_eq!(parse_pressure("some avg10=1.0 total=5\n"), (Some(5), None));
    }

    #[test]
    fn partitions_and_device_mapper_resolve_to_disks() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        let dev = t.path().join("sys/devices/pci0/block/nvme0n1");
        std::fs::create_dir_all(dev.join("nvme0n1p2")).unwrap();
        std::fs::write(dev.join("nvme0n1p2/partition"), "2\n").unwrap();
        std::fs::create_dir_all(t.path().join("sys/devices/virtual/block/dm-0/slaves")).unwrap();
        std::fs::create_dir_all(
            t.path()
                .join("sys/devices/virtual/block/dm-0/slaves/nvme0n1p2"),
        )
        .unwrap();
        let class = t.path().join("sys/class/block");
        std::fs::create_dir_all(&class).unwrap();
        std::os::unix::fs::symlink(dev.join("nvme0n1p2"), class.join("nvme0n1p2")).unwrap();
        std::os::unix::fs::symlink(&dev, class.join("nvme0n1")).unwrap();
        std::os::unix::fs::symlink(
            t.path().join("sys/devices/virtual/block/dm-0"),
            class.join("dm-0"),
        )
        .unwrap();
        assert_eq!(whole_disk(&root, "nvme0n1p2"), "nvme0n1");
        assert_eq!(whole_disk(&root, "/dev/dm-0"), "nvme0n1");
        assert_eq!(whole_disk(&root, "nvme0n1"), "nvme0n1");
    }

    #[test]
    fn listening_sockets_from_the_kernels_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:2B67 00000000:0000 0A 00000000:00000000 00:00000000 00000000   101        0 4242 1 0\n   1: 0100007F:2B67 0100007F:D431 01 00000000:00000000 00:00000000 00000000   101        0 4243 1 0\n";
        let v6 = "  sl  local_address remote_address st\n   0: 00000000000000000000000001000000:2B67 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 101 0 77 1 0\n";
        // 11111 = 0x2B67; the established connection (01) is not a listener.
        assert_eq!(
            listening_inodes(&[v4.to_string(), v6.to_string()], 11111),
            vec![4242, 77]
        );
        assert!(listening_inodes(&[v4.to_string()], 11112).is_empty());
    }
}
