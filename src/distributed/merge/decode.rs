//! One agent's histogram (base64 of HdrHistogram's V2 form, compressed or not) added into a
//! bare counts array of kvmeter's histogram shape: the inner loop of a distributed run's merge
//! (`sum`), which at a thousand agents is the coordinator's main cost per interval (issue 33).
//! Inflation goes through libdeflate into one reused buffer; the V2 payload's zig-zag varints
//! are walked with a one-byte fast path and added index by index, never through
//! `Histogram::record_n`. Profiled (`dist_sim bench-merge --only-sum`): inflation is about half
//! of it, the varint walk a third, base64 the rest; about 16 µs for a histogram that inflates to
//! 2 KB (BENCHMARKS.md, "Distributed at scale").
//!
//! Everything decoded is bounded as `measure::hdr` bounds it: inflated size, a header that
//! must be kvmeter's own shape (else the general, bounded decoder is used), every count's
//! index within the histogram, every sum checked for overflow.

use crate::measure::{hdr, new_histogram, HIGHEST_NS, SIGFIG};
use base64::Engine;
use hdrhistogram::Histogram;

/// A histogram of kvmeter's shape as its bare counts array: what each report's counts are added
/// into, index by index (hdrhistogram's `record_n` finds each value's index again and keeps
/// min, max and total per call). Made a `Histogram` once per interval (`histogram`).
#[derive(Clone)]
pub(super) struct Counts(Vec<u64>);

impl Counts {
    pub(super) fn new() -> Counts {
        static LEN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        Counts(vec![
            0;
            *LEN.get_or_init(|| new_histogram().distinct_values())
        ])
    }

    #[inline]
    fn add_at(&mut self, index: usize, n: u64) -> anyhow::Result<()> {
        let Some(c) = self.0.get_mut(index) else {
            anyhow::bail!("histogram does not decode: a count past the histogram's range");
        };
        *c = c
            .checked_add(n)
            .ok_or_else(|| anyhow::anyhow!("histogram counts overflow"))?;
        Ok(())
    }

    pub(super) fn add(&mut self, o: &Counts) -> anyhow::Result<()> {
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

    pub(super) fn histogram(&self) -> anyhow::Result<Histogram<u64>> {
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

/// Buffers and the inflater reused across one chunk's histograms. Inflation is about half of
/// a merge, so it goes through libdeflate (whole-buffer, no streaming state): 1,000 paced
/// reports' 5,000 histograms inflate in 51 ms against 67-78 ms with flate2 over zlib-rs and
/// more over miniz_oxide (BENCHMARKS.md, "Distributed at scale"). Anything it refuses is left
/// to the general decoder (`measure::hdr`, flate2), which says why.
pub(super) struct Scratch {
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
pub(super) fn decode_into(into: &mut Counts, text: &str, sc: &mut Scratch) -> anyhow::Result<()> {
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
        if zz > 1 {
            into.add_at(index, zz >> 1)?;
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
    use crate::measure::new_histogram;
    use hdrhistogram::serialization::Serializer;

    #[test]
    fn value_at_and_index_of_are_hdrhistograms_own_mapping() {
        // Each index's value lands in that index.
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
        // The same scratch decodes the whole one exactly after them, twice.
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
}
