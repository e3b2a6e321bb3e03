//! One agent's share of a distributed run (docs/distributed.md, issue "past one machine"):
//! N agents × T threads must do what one host with N·T threads does.
//!
//! - Load: agent i inserts its contiguous slice of `[insertstart, insertstart+insertcount)`
//!   (YCSB's own `insertstart`/`insertcount` partitioning, as its docs suggest for many clients).
//! - Run: every agent draws from the whole key range. Worker w of agent i uses random stream
//!   `i·T + w` (the driver reads `Plan::share`), and its operation count is the one YCSB's split
//!   (§8.2) gives that global worker, so each worker replays one host's worker exactly.
//!   Run-phase inserts are spread: agent i takes keys `recordcount + i + k·N`.
//! - Pacing: `--target` and open-loop `--rate` are divided by N (the per-thread schedule of
//!   `--target` is then the same as one host's). Poisson arrivals stay Poisson (a sum of
//!   independent Poisson processes is one); fixed arrivals are phased i/N of a gap apart, so
//!   together they are evenly spaced at the full rate.
//!
//! The plan hash is what a coordinator and its agents compare before anything runs: the
//! resolved plan with the fields that are each host's own (run directory, data directory,
//! stdout format, warnings) taken out.

use super::{PhaseKind, Plan, Share};
use crate::driver::split_ops;

/// Agent `index` of `count`'s slice of `total` items: (offset, length), the first
/// `total % count` agents one longer.
pub fn slice(total: u64, count: usize, index: usize) -> (u64, u64) {
    let n = count as u64;
    let i = index as u64;
    let base = total / n;
    let extra = total % n;
    (i * base + i.min(extra), base + u64::from(i < extra))
}

/// Makes `plan` agent `share.index`'s part of the run `plan` describes for one host.
pub fn apply_share(plan: &mut Plan, share: Share) {
    let (n, i) = (share.count, share.index);
    for p in &mut plan.phases {
        let t = p.threads;
        match p.kind {
            PhaseKind::Load => {
                let (lo, len) = slice(p.operations, n, i);
                if let Some(w) = p.workload.as_mut() {
                    w.insertstart += lo as i64;
                    w.insertcount = len as i64;
                    w.operationcount = len as i64;
                }
                p.operations = len;
            }
            PhaseKind::Run => {
                p.operations = match &p.open_loop {
                    // Open loop: arrival tickets i, i+N, i+2N, ... of the whole schedule.
                    Some(_) => split_ops(p.operations, n, i),
                    None => (0..t)
                        .map(|w| split_ops(p.operations, n * t, i * t + w))
                        .sum(),
                };
                if let Some(w) = p.workload.as_mut() {
                    w.insert_stride = n as i64;
                    w.insert_offset = i as i64;
                }
            }
            PhaseKind::Clear => {}
        }
        if let Some(target) = p.target.as_mut() {
            *target /= n as f64;
        }
        if let Some(o) = p.open_loop.as_mut() {
            o.rate /= n as f64;
            o.offset_gaps = i as f64 / n as f64;
        }
    }
    plan.share = Some(share);
}

/// The 16-hex-digit hash of the resolved plan without each host's own fields (FNV-1a over
/// its JSON: a check that two processes resolved the same plan, not a security measure).
pub fn plan_hash(plan: &Plan) -> String {
    let mut v = serde_json::to_value(plan).expect("a plan serializes");
    if let Some(o) = v.as_object_mut() {
        for own in [
            "out",
            "data_dir",
            "format",
            "warnings",
            "share",
            "status_interval",
        ] {
            o.remove(own);
        }
    }
    let text = v.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_range_once() {
        for (total, n) in [(10u64, 3usize), (9, 3), (2, 4), (100_000, 4)] {
            let mut next = 0;
            for i in 0..n {
                let (lo, len) = slice(total, n, i);
                assert_eq!(lo, next, "{total} over {n}, agent {i}");
                next += len;
            }
            assert_eq!(next, total);
        }
        assert_eq!(slice(10, 3, 0), (0, 4));
        assert_eq!(slice(10, 3, 2), (7, 3));
    }

    #[test]
    fn agents_split_operations_as_one_host_splits_its_threads() {
        // One host: 1003 operations over 3·2 threads; agent i's workers are global i·2, i·2+1.
        let (n, t, total) = (3usize, 2usize, 1003u64);
        let one_host: Vec<u64> = (0..n * t).map(|g| split_ops(total, n * t, g)).collect();
        for i in 0..n {
            let agent: u64 = (0..t).map(|w| split_ops(total, n * t, i * t + w)).sum();
            // The agent then splits its own count over its T threads the same way.
            for w in 0..t {
                assert_eq!(split_ops(agent, t, w), one_host[i * t + w]);
            }
        }
    }
}
