//! The sum of one interval's reports from every agent. At a thousand agents this is the
//! coordinator's main cost per interval (issue 33). Decoding each report into a `Stats`
//! (`Stats::from_wire`) allocates and zero-fills two full histograms of kvmeter's bounds per
//! metric (about 33,000 counts, 260 KB each) and adds them count by count: about 130 µs a
//! histogram, 270 ms for 1,000 reports of two metrics on this machine. Here each report's
//! compressed histograms are instead inflated and their counts added straight into one bare
//! counts array per metric (`decode`): the work follows the bytes sent, not the histogram's
//! range. Large intervals are also split into contiguous chunks summed on scoped threads, and
//! the chunks' sums added in order.
//!
//! Exactness is kept by construction: the wire form carries every count of every bucket, and
//! histogram counts are integers whose addition is associative and commutative, so any
//! decoding path and any grouping give the same counts, min, max and total — the merged HDR
//! logs equal the union of the agents' (tests below check this against histograms built value
//! by value and against the `from_wire` path). The sum is handed over as a `Stats` through the
//! wire form once per interval (`Acc::into_stats`, uncompressed V2), the one public way to
//! build a `Stats` from histograms: a few ms, against a thousand reports' decoding.
//!
//! Everything decoded is bounded (`decode`).

use super::decode::{decode_into, Counts, Scratch};
use crate::distributed::IntervalPost;
use crate::measure::wire::{WireOp, WireStats};
use crate::measure::{Metric, Stats, STATUS_SLOTS};
use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2Serializer};

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
        return Acc::of(posts)?.into_stats();
    }
    let chunk = posts.len().div_ceil(threads);
    // `None`: no thread could be had for that chunk; it is summed here instead.
    let partial: Vec<Option<anyhow::Result<Acc>>> = std::thread::scope(|s| {
        let handles: Vec<_> = posts
            .chunks(chunk)
            .map(|c| {
                std::thread::Builder::new()
                    .name("kvm-dist-merge".into())
                    .spawn_scoped(s, move || Acc::of(c))
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
    let mut acc = Acc::default();
    for (c, p) in posts.chunks(chunk).zip(partial) {
        acc.add(p.unwrap_or_else(|| Acc::of(c))?)?;
    }
    acc.into_stats()
}

/// The sum by `Stats::from_wire` and `Stats::add`, report by report: the reference `stats`
/// must equal (tests, and `dist_sim bench-merge` for the cost).
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

/// One metric's sum.
struct OpAcc {
    metric: String,
    ok: Counts,
    failed: Option<Counts>,
    missed: Option<Counts>,
    intended: Option<Counts>,
    statuses: [u64; STATUS_SLOTS],
    bytes: u64,
}

/// A sum of reports, as counts arrays (made the histograms `Stats` holds once, at the end).
#[derive(Default)]
struct Acc {
    /// The first report's (as `Stats::add` keeps its left side's).
    paced: Option<bool>,
    lag: Option<Counts>,
    ops: Vec<OpAcc>,
}

/// Adds `from` into the optional counts `into`, made on first use.
fn add_opt(into: &mut Option<Counts>, from: Option<Counts>) -> anyhow::Result<()> {
    if let Some(f) = from {
        match into {
            Some(i) => i.add(&f)?,
            None => *into = Some(f),
        }
    }
    Ok(())
}

impl Acc {
    fn of(posts: &[&IntervalPost]) -> anyhow::Result<Acc> {
        let mut acc = Acc::default();
        let mut scratch = Scratch::default();
        for p in posts {
            acc.add_wire(&p.stats, &mut scratch)
                .map_err(|e| anyhow::anyhow!("agent {}'s interval {}: {e}", p.agent, p.index))?;
        }
        Ok(acc)
    }

    fn add_wire(&mut self, w: &WireStats, scratch: &mut Scratch) -> anyhow::Result<()> {
        self.paced.get_or_insert(w.paced);
        if let Some(l) = &w.lag {
            decode_into(self.lag.get_or_insert_with(Counts::new), l, scratch)?;
        }
        for op in &w.ops {
            if !Metric::ALL.iter().any(|m| m.name() == op.metric) {
                anyhow::bail!("unknown metric '{}'", op.metric);
            }
            if op.statuses.len() != STATUS_SLOTS {
                anyhow::bail!(
                    "metric {}: {} status counts, expected {STATUS_SLOTS}",
                    op.metric,
                    op.statuses.len()
                );
            }
            let a = match self.ops.iter().position(|a| a.metric == op.metric) {
                Some(i) => &mut self.ops[i],
                None => {
                    self.ops.push(OpAcc {
                        metric: op.metric.clone(),
                        ok: Counts::new(),
                        failed: None,
                        missed: None,
                        intended: None,
                        statuses: [0; STATUS_SLOTS],
                        bytes: 0,
                    });
                    self.ops.last_mut().expect("just pushed")
                }
            };
            decode_into(&mut a.ok, &op.ok, scratch)?;
            if let Some(f) = &op.failed {
                decode_into(a.failed.get_or_insert_with(Counts::new), f, scratch)?;
            }
            if let Some(m) = &op.missed {
                decode_into(a.missed.get_or_insert_with(Counts::new), m, scratch)?;
            }
            if let Some(i) = &op.intended {
                decode_into(a.intended.get_or_insert_with(Counts::new), i, scratch)?;
            } else if w.paced {
                // As `from_wire`: a paced report's metric always has intended latencies.
                a.intended.get_or_insert_with(Counts::new);
            }
            for (s, n) in a.statuses.iter_mut().zip(&op.statuses) {
                *s += n;
            }
            a.bytes += op.bytes;
        }
        Ok(())
    }

    /// Adds another chunk's sum (which came after this one).
    fn add(&mut self, o: Acc) -> anyhow::Result<()> {
        if self.paced.is_none() {
            self.paced = o.paced;
        }
        add_opt(&mut self.lag, o.lag)?;
        for op in o.ops {
            match self.ops.iter_mut().find(|a| a.metric == op.metric) {
                Some(a) => {
                    a.ok.add(&op.ok)?;
                    add_opt(&mut a.failed, op.failed)?;
                    add_opt(&mut a.missed, op.missed)?;
                    add_opt(&mut a.intended, op.intended)?;
                    for (s, n) in a.statuses.iter_mut().zip(op.statuses) {
                        *s += n;
                    }
                    a.bytes += op.bytes;
                }
                None => self.ops.push(op),
            }
        }
        Ok(())
    }

    /// The sum as a `Stats`: through the wire form (uncompressed), as `Stats::from_wire` reads.
    fn into_stats(self) -> anyhow::Result<Stats> {
        let mut ser = V2Serializer::new();
        let mut enc = |c: &Counts| -> anyhow::Result<String> {
            let mut buf = Vec::new();
            ser.serialize(&c.histogram()?, &mut buf)
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            Ok(base64::engine::general_purpose::STANDARD.encode(&buf))
        };
        let w = WireStats {
            paced: self.paced.unwrap_or(false),
            lag: self.lag.as_ref().map(&mut enc).transpose()?,
            ops: self
                .ops
                .iter()
                .map(|o| {
                    Ok(WireOp {
                        metric: o.metric.clone(),
                        ok: enc(&o.ok)?,
                        failed: o.failed.as_ref().map(&mut enc).transpose()?,
                        missed: o.missed.as_ref().map(&mut enc).transpose()?,
                        intended: o.intended.as_ref().map(&mut enc).transpose()?,
                        statuses: o.statuses.to_vec(),
                        bytes: o.bytes,
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        };
        Stats::from_wire(&w)
    }
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

    /// A paced interval with failures and send lag: every histogram the wire carries.
    fn paced(a: u64) -> IntervalPost {
        use crate::store::ErrorKind;
        let mut s = Stats::new(&[Metric::Read], true);
        for j in 0..(a % 5 + 1) {
            let v = (a + 1) * 777 + j * 1_000_003;
            s.record(Metric::Read, Status::Ok, v, v + 500, 1);
            s.record_lag(j * 10);
        }
        if a % 4 == 1 {
            let fail = Status::Error {
                kind: ErrorKind::Timeout,
                fatal: false,
            };
            s.record(Metric::Scan, fail, 9_000_000_000 + a, 9_000_000_000 + a, 0);
        }
        IntervalPost {
            stats: s.to_wire(),
            ..post(a)
        }
    }

    #[test]
    fn the_direct_decoding_equals_from_wire_for_every_histogram_kind() {
        // Paced reports first, then unpaced ones; and the other way round.
        let mut posts: Vec<IntervalPost> = (0..100).map(paced).chain((0..40).map(post)).collect();
        for _ in 0..2 {
            let refs: Vec<&IntervalPost> = posts.iter().collect();
            let reference = sequential(&refs).unwrap().to_wire();
            for threads in [1, 3] {
                let got = stats(&refs, threads).unwrap().to_wire();
                assert_eq!(got, reference, "{threads}");
            }
            posts.reverse();
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
