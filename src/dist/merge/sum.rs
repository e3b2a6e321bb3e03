//! The sum of one interval's reports from every agent. At a thousand agents this is the
//! coordinator's main cost per interval (issue 33). Decoding each report into a `Stats`
//! (`Stats::from_wire`) allocates and zero-fills two full histograms of kvmeter's bounds per
//! metric (about 33,000 counts, 260 KB each) and adds them count by count: about 130 µs a
//! histogram, 270 ms for 1,000 reports of two metrics on this machine. Here each report's
//! compressed histograms are instead inflated (libdeflate, buffers reused) and their counts added
//! straight into one bare counts array per metric (`decode_into`, `Counts`): the work follows
//! the bytes sent, not the histogram's range. What is left is inflation (about half, with its
//! Huffman tables), the varint walk (a third) and base64: about 16 µs for a histogram that
//! inflates to 2 KB (BENCHMARKS.md, "Distributed at scale"). Large intervals are also split into
//! contiguous chunks summed on scoped threads, and the chunks' sums added in order.
//!
//! Exactness is kept by construction: the wire form carries every count of every bucket, and
//! histogram counts are integers whose addition is associative and commutative, so any
//! decoding path and any grouping give the same counts, min, max and total — the merged HDR
//! logs equal the union of the agents' (tests below check this against histograms built value
//! by value and against the `from_wire` path). The sum is handed over as a `Stats` through the
//! wire form once per interval (`Acc::into_stats`, uncompressed V2), the one public way to
//! build a `Stats` from histograms: a few ms, against a thousand reports' decoding.
//!
//! Everything decoded is bounded as `measure::hdr` bounds it: inflated size, a header that
//! must be kvmeter's own shape (else the general, bounded decoder is used), every count's
//! index within the histogram.

use crate::dist::IntervalPost;
use crate::measure::wire::{WireOp, WireStats};
use crate::measure::{hdr, new_histogram, Metric, Stats, HIGHEST_NS, SIGFIG, STATUS_SLOTS};
use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2Serializer};
use hdrhistogram::Histogram;

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

/// A histogram of kvmeter's shape as its bare counts array: what each report's counts are added
/// into, index by index (hdrhistogram's `record_n` finds each value's index again and keeps
/// min, max and total per call). Made a `Histogram` once per interval (`histogram`).
#[derive(Clone)]
struct Counts(Vec<u64>);

impl Counts {
    fn new() -> Counts {
        static LEN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        Counts(vec![
            0;
            *LEN.get_or_init(|| new_histogram().distinct_values())
        ])
    }

    fn add_at(&mut self, index: usize, n: u64) -> anyhow::Result<()> {
        let Some(c) = self.0.get_mut(index) else {
            anyhow::bail!("histogram does not decode: a count past the histogram's range");
        };
        *c = c
            .checked_add(n)
            .ok_or_else(|| anyhow::anyhow!("histogram counts overflow"))?;
        Ok(())
    }

    fn add(&mut self, o: &Counts) -> anyhow::Result<()> {
        for (i, &n) in o.0.iter().enumerate() {
            if n > 0 {
                self.add_at(i, n)?;
            }
        }
        Ok(())
    }

    /// Every count of `h` (any bounds; the general decoder's path), as `Histogram::add` would
    /// put it into a histogram of kvmeter's shape.
    fn add_histogram(&mut self, h: &Histogram<u64>) -> anyhow::Result<()> {
        let mut ours = new_histogram();
        ours.add(h)
            .map_err(|e| anyhow::anyhow!("histogram out of range: {e:?}"))?;
        for v in ours.iter_recorded() {
            let value = ours.lowest_equivalent(v.value_iterated_to());
            self.add_at(index_of(value), v.count_at_value())?;
        }
        Ok(())
    }

