//! An interval's `Stats` as JSON for a distributed run (docs/distributed.md): every
//! histogram whole, compressed as the HdrHistogram log format does (V2 + deflate, base64), the
//! status counts and bytes exactly. Agents post this per interval; the coordinator and
//! `kvmeter dist merge` decode it and add histograms — merging never averages percentiles.

use super::{new_histogram, Metric, OpStats, Stats, STATUS_SLOTS};
use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WireStats {
    pub paced: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<String>,
    pub ops: Vec<WireOp>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WireOp {
    /// YCSB's metric name (READ, UPDATE, ...).
    pub metric: String,
    pub ok: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// Misses alone (also in `failed`); absent from an older agent's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended: Option<String>,
    /// Counts by status slot: ok, not found, then each error kind.
    pub statuses: Vec<u64>,
    pub bytes: u64,
}

fn encode(h: &Histogram<u64>, ser: &mut V2DeflateSerializer, buf: &mut Vec<u8>) -> String {
    buf.clear();
    ser.serialize(h, buf).expect("a histogram serializes");
    base64::engine::general_purpose::STANDARD.encode(&buf)
}

fn decode(text: &str) -> anyhow::Result<Histogram<u64>> {
    // Bounded: a header's payload length cannot make this allocate more than the text holds.
    let h = super::hdr::decode_base64(text)
        .map_err(|e| anyhow::anyhow!("histogram does not decode: {e}"))?;
    // Into kvmeter's own bounds, so every sum has the same shape.
    let mut out = new_histogram();
    out.add(&h)
        .map_err(|e| anyhow::anyhow!("histogram out of range: {e:?}"))?;
    Ok(out)
}

impl Stats {
    /// The interval as JSON-ready values (only metrics with operations).
    pub fn to_wire(&self) -> WireStats {
        let mut ser = V2DeflateSerializer::new();
        let mut buf = Vec::new();
        let nonempty = |h: &&Histogram<u64>| !h.is_empty();
        WireStats {
            paced: self.paced,
            lag: self
                .lag
                .as_deref()
                .filter(nonempty)
                .map(|h| encode(h, &mut ser, &mut buf)),
            // The phase's metrics even when nothing completed: the merged run directory
            // keeps a stalled interval's rows of zeros too.
            ops: self
                .row_metrics()
                .map(|(m, o)| WireOp {
                    metric: m.name().to_string(),
                    ok: encode(&o.ok, &mut ser, &mut buf),
                    failed: o
                        .failed
                        .as_ref()
                        .filter(nonempty)
                        .map(|h| encode(h, &mut ser, &mut buf)),
                    missed: o
                        .missed
                        .as_ref()
                        .filter(nonempty)
                        .map(|h| encode(h, &mut ser, &mut buf)),
                    intended: o
                        .intended
                        .as_ref()
                        .filter(nonempty)
                        .map(|h| encode(h, &mut ser, &mut buf)),
                    statuses: o.statuses.to_vec(),
                    bytes: o.bytes,
                })
                .collect(),
        }
    }

    /// Back from the wire; an unknown metric or a bad histogram is an error naming it.
    pub fn from_wire(w: &WireStats) -> anyhow::Result<Stats> {
        let mut s = Stats::new(&[], w.paced);
        if let Some(l) = &w.lag {
            s.lag = Some(Box::new(decode(l)?));
        }
        for op in &w.ops {
            let m = Metric::ALL
                .into_iter()
                .find(|m| m.name() == op.metric)
                .ok_or_else(|| anyhow::anyhow!("unknown metric '{}'", op.metric))?;
            if op.statuses.len() != STATUS_SLOTS {
                anyhow::bail!(
                    "metric {}: {} status counts, expected {STATUS_SLOTS}",
                    op.metric,
                    op.statuses.len()
                );
            }
            let mut statuses = [0u64; STATUS_SLOTS];
            statuses.copy_from_slice(&op.statuses);
            s.ops[m as usize] = Some(Box::new(OpStats {
                ok: decode(&op.ok)?,
                failed: op.failed.as_deref().map(decode).transpose()?,
                missed: op.missed.as_deref().map(decode).transpose()?,
                intended: match &op.intended {
                    Some(i) => Some(decode(i)?),
                    None if w.paced => Some(new_histogram()),
                    None => None,
                },
                statuses,
                bytes: op.bytes,
            }));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ErrorKind, Status};

    #[test]
    fn an_interval_survives_the_wire_exactly() {
        let mut s = Stats::new(&[Metric::Read, Metric::Update], true);
        for v in [1_000u64, 2_000, 3_500, 1_000_000, 7] {
            s.record(Metric::Read, Status::Ok, v, v * 2, 100);
        }
        s.record(
            Metric::Update,
            Status::Error {
                kind: ErrorKind::Timeout,
                fatal: false,
            },
            50_000,
            60_000,
            0,
        );
        s.record_lag(123);
        let text = serde_json::to_string(&s.to_wire()).unwrap();
        let back = Stats::from_wire(&serde_json::from_str(&text).unwrap()).unwrap();
        let (a, b) = (
            s.get(Metric::Read).unwrap(),
            back.get(Metric::Read).unwrap(),
        );
        assert_eq!(a.statuses, b.statuses);
        assert_eq!(a.bytes, 500);
        assert_eq!(b.bytes, 500);
        assert_eq!(a.ok, b.ok);
        assert_eq!(a.intended, b.intended);
        let u = back.get(Metric::Update).unwrap();
        assert_eq!(u.errors(), 1);
        assert_eq!(u.failed.as_ref().unwrap().len(), 1);
        assert_eq!(back.lag.as_ref().unwrap().len(), 1);
        assert_eq!(back.total_ops(), 6);
    }
}
