//! What one timed operation's two clock reads cost on this machine, by kind of read: the
//! floor of per-operation latency recording (BENCHMARKS.md "The harness's own cost").
//!   rustc -O bench/clock-pair.rs -o /tmp/clock-pair && taskset -c 1 /tmp/clock-pair
//! kvmeter uses `lfence; rdtsc` (ordered, as the kernel's vDSO reads the TSC) where the kernel
//! keeps time with the TSC, else `Instant` (clock_gettime through the vDSO).
use std::arch::x86_64::*;
use std::time::Instant;
#[inline(never)] fn a(n: u64) -> u64 { let mut s=0; for _ in 0..n { unsafe { _mm_lfence(); s ^= _rdtsc(); _mm_lfence(); s ^= _rdtsc(); } } s }
#[inline(never)] fn b(n: u64) -> u64 { let mut s=0; for _ in 0..n { unsafe { s ^= _rdtsc(); s ^= _rdtsc(); } } s }
#[inline(never)] fn c(n: u64) -> u64 { let mut s=0; let mut aux=0u32; for _ in 0..n { unsafe { s ^= __rdtscp(&mut aux); s ^= __rdtscp(&mut aux); } } s }
#[inline(never)] fn d(n: u64) -> u64 { let mut s=0; let t=Instant::now(); for _ in 0..n { s ^= t.elapsed().as_nanos() as u64; s ^= t.elapsed().as_nanos() as u64; } s }
#[inline(never)] fn e(n: u64) -> u64 { let mut s=0; for _ in 0..n { unsafe { _mm_lfence(); s ^= _rdtsc(); s ^= __rdtscp(&mut 0u32) ; } } s }
fn main() {
    let n = 20_000_000;
    for _ in 0..3 {
        for (name, f) in [("lfence;rdtsc x2", a as fn(u64)->u64), ("rdtsc x2", b), ("rdtscp x2", c), ("Instant x2", d), ("lfence;rdtsc + rdtscp", e)] {
            let t = Instant::now(); let s = f(n); let ns = t.elapsed().as_nanos() as f64 / n as f64;
            println!("{name:24} {ns:6.1} ns per pair ({s})");
        }
    }
}
