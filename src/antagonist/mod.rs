//! Co-located load (papers/004's pressure scale; papers/000 §IV-C(d)'s memory-bandwidth
//! microbenchmark): antagonists that share the device, memory bus or CPUs with the store.
//! Every antagonist stops with its phase, records the load it achieved, and cleans up what it
//! created — on success, error and Ctrl-C alike (its files live in a directory it creates and
//! removes; it never writes to a raw device).

pub mod io;
pub mod schedule;

use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pins the calling thread to one CPU (best effort: a CPU outside the allowed set is ignored).
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn pin_for(cpus: &[usize], i: usize) {
    if !cpus.is_empty() {
        pin_current_thread(cpus[i % cpus.len()]);
    }
}

/// Memory-bandwidth antagonist: threads streaming over large arrays (a copy of 64 MiB per
/// pass), throttled to a target rate by sleeping between chunks.
pub struct MemBw {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    started: Instant,
    handles: Vec<std::thread::JoinHandle<()>>,
    pub threads: usize,
    pub target_gb_per_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct MemBwReport {
    pub threads: usize,
    pub target_gb_per_s: Option<f64>,
    pub achieved_gb_per_s: f64,
}

impl MemBw {
    /// `target`: total GB/s over all threads (None: as fast as possible).
    pub fn start(threads: usize, target: Option<f64>, cpus: &[usize]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let per_thread = target.map(|t| t / threads as f64);
        let handles = (0..threads)
            .map(|i| {
                let (stop, bytes) = (stop.clone(), bytes.clone());
                let cpus = cpus.to_vec();
                std::thread::Builder::new()
                    .name(format!("kvm-membw-{i}"))
                    .spawn(move || {
                        pin_for(&cpus, i);
                        const N: usize = 4 << 20; // 4 Mi u64 = 32 MiB per array
                        const CHUNK: usize = 1 << 16;
                        let src = vec![1u64; N];
                        let mut dst = vec![0u64; N];
                        let t0 = Instant::now();
                        let mut done = 0u64;
                        let mut pos = 0;
                        while !stop.load(Ordering::Relaxed) {
                            dst[pos..pos + CHUNK].copy_from_slice(&src[pos..pos + CHUNK]);
                            std::hint::black_box(&dst[pos]);
                            pos = (pos + CHUNK) % N;
                            let b = (CHUNK * 16) as u64; // read + write
                            done += b;
                            bytes.fetch_add(b, Ordering::Relaxed);
                            if let Some(rate) = per_thread {
                                let due = Duration::from_secs_f64(done as f64 / (rate * 1e9));
                                let el = t0.elapsed();
                                if due > el {
                                    std::thread::sleep(due - el);
                                }
                            }
                        }
                    })
                    .expect("spawn membw antagonist")
            })
            .collect();
        MemBw {
            stop,
            bytes,
            started: Instant::now(),
            handles,
            threads,
            target_gb_per_s: target,
        }
    }

    pub fn stop(mut self) -> MemBwReport {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        let secs = self.started.elapsed().as_secs_f64();
        MemBwReport {
            threads: self.threads,
            target_gb_per_s: self.target_gb_per_s,
            achieved_gb_per_s: self.bytes.load(Ordering::Relaxed) as f64 / secs / 1e9,
        }
    }
}

/// CPU antagonist: busy threads at a duty cycle (busy `duty` of every 10 ms).
pub struct Cpu {
    stop: Arc<AtomicBool>,
    busy_ns: Arc<AtomicU64>,
    started: Instant,
    handles: Vec<std::thread::JoinHandle<()>>,
    pub threads: usize,
    pub duty: f64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct CpuReport {
    pub threads: usize,
    pub duty: f64,
    /// CPUs kept busy on average (busy time / wall time).
    pub achieved_cpus: f64,
}

impl Cpu {
    pub fn start(threads: usize, duty: f64, cpus: &[usize]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let busy_ns = Arc::new(AtomicU64::new(0));
        let period = Duration::from_millis(10);
        let handles = (0..threads)
            .map(|i| {
                let (stop, busy_ns) = (stop.clone(), busy_ns.clone());
                let cpus = cpus.to_vec();
                std::thread::Builder::new()
                    .name(format!("kvm-cpu-{i}"))
                    .spawn(move || {
                        pin_for(&cpus, i);
                        let mut x = 1u64;
                        while !stop.load(Ordering::Relaxed) {
                            let t = Instant::now();
                            let busy = period.mul_f64(duty.clamp(0.0, 1.0));
                            while t.elapsed() < busy {
                                x = std::hint::black_box(
                                    x.wrapping_mul(6364136223846793005).wrapping_add(1),
                                );
                            }
                            busy_ns.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
                            if duty < 1.0 {
                                std::thread::sleep(period - busy);
                            }
                        }
                    })
                    .expect("spawn cpu antagonist")
            })
            .collect();
        Cpu {
            stop,
            busy_ns,
            started: Instant::now(),
            handles,
            threads,
            duty,
        }
    }

    pub fn stop(mut self) -> CpuReport {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        CpuReport {
            threads: self.threads,
            duty: self.duty,
            achieved_cpus: self.busy_ns.load(Ordering::Relaxed) as f64
                / 1e9
                / self.started.elapsed().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membw_is_throttled_and_stops() {
        let m = MemBw::start(1, Some(1.0), &[0]);
        std::thread::sleep(Duration::from_millis(400));
        let t = Instant::now();
        let r = m.stop();
        assert!(t.elapsed() < Duration::from_millis(200), "stops promptly");
        assert!((r.achieved_gb_per_s - 1.0).abs() < 0.3, "{r:?}");
    }

    #[test]
    fn cpu_duty_cycle() {
        let c = Cpu::start(1, 0.5, &[]);
        std::thread::sleep(Duration::from_millis(500));
        let r = c.stop();
        assert!((r.achieved_cpus - 0.5).abs() < 0.15, "{r:?}");
    }
}
