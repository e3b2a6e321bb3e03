//! `kvmeter trace stats`'s views of a read trace (issue 32): the short table printed on the
//! terminal, stats.json, rate.csv and the figures (rate over time, op mix) under a new `--out`
//! directory. `trace::stats` reads the trace; nothing here reads it again or recomputes a
//! figure beyond the rates of its per-second buckets.

use super::chart::{BarChart, LineChart, Series};
use crate::error::UsageError;
use crate::trace::stats::{self, Sizes, TraceStats, ZipfFit};
use crate::trace::Format;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// The percentiles reported for sizes.
const QS: [(&str, f64); 6] = [
    ("min", 0.0),
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p999", 0.999),
    ("max", 1.0),
];

fn sizes_json(s: &Sizes) -> serde_json::Value {
    let qs: Vec<f64> = QS.iter().map(|q| q.1).collect();
    let mut m = serde_json::Map::new();
    m.insert("n".into(), json!(s.n));
    let mean = if s.n == 0 {
        0.0
    } else {
        s.sum as f64 / s.n as f64
    };
    m.insert("mean".into(), json!(mean));
    if s.n > 0 {
        for ((name, _), v) in QS.iter().zip(s.percentiles(&qs)) {
            m.insert((*name).into(), json!(v));
        }
    }
    // 1: exact; larger: sizes were rounded down to a multiple of it (too many distinct sizes).
    m.insert("rounded_to".into(), json!(1u64 << s.shift));
    serde_json::Value::Object(m)
}

fn peak_rate(st: &TraceStats) -> f64 {
    st.buckets.iter().copied().max().unwrap_or(0) as f64 / st.bucket_s.max(1) as f64
}

/// Records over the whole seconds the trace spans (its first record's second to its last's,
/// both counted: a whole-second trace's last second is a full second of records).
fn mean_rate(st: &TraceStats) -> Option<f64> {
    let span = st.buckets.len() as u64 * st.bucket_s.max(1);
    (span > 0).then(|| st.records as f64 / span as f64)
}

pub fn document(
    path: &Path,
    format: Format,
    bytes: u64,
    st: &TraceStats,
    zipf: Option<&ZipfFit>,
) -> serde_json::Value {
    json!({
        "trace": path.display().to_string(),
        "format": format.name(),
        "bytes": bytes,
        "records": st.records,
        "bad_lines": st.bad_lines,
        "first_bad_line": st.first_bad,
        "first_time_us": st.min_us,
        "last_time_us": st.max_us,
        "duration_s": st.duration_s(),
        "whole_second_times": st.whole_second,
        "out_of_order_records": st.out_of_order,
        "rate": {
            "mean_per_s": mean_rate(st),
            "peak_per_s": peak_rate(st),
            "bucket_s": st.bucket_s.max(1),
            "per_bucket": "rate.csv",
        },
        "ops": st.ops,
        "kinds": st.kinds.iter().map(|(k, v)| (kind_name(*k), json!(v))).collect::<serde_json::Map<_, _>>(),
        "keys": {
            "distinct": st.distinct_keys,
            "distinct_is_lower_bound": st.keys_at_least,
            "zipf_fit": zipf.map(|z| json!({
                "alpha": z.alpha,
                "r2": z.r2,
                "ranks": z.ranks,
                "method": format!("least squares on ln(count) against ln(rank), the top {} keys with at least {} requests", z.ranks, stats::FIT_MIN_COUNT),
            })),
        },
        "key_size": sizes_json(&st.key_sizes),
        "value_size_of_writes": sizes_json(&st.value_sizes),
    })
}

fn kind_name(k: crate::trace::Kind) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub fn table(path: &Path, format: Format, st: &TraceStats, zipf: Option<&ZipfFit>) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "trace     {} ({})", path.display(), format.name());
    let _ = writeln!(t, "records   {}", st.records);
    if st.bad_lines > 0 {
        let _ = writeln!(
            t,
            "skipped   {} bad lines (first: {})",
            st.bad_lines,
            st.first_bad.as_deref().unwrap_or("")
        );
    }
    let _ = write!(t, "duration  {:.3} s", st.duration_s());
    match mean_rate(st) {
        Some(r) => {
            let _ = writeln!(t, ", mean {r:.1}/s, peak {:.1}/s", peak_rate(st));
        }
        None => t.push('\n'),
    }
    let mix = |m: Vec<(String, u64)>| {
        m.iter()
            .map(|(k, v)| {
                format!(
                    "{k} {v} ({:.1} %)",
                    100.0 * *v as f64 / st.records.max(1) as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        t,
        "ops       {}",
        mix(st.ops.iter().map(|(k, v)| (k.clone(), *v)).collect())
    );
    let _ = writeln!(
        t,
        "kinds     {}",
        mix(st.kinds.iter().map(|(k, v)| (kind_name(*k), *v)).collect())
    );
    let at_least = if st.keys_at_least { "at least " } else { "" };
    let _ = write!(t, "keys      {at_least}{} distinct", st.distinct_keys);
    match zipf {
        Some(z) => {
            let _ = writeln!(
                t,
                "; Zipf fit α = {:.3} (R² {:.3}, top {} keys)",
                z.alpha, z.r2, z.ranks
            );
        }
        None => t.push_str("; too few repeated keys for a Zipf fit\n"),
    }
    for (name, s) in [("key size", &st.key_sizes), ("value size", &st.value_sizes)] {
        if s.n == 0 {
            continue;
        }
        let qs: Vec<f64> = QS.iter().map(|q| q.1).collect();
        let p = s.percentiles(&qs);
        let cells: Vec<String> = QS
            .iter()
            .zip(&p)
            .map(|((n, _), v)| format!("{n} {v}"))
            .collect();
        let _ = writeln!(t, "{name:<11}{} B", cells.join(", "));
    }
    t
}

/// Writes stats.json, rate.csv and figures/ into `out`, which must not exist yet.
pub fn write_out(out: &Path, doc: &serde_json::Value, st: &TraceStats) -> anyhow::Result<()> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::create_dir(out)
        .map_err(|e| UsageError::new(format!("--out {}: cannot create it: {e}", out.display())))?;
    std::fs::create_dir(out.join("figures"))?;
    std::fs::write(
        out.join("stats.json"),
        serde_json::to_string_pretty(doc)? + "\n",
    )?;
    let w = st.bucket_s.max(1);
    let mut csv = String::from("start_s,width_s,records,rate_per_s\n");
    let mut points = Vec::with_capacity(st.buckets.len());
    for (i, &n) in st.buckets.iter().enumerate() {
        let start = i as u64 * w;
        let rate = n as f64 / w as f64;
        let _ = writeln!(csv, "{start},{w},{n},{rate}");
        points.push((start as f64, rate));
    }
    std::fs::write(out.join("rate.csv"), csv)?;
    let mut rate = LineChart::new(
        "rate",
        "Trace rate over time",
        "time from the first record (s)",
        "records / s",
    );
    rate.series.push(Series::new("records/s", points));
    std::fs::write(out.join("figures/rate.svg"), rate.svg())?;
    let ops = BarChart {
        id: "ops".into(),
        title: "Op mix (the trace's names)".into(),
        y_label: "records".into(),
        bars: st
            .ops
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64, format!("{k}: {v}")))
            .collect(),
        sorted: true,
    };
    std::fs::write(out.join("figures/ops.svg"), ops.svg())?;
    Ok(())
}
