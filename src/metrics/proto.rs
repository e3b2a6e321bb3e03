//! The Prometheus protobuf exposition (`io.prometheus.client.MetricFamily`, length-delimited),
//! which is what carries native histograms: Prometheus asks for it in its Accept header when
//! started with `--enable-feature=native-histograms`. The few messages needed are written here
//! with `prost`'s derive, field numbers from Prometheus's metrics.proto (proto2: absent fields
//! read as their defaults, so prost's omission of zero values reads the same). Each histogram
//! carries both its classic buckets and its native ones (schema `series::NATIVE_SCHEMA`,
//! spans and deltas), so a scraper that keeps classic histograms still has them.

use super::model::{Family, Kind, Value};
use super::series::Hist;
use super::text::exposed_name;
use prost::Message;

pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The zero bucket's width: the Go client's default (2^-128). A non-zero threshold also marks
/// the histogram as native for Prometheus's parser.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Scalar {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Bucket {
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
}

#[derive(Clone, PartialEq, Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, packed = "false", tag = "13")]
    pub positive_delta: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    /// Gauge.
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Scalar>,
    /// Counter.
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Scalar>,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MetricFamily {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub help: String,
    /// COUNTER = 0, GAUGE = 1, HISTOGRAM = 4.
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}

/// Native buckets as spans (offset from the previous span's end; the first from index 0) and
/// deltas (each count minus the previous bucket's count, the first against 0).
pub fn spans_and_deltas(h: &Hist) -> (Vec<BucketSpan>, Vec<i64>) {
    let (mut spans, mut deltas) = (Vec::<BucketSpan>::new(), vec![]);
    let (mut next, mut prev) = (None::<i32>, 0i64);
    for (&i, &n) in &h.native {
        match next {
            Some(e) if e == i => spans.last_mut().expect("a span is open").length += 1,
            _ => spans.push(BucketSpan {
                offset: next.map_or(i, |e| i - e),
                length: 1,
            }),
        }
        next = Some(i + 1);
        deltas.push(n as i64 - prev);
        prev = n as i64;
    }
    (spans, deltas)
}

fn histogram(h: &Hist) -> Histogram {
    let (positive_span, positive_delta) = spans_and_deltas(h);
    Histogram {
        sample_count: h.count,
        sample_sum: h.sum,
        bucket: h
            .cumulative()
            .into_iter()
            .filter(|(le, _)| le.is_finite())
            .map(|(upper_bound, cumulative_count)| Bucket {
                cumulative_count,
                upper_bound,
            })
            .collect(),
        schema: super::series::NATIVE_SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        zero_count: 0,
        positive_span,
        positive_delta,
    }
}

/// The model as messages.
pub fn families(families: &[Family]) -> Vec<MetricFamily> {
    families
        .iter()
        .filter(|f| !f.samples.is_empty())
        .map(|f| MetricFamily {
            name: exposed_name(f),
            help: f.help.to_string(),
            r#type: match f.kind {
                Kind::Counter => 0,
                Kind::Gauge => 1,
                Kind::Histogram => 4,
            },
            metric: f
                .samples
                .iter()
                .map(|s| {
                    let mut m = Metric {
                        label: s
                            .labels
                            .iter()
                            .map(|(k, v)| LabelPair {
                                name: k.to_string(),
                                value: v.clone(),
                            })
                            .collect(),
                        ..Default::default()
                    };
                    match (&s.value, f.kind) {
                        (Value::Hist(h), _) => m.histogram = Some(histogram(h)),
                        (Value::Scalar(v), Kind::Counter) => m.counter = Some(Scalar { value: *v }),
                        (Value::Scalar(v), _) => m.gauge = Some(Scalar { value: *v }),
                    }
                    m
                })
                .collect(),
        })
        .collect()
}

/// The exposition body: each family length-delimited.
pub fn render(fams: &[Family]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    for f in families(fams) {
        f.encode_length_delimited(&mut out)
            .expect("a Vec grows as needed");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::model::Sample;
    use super::*;

    #[test]
    fn native_buckets_decode_to_the_counts_recorded() {
        let mut h = Hist::new();
        // Bucket i of schema 3 is (2^((i-1)/8), 2^(i/8)]: 1 s is in bucket 0, 1.05 s in 1,
        // 1.1 s in 2 (2^(1/8) = 1.0905), 4 s in 16, 4.2 s in 17; 0.5 s in -8.
        for (s, n) in [(1.0, 3), (1.05, 2), (1.1, 7), (4.0, 1), (4.2, 4), (0.5, 5)] {
            h.add(s, n);
        }
        let f = Family {
            name: "lat_seconds",
            help: "h",
            kind: Kind::Histogram,
            samples: vec![Sample {
                labels: vec![("op", "READ".into())],
                value: Value::Hist(&h),
            }],
        };
        let body = render(&[f]);
        let mut buf = &body[..];
        let mf = MetricFamily::decode_length_delimited(&mut buf).unwrap();
        assert!(buf.is_empty());
        assert_eq!(mf.name, "lat_seconds");
        assert_eq!(mf.r#type, 4);
        let hp = mf.metric[0].histogram.as_ref().unwrap();
        assert_eq!(hp.schema, 3);
        assert_eq!(hp.sample_count, 22);
        // Walk spans and deltas back to (index, count).
        let mut got = vec![];
        let (mut idx, mut count, mut d) = (0i32, 0i64, hp.positive_delta.iter());
        for (k, sp) in hp.positive_span.iter().enumerate() {
            idx = if k == 0 { sp.offset } else { idx + sp.offset };
            for _ in 0..sp.length {
                count += d.next().unwrap();
                got.push((idx, count));
                idx += 1;
            }
        }
        assert_eq!(got, vec![(-8, 5), (0, 3), (1, 2), (2, 7), (16, 1), (17, 4)]);
        assert_eq!(
            hp.positive_span,
            vec![
                BucketSpan {
                    offset: -8,
                    length: 1
                },
                BucketSpan {
                    offset: 7,
                    length: 3
                },
                BucketSpan {
                    offset: 13,
                    length: 2
                },
            ]
        );
        assert_eq!(mf.metric[0].label[0].value, "READ");
        // Classic buckets ride along, cumulative, without +Inf.
        let b = &hp.bucket;
        assert!(b
            .windows(2)
            .all(|w| w[0].cumulative_count <= w[1].cumulative_count));
        assert_eq!(b.last().unwrap().cumulative_count, 22);
        assert_eq!(b.last().unwrap().upper_bound, 64.0);
    }
}
