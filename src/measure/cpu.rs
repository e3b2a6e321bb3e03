//! The CPU kvmeter's own process spends per operation (issue 16: a harness is judged by what
//! it costs next to the store, not only by the throughput it reaches).
//!
//! `getrusage(RUSAGE_SELF)` at the start of a phase's measured window and after its workers
//! end: user and system time of every thread of the process — workers, the interval
//! collector, the telemetry sampler, progress, and an embedded store's own threads (RocksDB's
//! flushes and compactions run inside kvmeter). A server store's process is not included
//! (telemetry reports it as `server`). Linux takes the total from the scheduler's runtime
//! accounting (precise), and splits it into user and system by tick samples, so the sum and
//! `ns_per_op` are exact while the split is approximate over a short phase. Telemetry's
//! `process.cpu_pct` samples /proc every interval instead and is off with telemetry; this
//! figure costs two system calls per phase and is always there.

use serde::{Deserialize, Serialize};

/// User and system CPU time of the whole process so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTime {
    /// This process's CPU time so far (zero where `getrusage` fails, which it does not on a
    /// valid `who`).
    pub fn now() -> Self {
        // SAFETY: getrusage writes one rusage into the zeroed struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return CpuTime::default();
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        CpuTime {
            user_s: secs(ru.ru_utime),
            system_s: secs(ru.ru_stime),
        }
    }

    /// The CPU spent between `start` and `self`, per `ops` operations.
    pub fn since(self, start: CpuTime, ops: u64) -> Option<KvmeterCpu> {
        let user_s = (self.user_s - start.user_s).max(0.0);
        let system_s = (self.system_s - start.system_s).max(0.0);
        (ops > 0).then(|| KvmeterCpu {
            user_seconds: user_s,
            system_seconds: system_s,
            ns_per_op: (user_s + system_s) * 1e9 / ops as f64,
        })
    }
}

/// kvmeter's own process over a phase's measured window (summary.json `kvmeter_cpu`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KvmeterCpu {
    pub user_seconds: f64,
    pub system_seconds: f64,
    /// (user + system) / the phase's operations, in ns.
    pub ns_per_op: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_loop_shows_as_user_time() {
        // This thread's own CPU clock, independent of getrusage: spin until it has run 200 ms
        // (however long that takes on a loaded machine).
        let thread_cpu = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
        };
        let a = CpuTime::now();
        let start = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - start < 0.2 {
            // About a millisecond of user time per look at the clock (itself a system call).
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let b = CpuTime::now();
        let c = b.since(a, 1000).unwrap();
        // 200 ms of this thread's CPU, whatever else the process does: at least 150 ms of user
        // time (the kernel splits user and system by sampling; the test harness's other
        // threads can only add).
        assert!(c.user_seconds + c.system_seconds >= 0.19, "{c:?}");
        assert!(c.user_seconds >= 0.15, "{c:?}");
        assert!((c.ns_per_op - (c.user_seconds + c.system_seconds) * 1e6).abs() < 1.0);
        assert!(b.since(a, 0).is_none());
    }
}
