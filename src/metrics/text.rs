//! The Prometheus text exposition format (version 0.0.4), written by hand: the model
//! (`model`) is a snapshot rebuilt once per interval, which `prometheus-client`'s registry of
//! live metric objects does not fit without copying every figure into it, and the format is
//! three rules: `# HELP`/`# TYPE` lines, `name{label="value"} number`, and label values
//! escaped (`\\`, `\"`, `\n`; HELP text escapes `\\` and `\n`). Histograms are classic:
//! cumulative `_bucket{le}` series ending at `+Inf`, `_sum` and `_count`.

use super::model::{Family, Kind, Value};
use std::fmt::Write;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A label value as the text format quotes it.
pub fn escape_label(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A number as Go's ParseFloat reads it.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// The family's name as exposed: counters end in `_total`.
pub fn exposed_name(f: &Family) -> String {
    match f.kind {
        Kind::Counter => format!("{}_total", f.name),
        _ => f.name.to_string(),
    }
}

fn labels(out: &mut String, ls: &[(&'static str, String)], le: Option<f64>) {
    out.push('{');
    let mut first = true;
    for (k, v) in ls {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_label(v, out);
        out.push('"');
    }
    if let Some(le) = le {
        if !first {
            out.push(',');
        }
        let _ = write!(out, "le=\"{}\"", number(le));
    }
    out.push('}');
}

/// The whole exposition. Families without samples are left out.
pub fn render(families: &[Family]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let name = exposed_name(f);
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = write!(out, "# HELP {name} ");
        escape_help(f.help, &mut out);
        let _ = writeln!(out, "\n# TYPE {name} {kind}");
        for s in &f.samples {
            match &s.value {
                Value::Scalar(v) => {
                    out.push_str(&name);
                    labels(&mut out, &s.labels, None);
                    let _ = writeln!(out, " {}", number(*v));
                }
                Value::Hist(h) => {
                    for (le, n) in h.cumulative() {
                        let _ = write!(out, "{name}_bucket");
                        labels(&mut out, &s.labels, Some(le));
                        let _ = writeln!(out, " {n}");
                    }
                    let _ = write!(out, "{name}_sum");
                    labels(&mut out, &s.labels, None);
                    let _ = writeln!(out, " {}", number(h.sum));
                    let _ = write!(out, "{name}_count");
                    labels(&mut out, &s.labels, None);
                    let _ = writeln!(out, " {}", h.count);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::model::Sample;
    use super::super::series::Hist;
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped() {
        let f = Family {
            name: "x",
            help: "a \\ b\nc \"q\"",
            kind: Kind::Counter,
            samples: vec![Sample {
                labels: vec![("run", "a\"b\\c\nd".into())],
                value: Value::Scalar(3.0),
            }],
        };
        let t = render(&[f]);
        assert_eq!(
            t,
            "# HELP x_total a \\\\ b\\nc \"q\"\n# TYPE x_total counter\n\
             x_total{run=\"a\\\"b\\\\c\\nd\"} 3\n"
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_inf() {
        let mut h = Hist::new();
        h.add(0.001, 5); // 1 ms: bucket le=2^-9.75 (1.16 ms) is the first that holds it
        h.add(0.002, 3); // 2 ms: le=2^-9 (1.95 ms) is below it, 2^-8.75 (2.32 ms) holds it
        h.add(1000.0, 1);
        let f = Family {
            name: "lat_seconds",
            help: "h",
            kind: Kind::Histogram,
            samples: vec![Sample {
                labels: vec![("op", "READ".into())],
                value: Value::Hist(&h),
            }],
        };
        let t = render(&[f]);
        let mut last = 0u64;
        let mut buckets = vec![];
        for line in t.lines().filter(|l| l.starts_with("lat_seconds_bucket")) {
            let (head, n) = line.rsplit_once(' ').unwrap();
            let n: u64 = n.parse().unwrap();
            assert!(n >= last, "{line}");
            last = n;
            let le = head.split("le=\"").nth(1).unwrap().trim_end_matches("\"}");
            buckets.push((le.to_string(), n));
        }
        let at = |le: f64| {
            buckets
                .iter()
                .find(|(l, _)| l.parse::<f64>().unwrap() == le)
                .unwrap()
                .1
        };
        assert_eq!(at((-10.0f64).exp2()), 0); // 0.98 ms
        assert_eq!(at((-9.75f64).exp2()), 5);
        assert_eq!(at((-9.0f64).exp2()), 5);
        assert_eq!(at((-8.75f64).exp2()), 8);
        assert_eq!(at(64.0), 8);
        assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 9));
        assert!(t.contains("lat_seconds_count{op=\"READ\"} 9\n"));
        assert!(t.contains(&format!(
            "lat_seconds_sum{{op=\"READ\"}} {}\n",
            0.001 * 5.0 + 0.002 * 3.0 + 1000.0
        )));
    }
}