    fn histogram(&self) -> anyhow::Result<Histogram<u64>> {
        let mut h = new_histogram();
        for (i, &n) in self.0.iter().enumerate() {
            if n > 0 {
                h.record_n(value_at(i), n)
                    .map_err(|e| anyhow::anyhow!("histogram out of range: {e:?}"))?;
            }
        }
        Ok(h)
    }
}

/// One metric's sum.
struct OpAcc {
    metric: String,
    ok: Counts,
    failed: Option<Counts>,
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

/// Buffers and the inflater reused across one chunk's histograms. Inflation is about 60 % of
/// a merge, so it goes through libdeflate (whole-buffer, no streaming state): 1,000 paced
/// reports' 5,000 histograms inflate in 51 ms against 67-78 ms with flate2 over zlib-rs and
/// more over miniz_oxide (BENCHMARKS.md, "Distributed at scale"). Anything it refuses is left
/// to the general decoder (`measure::hdr`, flate2), which says why.
struct Scratch {
    raw: Vec<u8>,
    /// Inflation's output space, kept zero-filled at its full length between histograms.
    out: Vec<u8>,
    inflater: libdeflater::Decompressor,
}

/// The output space first given to libdeflate (a kvmeter histogram of a busy interval inflates
/// to a few KB); doubled while too small, up to `hdr::MAX_INFLATED`.
const FIRST_OUT: usize = 64 << 10;

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            raw: Vec::new(),
            out: Vec::new(),
            inflater: libdeflater::Decompressor::new(),
        }
    }
}

/// Inflates the zlib stream `body` into `out`, growing it up to `hdr::MAX_INFLATED` bytes;
/// the inflated length, or `None` when it does not inflate whole within that bound.
fn inflate(
    inflater: &mut libdeflater::Decompressor,
    out: &mut Vec<u8>,
    body: &[u8],
) -> Option<usize> {
    if out.is_empty() {
        out.resize(FIRST_OUT.min(hdr::MAX_INFLATED), 0);
    }
    loop {
        match inflater.zlib_decompress(body, out) {
            Ok(n) => return Some(n),
            Err(libdeflater::DecompressionError::InsufficientSpace)
                if out.len() < hdr::MAX_INFLATED =>
            {
                out.resize((2 * out.len()).min(hdr::MAX_INFLATED), 0);
            }
            Err(_) => return None,
        }
    }
}

const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_HEADER: usize = 40;
/// kvmeter's histograms (1 ns to HIGHEST_NS, SIGFIG digits): 2^10 sub-buckets in each half.
const HALF_MAGNITUDE: u32 = 10;

