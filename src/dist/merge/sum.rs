//! The sum of one interval's reports from every agent: decode each report's compressed
//! histograms and add them. At a thousand agents this is the coordinator's main cost per
//! interval (issue 33), almost all of it in decoding (inflate, then a histogram of kvmeter's
//! bounds per metric), so the reports are split into contiguous chunks decoded and summed on
//! scoped threads, and the chunks' sums are added in order.
//!
//! Exactness is kept by construction: histogram counts are integers and addition of integers
//! is associative and commutative, so any grouping gives the same counts, min, max and total —
//! the merged HDR logs equal the union of the agents' (tests below check this against
//! histograms built value by value, not against this code). Status counts and bytes are integer
//! sums too. A small interval (few reports) is summed on the calling thread: a thread costs more
//! than it saves there.

use crate::dist::IntervalPost;
use crate::measure::Stats;

/// Reports one thread takes at least before another is started.
const PER_THREAD: usize = 32;
/// Threads a merge uses at most (the coordinator is one process among the load's).
const MAX_THREADS: usize = 8;

/// Threads for a merge: the CPUs this process may use, at most `MAX_THREADS`.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_THREADS)
}

/// The sum of `posts`' stats, on up to `threads` threads; the first report that does not decode
/// (in the posts' order) is the error.
pub fn stats(posts: &[&IntervalPost], threads: usize) -> anyhow::Result<Stats> {
    let threads = threads.min(posts.len() / PER_THREAD).max(1);
    if threads == 1 {
        return sequential(posts);
    }
    let chunk = posts.len().div_ceil(threads);
    // `None`: no thread could be had for that chunk; it is summed here instead.
    let partial: Vec<Option<anyhow::Result<Stats>>> = std::thread::scope(|s| {
        let handles: Vec<_> = posts
            .chunks(chunk)
            .map(|c| {
                std::thread::Builder::new()
                    .name("kvm-dist-merge".into())
                    .spawn_scoped(s, move || sequential(c))
                    .ok()
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a merge thread panicked")))
                })
            })
            .collect()
    });
    let mut acc: Option<Stats> = None;
    for (c, p) in posts.chunks(chunk).zip(partial) {
        let p = p.unwrap_or_else(|| sequential(c))?;
        match acc.as_mut() {
            Some(a) => a.add(&p),
            None => acc = Some(p),
        }
    }
    Ok(acc.expect("at least one chunk"))
}

/// The sum of `posts`' stats on this thread.
pub fn sequential(posts: &[&IntervalPost]) -> anyhow::Result<Stats> {
    let Some(first) = posts.first() else {
        return Ok(Stats::new(&[], false));
    };
    let mut acc = Stats::from_wire(&first.stats)?;
    for p in &posts[1..] {
        acc.add(&Stats::from_wire(&p.stats)?);
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{new_histogram, Metric};
    use crate::store::Status;

    /// Agent `a`'s interval: reads of latencies a·1000 + j·37 ns (j < 50 + a % 7), updates of
    /// a·5 + 3 ms for every third agent.
    fn values(a: u64) -> (Vec<u64>, Vec<u64>) {
        let reads = (0..50 + a % 7).map(|j| a * 1000 + j * 37 + 1).collect();
        let updates = if a.is_multiple_of(3) {
            vec![a * 5_000_000 + 3_000_000]
        } else {
            vec![]
        };
        (reads, updates)
    }

    fn post(a: u64) -> IntervalPost {
        let mut s = Stats::new(&[Metric::Read, Metric::Update], false);
        let (reads, updates) = values(a);
        for v in reads {
            s.record(Metric::Read, Status::Ok, v, 0, 10);
        }
        for v in updates {
            s.record(Metric::Update, Status::Ok, v, 0, 100);
        }
        IntervalPost {
            agent: a as usize,
            phase_index: 0,
            phase: "run".into(),
            index: 0,
            start_s: 0.0,
            end_s: 1.0,
            warmup: false,
            stats: s.to_wire(),
        }
    }

    #[test]
    fn a_parallel_merge_is_the_union_of_every_value_exactly() {
        let n = 300u64;
        let posts: Vec<IntervalPost> = (0..n).map(post).collect();
        let refs: Vec<&IntervalPost> = posts.iter().collect();
        // The golden union: every value recorded into one histogram, no merging involved.
        let (mut reads, mut updates) = (new_histogram(), new_histogram());
        let (mut n_reads, mut n_updates) = (0u64, 0u64);
        for a in 0..n {
            let (r, u) = values(a);
            n_reads += r.len() as u64;
            n_updates += u.len() as u64;
            r.iter().for_each(|v| reads.record(*v).unwrap());
            u.iter().for_each(|v| updates.record(*v).unwrap());
        }
        for threads in [1, 2, 3, 8] {
            let m = stats(&refs, threads).unwrap();
            let (r, u) = (m.get(Metric::Read).unwrap(), m.get(Metric::Update).unwrap());
            assert_eq!(r.ok, reads, "{threads} threads: reads");
            assert_eq!(u.ok, updates, "{threads} threads: updates");
            assert_eq!(r.statuses[0], n_reads, "{threads} threads");
            assert_eq!(u.statuses[0], n_updates, "{threads} threads");
            assert_eq!(r.bytes, 10 * n_reads, "{threads} threads");
            assert_eq!(u.bytes, 100 * n_updates, "{threads} threads");
            assert_eq!(r.ok.max(), reads.max());
        }
    }

    #[test]
    fn a_report_that_does_not_decode_is_the_error_in_any_chunk() {
        let mut posts: Vec<IntervalPost> = (0..200).map(post).collect();
        posts[150].stats.ops[0].ok = "not a histogram".into();
        let refs: Vec<&IntervalPost> = posts.iter().collect();
        for threads in [1, 4] {
            let Err(e) = stats(&refs, threads) else {
                panic!("{threads} threads: a bad report merged");
            };
            let e = e.to_string();
            assert!(e.contains("histogram does not decode"), "{threads}: {e}");
        }
    }
}
