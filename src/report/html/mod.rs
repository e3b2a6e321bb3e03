//! `report.html`: one self-contained file per run or experiment directory, with the papers'
//! figures, that opens offline — no script, no font, no image or style from anywhere else, and
//! a Content-Security-Policy that would block any such load. Each figure is inline SVG and is
//! also saved under `figures/` for a paper. Long series are downsampled (LTTB) to keep the file
//! small; the full data stays in the run directory.
//!
//! Written at the end of every run and experiment, and by `kvmeter report DIR` for any
//! existing directory, including ones cut short by a crash (the page then says so).

mod capacity;
mod durability;
mod experiment;
mod faults;
mod pressure;
mod profile;
mod run;
mod sweep;
mod telemetry;

pub use capacity::capacity_curve;
pub(crate) use run::spectrum_points;
pub use sweep::sweep_points;

use super::chart::escape;
use crate::error::UsageError;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Points per drawn series at most; the raw series stays in the run directory.
pub const MAX_POINTS: usize = 600;

/// The page's policy: nothing may load from anywhere, styles are inline, no script runs.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em auto;max-width:1100px;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}\
h3{font-size:1em}table{border-collapse:collapse;margin:.5em 0;font-size:.9em}\
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}th{background:#f4f4f4}\
td.l,th.l{text-align:left}.warn{background:#fff4d6;border:1px solid #e0b000;padding:.4em .8em}\
.partial{background:#fde2e2;border:1px solid #c00;padding:.4em .8em}.estimate{color:#a05a00}\
figure{margin:.8em 0;page-break-inside:avoid}svg.chart{max-width:100%;height:auto}\
.na{color:#777}@media print{body{max-width:none}}";

/// A page being built: its sections and its figures.
pub struct Page {
    title: String,
    body: String,
    figures: Vec<(String, String)>,
}

impl Page {
    pub(crate) fn new(title: &str) -> Self {
        Page {
            title: title.to_string(),
            body: String::new(),
            figures: vec![],
        }
    }

    pub(crate) fn h2(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(text));
    }

    pub(crate) fn note(&mut self, class: &str, text: &str) {
        let _ = writeln!(self.body, "<p class=\"{class}\">{}</p>", escape(text));
    }

    /// Adds a figure inline and to figures/<id>.svg.
    pub(crate) fn figure(&mut self, id: &str, svg: String, caption: &str) {
        let _ = writeln!(
            self.body,
            "<figure id=\"fig-{}\">{svg}<figcaption>{}</figcaption></figure>",
            escape(id),
            escape(caption)
        );
        self.figures.push((id.to_string(), svg));
    }

    /// An SVG file of the run directory: inline as a `data:` image when `bytes` are given, and
    /// a link to the file either way.
    pub(crate) fn image(&mut self, id: &str, bytes: Option<&[u8]>, href: &str, caption: &str) {
        use base64::Engine as _;
        let img = bytes
            .map(|b| {
                format!(
                    "<img alt=\"{}\" style=\"max-width:100%\" src=\"data:image/svg+xml;base64,{}\">",
                    escape(caption),
                    base64::engine::general_purpose::STANDARD.encode(b)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            self.body,
            "<figure id=\"fig-{}\">{img}<figcaption><a href=\"{}\">{}</a></figcaption></figure>",
            escape(id),
            escape(href),
            escape(caption)
        );
    }

    /// A table: header cells, then rows of (text, raw value for `data-value`).
    pub(crate) fn table(&mut self, id: &str, head: &[&str], rows: &[Vec<Cell>]) {
        let _ = write!(self.body, "<table data-table=\"{}\">", escape(id));
        if head.iter().any(|h| !h.is_empty()) {
            self.body.push_str("<tr>");
            for (i, h) in head.iter().enumerate() {
                let class = if i == 0 { " class=\"l\"" } else { "" };
                let _ = write!(self.body, "<th{class}>{}</th>", escape(h));
            }
            self.body.push_str("</tr>\n");
        }
        for r in rows {
            self.body.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                let class = if i == 0 || c.value.is_none() && c.key.is_none() {
                    " class=\"l\""
                } else {
                    ""
                };
                let key = c
                    .key
                    .as_ref()
                    .map(|k| format!(" data-key=\"{}\"", escape(k)))
                    .unwrap_or_default();
                let value = c
                    .value
                    .map(|v| format!(" data-value=\"{v}\""))
                    .unwrap_or_default();
                let _ = write!(self.body, "<td{class}{key}{value}>{}</td>", escape(&c.text));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// The whole file. `data` is embedded as a JSON data block (never executed), escaped so
    /// that nothing in it can close the script element.
    pub(crate) fn html(&self, data: Option<&serde_json::Value>) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
<meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{STYLE}</style></head>\n<body>\n<h1>{}</h1>\n{}",
            escape(&self.title),
            escape(&self.title),
            self.body
        );
        if let Some(d) = data {
            let _ = writeln!(
                out,
                "<script type=\"application/json\" id=\"kvmeter-data\">{}</script>",
                json_for_script(d)
            );
        }
        out.push_str(&format!(
            "<p class=\"na\">Made by kvmeter {} from the files in this directory.</p>\n</body></html>\n",
            env!("CARGO_PKG_VERSION")
        ));
        out
    }
}

/// A table cell: its text, and the raw number it shows (for tools and tests) when it is one.
pub struct Cell {
    pub text: String,
    pub value: Option<f64>,
    pub key: Option<String>,
}

impl Cell {
    pub(crate) fn text(t: impl Into<String>) -> Self {
        Cell {
            text: t.into(),
            value: None,
            key: None,
        }
    }
    pub(crate) fn num(key: &str, v: f64, text: String) -> Self {
        Cell {
            text,
            value: v.is_finite().then_some(v),
            key: Some(key.to_string()),
        }
    }
}

/// JSON that can sit inside `<script>`: `<`, `>` and `&` as \u escapes (still valid JSON).
pub fn json_for_script(v: &serde_json::Value) -> String {
    v.to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Downsamples (x, y) points to at most `MAX_POINTS` with LTTB, keeping the first and last.
pub fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let data: Vec<lttb::DataPoint> = points
        .into_iter()
        .map(|(x, y)| lttb::DataPoint::new(x, y))
        .collect();
    lttb::lttb(data, MAX_POINTS)
        .into_iter()
        .map(|p| (p.x, p.y))
        .collect()
}

/// A series over time whose rows are `step` apart: where rows are missing (an interval with
/// no successful operation has no latency) the line breaks instead of bridging the gap. A
/// downsampled series is left joined (its points are no longer `step` apart).
pub fn gapped(name: &str, points: Vec<(f64, f64)>, step: f64) -> super::chart::Series {
    let n = points.len();
    let mut s = super::chart::Series::new(name, downsample(points));
    if s.points.len() == n && step > 0.0 {
        s.gap = Some(step * 1.5);
    }
    s
}

/// A JSON file of the directory, or one line saying why not.
fn read(path: &Path) -> anyhow::Result<serde_json::Value> {
    let t = std::fs::read_to_string(path)
        .map_err(|e| UsageError::new(format!("{}: cannot read it: {e}", path.display())))?;
    serde_json::from_str(&t)
        .map_err(|e| UsageError::new(format!("{}: not valid JSON ({e})", path.display())).into())
}

/// A run directory's path relative to the experiment's, as the report shows it.
fn rel(dir: &Path, run: &str) -> String {
    Path::new(run)
        .strip_prefix(dir)
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| run.to_string())
}

/// What `write` made.
pub struct Written {
    pub path: PathBuf,
    pub bytes: usize,
    pub figures: usize,
}

/// Writes `report.html` (and `figures/*.svg`) for the run or experiment directory `dir`.
pub fn write(dir: &Path) -> anyhow::Result<Written> {
    write_with_cost(dir, None)
}

/// `write`, with a cost model (`--cost FILE`): checked before anything is written, printed,
/// saved as cost.json and added to the page.
pub fn write_with_cost(dir: &Path, cost: Option<&Path>) -> anyhow::Result<Written> {
    if !dir.is_dir() {
        let what = match dir.exists() {
            true => "not a directory",
            false => "no such directory",
        };
        return Err(UsageError::new(format!(
            "{}: {what}; give a run or experiment directory (kvmeter-runs/…)",
            dir.display()
        ))
        .into());
    }
    let cost = match cost {
        Some(path) => {
            let f = super::cost::load(path)?;
            let base = path.parent().unwrap_or(Path::new("."));
            let r = super::cost::evaluate(&f, base)?;
            Some((f, r))
        }
        None => None,
    };
    // The directory's kind, by the file its command writes.
    let (mut page, data) = if dir.join("experiment.json").is_file() {
        experiment::page(dir)?
    } else if dir.join("capacity.json").is_file() {
        capacity::page(dir)?
    } else if dir.join("sweep.json").is_file() || dir.join("index.csv").is_file() {
        sweep::page(dir)?
    } else if durability::is_durability(dir) {
        durability::page(dir)?
    } else {
        run::page(dir)?
    };
    if let Some((f, r)) = &cost {
        out!("{}", super::cost::render(f, r));
        super::rundir::write_atomic(
            &dir.join("cost.json"),
            (serde_json::to_string_pretty(r)? + "\n").as_bytes(),
        )?;
        cost_section(&mut page, f, r);
    }
    let figs = dir.join("figures");
    std::fs::create_dir_all(&figs)?;
    for (id, svg) in &page.figures {
        // Ids are made of phase and metric names, checked plain when the directory was read;
        // checked again here, where a path is made of them.
        if !super::rundata::is_plain_name(id) {
            anyhow::bail!("figure {id:?}: not a plain file name; nothing written for it");
        }
        super::rundir::write_atomic(&figs.join(format!("{id}.svg")), svg.as_bytes())?;
    }
    let html = page.html(data.as_ref());
    let path = dir.join("report.html");
    super::rundir::write_atomic(&path, html.as_bytes())?;
    Ok(Written {
        path,
        bytes: html.len(),
        figures: page.figures.len(),
    })
}

/// The cost model's assumptions and results, and operations per second per watt per machine.
fn cost_section(p: &mut Page, f: &super::cost::CostFile, r: &[super::cost::MachineCost]) {
    p.h2("Cost");
    for line in super::cost::render(f, &[])
        .lines()
        .filter(|l| !l.trim_start().starts_with("machine"))
    {
        p.note("na", line.trim());
    }
    let rows: Vec<Vec<Cell>> = r
        .iter()
        .map(|c| {
            let k = |f: &str| format!("cost.{}.{f}", c.name);
            let t = super::cost::texts(c);
            // A figure over a bound is a range: shown as text, never as one number.
            let num = |key: &str, v: f64, text: String| {
                if c.ranges.is_some() {
                    Cell::text(text)
                } else {
                    Cell::num(&k(key), v, text)
                }
            };
            vec![
                Cell::text(format!(
                    "{}{}",
                    c.name,
                    if c.estimate { " (ESTIMATE)" } else { "" }
                )),
                num("nodes", c.nodes as f64, t.nodes),
                Cell::text(c.bound_by.clone()),
                num("capacity_ops_per_s", c.capacity_ops_per_s, t.capacity),
                num("power_load_w", c.power_load_w, t.power_w),
                num("ops_per_s_per_w", c.ops_per_s_per_w, t.ops_per_s_per_w),
                num("tco_usd", c.tco_usd, t.tco_usd),
                num(
                    "usd_per_billion_ops",
                    c.usd_per_billion_ops,
                    t.usd_per_billion_ops,
                ),
                match c.break_even_price_usd {
                    Some(b) => Cell::num(&k("break_even_price_usd"), b, format!("{b:.0}")),
                    None => Cell::text(c.break_even.clone()),
                },
            ]
        })
        .collect();
    p.table(
        "cost",
        &[
            "machine",
            "nodes",
            "bound by",
            "capacity/s",
            "power W",
            "ops/s/W",
            "TCO $",
            "$ / 1e9 ops",
            "break-even price $",
        ],
        &rows,
    );
    let b = super::chart::BarChart {
        id: "cost-ops-per-watt".into(),
        title: "operations per second per watt at the SLO (papers/003 Table II)".into(),
        y_label: "ops/s per W".into(),
        bars: r
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.ops_per_s_per_w,
                    match &c.ranges {
                        // The bar is the low end of what a bound capacity gives.
                        Some(_) => {
                            let t = super::cost::texts(c);
                            format!("ops/s/W {}, {} nodes", t.ops_per_s_per_w, t.nodes)
                        }
                        None => format!("{} nodes", c.nodes),
                    },
                )
            })
            .collect(),
        sorted: false,
    };
    p.figure(
        "cost-ops-per-watt",
        b.svg(),
        "Capacity per watt of each machine, from the cost file's figures.",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_data_cannot_close_its_script() {
        let v = serde_json::json!({"error": "</script><script>alert(1)</script> & more"});
        let s = json_for_script(&v);
        assert!(!s.contains("</script>") && !s.contains('<') && !s.contains('&'));
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn long_series_are_downsampled_keeping_the_ends() {
        let pts: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, (i % 7) as f64)).collect();
        let d = downsample(pts);
        assert_eq!(d.len(), MAX_POINTS);
        assert_eq!(d[0], (0.0, 0.0));
        assert_eq!(*d.last().unwrap(), (9999.0, (9999 % 7) as f64));
    }
}