/// Adds the histogram in `text` (base64 of V2, compressed or not) to `into`, which has
/// kvmeter's bounds: counts go straight into it when the header is kvmeter's own shape;
/// anything else goes through the general bounded decoder (`measure::hdr`).
fn decode_into(into: &mut Counts, text: &str, sc: &mut Scratch) -> anyhow::Result<()> {
    let general = |into: &mut Counts| -> anyhow::Result<()> {
        let h = hdr::decode_base64(text)
            .map_err(|e| anyhow::anyhow!("histogram does not decode: {e}"))?;
        into.add_histogram(&h)
    };
    sc.raw.clear();
    if base64::engine::general_purpose::STANDARD
        .decode_vec(text.trim(), &mut sc.raw)
        .is_err()
    {
        return general(into);
    }
    let v2: &[u8] = match be32(&sc.raw, 0) {
        Some(V2_COMPRESSED_COOKIE) => {
            let len = be32(&sc.raw, 4).unwrap_or(u32::MAX) as usize;
            let Some(body) = sc.raw.get(8..8 + len) else {
                return general(into);
            };
            let Some(n) = inflate(&mut sc.inflater, &mut sc.out, body) else {
                return general(into);
            };
            &sc.out[..n]
        }
        Some(V2_COOKIE) => &sc.raw,
        _ => return general(into),
    };
    let ours = be32(v2, 0) == Some(V2_COOKIE)
        && be32(v2, 8) == Some(0)
        && be32(v2, 12) == Some(u32::from(SIGFIG))
        && be64(v2, 16) == Some(1)
        && be64(v2, 24) == Some(HIGHEST_NS)
        && be64(v2, 32) == Some(1f64.to_bits());
    let payload = be32(v2, 4)
        .map(|n| n as usize)
        .and_then(|n| v2.get(V2_HEADER..V2_HEADER.checked_add(n)?));
    match (ours, payload) {
        (true, Some(p)) => add_counts(into, p),
        _ => general(into),
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The lowest value of counts index `i` of a histogram of kvmeter's shape (hdrhistogram's
/// `value_for`, with a unit magnitude of 0).
fn value_at(i: usize) -> u64 {
    let half = 1usize << HALF_MAGNITUDE;
    let bucket = (i >> HALF_MAGNITUDE) as i64 - 1;
    let sub = (i & (half - 1)) + half;
    if bucket < 0 {
        (sub - half) as u64
    } else {
        (sub as u64) << bucket
    }
}

/// The counts index of value `v` in a histogram of kvmeter's shape (hdrhistogram's
/// `index_for`: 64 − unit magnitude 0 − half magnitude − 1 leading zeros make bucket 0).
fn index_of(v: u64) -> usize {
    let half = 1usize << HALF_MAGNITUDE;
    let bucket = (64 - HALF_MAGNITUDE - 1 - (v | (2 * half as u64 - 1)).leading_zeros()) as usize;
    let sub = (v >> bucket) as usize;
    ((bucket + 1) << HALF_MAGNITUDE) + sub - half
}

/// Adds a V2 payload's counts (zig-zag LEB128: a count, or a negative run of empty buckets)
/// into `into`, every index checked against the histogram's length.
fn add_counts(into: &mut Counts, payload: &[u8]) -> anyhow::Result<()> {
    let counts = &mut into.0[..];
    let (mut at, mut index) = (0usize, 0usize);
    while let Some(&first) = payload.get(at) {
        // Most counts of an interval are below 64: one byte, no loop.
        let zz = if first < 0x80 {
            at += 1;
            u64::from(first)
        } else {
            let (zz, n) = varint(&payload[at..])?;
            at += n;
            zz
        };
        // Zig-zag: odd is -(zz/2 + 1), a run of that many empty buckets.
        if zz & 1 == 1 {
            index = index.saturating_add((zz >> 1) as usize + 1);
            continue;
        }
        let n = zz >> 1;
        if n > 0 {
            let Some(c) = counts.get_mut(index) else {
                anyhow::bail!("histogram does not decode: a count past the histogram's range");
            };
            *c = c
                .checked_add(n)
                .ok_or_else(|| anyhow::anyhow!("histogram counts overflow"))?;
        }
        index = index.saturating_add(1);
    }
    Ok(())
}

/// One LEB128 number as hdrhistogram writes it (at most 9 bytes, the 9th whole) and its length.
fn varint(b: &[u8]) -> anyhow::Result<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().take(9).enumerate() {
        if i == 8 {
            return Ok((v | (u64::from(*byte) << 56), 9));
        }
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    anyhow::bail!("histogram does not decode: a count cut short")
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
        // value_at is hdrhistogram's own mapping: each index's value lands in that index.
        let mut h = new_histogram();
        for i in [
            0usize,
            1,
            1023,
            1024,
            2047,
            2048,
            3000,
            20_000,
            h.distinct_values() - 1,
        ] {
            h.reset();
            h.record(value_at(i)).unwrap();
            assert_eq!(
                h.iter_recorded().next().unwrap().value_iterated_to(),
                h.highest_equivalent(value_at(i)),
                "{i}"
            );
            assert_eq!(h.lowest_equivalent(value_at(i)), value_at(i), "{i}");
            assert_eq!(index_of(value_at(i)), i, "{i}");
        }
        // index_of is hdrhistogram's own mapping too: every value of a bucket finds its index.
        for v in
            (0..64).flat_map(|b| [1u64 << b, (1u64 << b) + 1, (3u64 << b) / 2, (1u64 << b) - 1])
        {
            let v = v.min(HIGHEST_NS);
            assert_eq!(value_at(index_of(v)), h.lowest_equivalent(v), "{v}");
        }
    }

    #[test]
    fn a_count_past_the_range_is_refused() {
        // V2 header of kvmeter's shape, then a run of 40,000 empty buckets and a count of 1.
        let mut v2 = V2_COOKIE.to_be_bytes().to_vec();
        let payload = [0xff, 0x70 | 0x80, 0x04, 0x02]; // zig-zag(-40_000) = 79_999, then 1
        v2.extend((payload.len() as u32).to_be_bytes());
        v2.extend(0u32.to_be_bytes());
        v2.extend(u32::from(SIGFIG).to_be_bytes());
        v2.extend(1u64.to_be_bytes());
        v2.extend(HIGHEST_NS.to_be_bytes());
        v2.extend(1f64.to_bits().to_be_bytes());
        v2.extend(payload);
        let text = base64::engine::general_purpose::STANDARD.encode(&v2);
        let e = decode_into(&mut Counts::new(), &text, &mut Scratch::default()).unwrap_err();
        assert!(e.to_string().contains("past the histogram's range"), "{e}");
    }

    #[test]
    fn a_cut_or_oversized_compressed_histogram_is_refused_and_the_inflater_goes_on() {
        use hdrhistogram::serialization::V2DeflateSerializer;
        use std::io::Write;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let compressed = |body: &[u8]| {
            let mut v = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
            v.extend((body.len() as u32).to_be_bytes());
            v.extend(body);
            b64(&v)
        };
        let mut good = new_histogram();
        for v in [1_000u64, 20_000, 20_001, 3_000_000] {
            good.record(v).unwrap();
        }
        let mut whole = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&good, &mut whole)
            .unwrap();
        let body = &whole[8..];
        // A zlib stream cut in half, its length field saying so.
        let cut = compressed(&body[..body.len() / 2]);
        // 16 MiB + 1 zero bytes: past the inflation bound.
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![0u8; hdr::MAX_INFLATED + 1]).unwrap();
        let bomb = compressed(&z.finish().unwrap());
        let mut sc = Scratch::default();
        let mut into = Counts::new();
        for bad in [&cut, &bomb] {
            let e = decode_into(&mut into, bad, &mut sc).unwrap_err();
            assert!(e.to_string().contains("does not decode"), "{e}");
            assert_eq!(into.histogram().unwrap().len(), 0);
        }
        // The same scratch (its inflater reset) decodes the whole one exactly, twice.
        for round in 1..=2u64 {
            decode_into(&mut into, &b64(&whole), &mut sc).unwrap();
            let h = into.histogram().unwrap();
            assert_eq!(h.len(), 4 * round);
            for v in [1_000u64, 20_000, 3_000_000] {
                assert_eq!(h.count_at(v), round * good.count_at(v), "{v}");
            }
        }
    }

    #[test]
    fn a_histogram_that_inflates_past_the_first_output_space_decodes_whole() {
        use hdrhistogram::serialization::V2DeflateSerializer;
        // 20,000 buckets of 2^40 each: six-byte varints, about 120 KB inflated (> FIRST_OUT).
        let mut h = new_histogram();
        for i in 0..20_000 {
            h.record_n(value_at(i), 1 << 40).unwrap();
        }
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .unwrap();
        let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let mut sc = Scratch::default();
        let mut into = Counts::new();
        decode_into(&mut into, &text, &mut sc).unwrap();
        assert!(sc.out.len() > FIRST_OUT, "{}", sc.out.len());
        assert_eq!(into.histogram().unwrap(), h);
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
