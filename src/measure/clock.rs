//! The clock around each store call.
//!
//! Two monotonic clock reads per operation are the largest fixed cost of the hot path
//! (`clock_gettime` through the vDSO costs about 25 ns here). Where the kernel itself keeps
//! time with the TSC (clocksource `tsc`, which it only selects when the TSC is invariant and
//! synchronised across CPUs), reading the TSC directly gives the same time base for less:
//! kvmeter then reads it with `lfence; rdtsc` (ordered, as the kernel's vDSO does, so the read
//! cannot drift into the timed call) and converts ticks to nanoseconds with `quanta`'s
//! calibration against the monotonic clock. Anywhere else — another clocksource, another
//! architecture, a calibration that disagrees with the monotonic clock by more than 1 %, or
//! `--clock monotonic` — it uses `CLOCK_MONOTONIC` (`std::time::Instant`). The choice is
//! recorded in the manifest.

use std::time::{Duration, Instant};

#[derive(Clone)]
pub enum Clock {
    Tsc {
        calibration: quanta::Clock,
        origin: u64,
    },
    Monotonic {
        origin: Instant,
    },
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc_ordered() -> u64 {
    // SAFETY: lfence and rdtsc have no memory effects; x86_64 always has SSE2.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim() == "tsc")
        .unwrap_or(false)
}

impl Clock {
    pub fn monotonic() -> Self {
        Clock::Monotonic {
            origin: Instant::now(),
        }
    }

    /// The TSC where it is safe (see the module header), else the monotonic clock; with a
    /// description for the manifest.
    pub fn auto(allow_tsc: bool) -> (Self, String) {
        if !allow_tsc {
            return (
                Self::monotonic(),
                "CLOCK_MONOTONIC (--clock monotonic)".into(),
            );
        }
        #[cfg(target_arch = "x86_64")]
        {
            if !kernel_uses_tsc() {
                return (
                    Self::monotonic(),
                    "CLOCK_MONOTONIC (the kernel's clocksource is not tsc)".into(),
                );
            }
            let calibration = quanta::Clock::new();
            let t0 = Instant::now();
            let r0 = rdtsc_ordered();
            std::thread::sleep(Duration::from_millis(20));
            let r1 = rdtsc_ordered();
            let wall = t0.elapsed().as_nanos() as f64;
            let tsc = calibration.delta_as_nanos(r0, r1) as f64;
            if (tsc / wall - 1.0).abs() > 0.01 {
                return (
                    Self::monotonic(),
                    format!(
                        "CLOCK_MONOTONIC (TSC calibration off by {:.1} %)",
                        (tsc / wall - 1.0) * 100.0
                    ),
                );
            }
            let origin = rdtsc_ordered();
            (
                Clock::Tsc { calibration, origin },
                "TSC (lfence; rdtsc), calibrated against CLOCK_MONOTONIC; the kernel's clocksource is tsc".into(),
            )
        }
        #[cfg(not(target_arch = "x86_64"))]
        (Self::monotonic(), "CLOCK_MONOTONIC".into())
    }

    /// Nanoseconds since this clock's origin.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            Clock::Tsc {
                calibration,
                origin,
            } => calibration.delta_as_nanos(*origin, rdtsc_ordered()),
            #[cfg(not(target_arch = "x86_64"))]
            Clock::Tsc { .. } => unreachable!("TSC clock only on x86_64"),
            Clock::Monotonic { origin } => origin.elapsed().as_nanos() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clocks_agree_with_the_wall() {
        for allow in [true, false] {
            let (c, what) = Clock::auto(allow);
            let a = c.now();
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(50));
            let b = c.now();
            let wall = t.elapsed().as_nanos() as f64;
            let d = (b - a) as f64;
            assert!((d / wall - 1.0).abs() < 0.05, "{what}: {d} ns vs {wall} ns");
            assert!(c.now() >= b);
        }
    }
}
