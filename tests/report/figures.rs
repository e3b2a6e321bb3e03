//! The report's figures drawn from real runs (issue 28, item 10): the percentile spectrum's
//! latency axis is log with readable ticks, no text is cut (titles and legends are sized from
//! their text), the capacity figure's labels cover no other label, axis titles are names (not
//! keys), and a phase shorter than one interval is said in words, not drawn as a lone dot.
//!
//! Text boxes are computed from the emitted coordinates at 0.6 em a character (the average
//! width docs/report.md promises figures are sized for; DejaVu Sans averages about 0.55 em).

use crate::common;

use common::*;
use roxmltree::{Document, Node};
use std::path::Path;

const EM_PER_CHAR: f64 = 0.6;

fn num(n: Node, a: &str) -> f64 {
    n.attribute(a)
        .unwrap_or_else(|| panic!("no {a} on {n:?}"))
        .parse()
        .unwrap()
}

/// One line of text as drawn: its content and box (x0, y0, x1, y1).
#[derive(Debug, Clone)]
struct Line {
    text: String,
    class: String,
    rect: (f64, f64, f64, f64),
}

/// Every text line of an SVG (a `<text>`'s own content and each `<tspan>`), with its box;
/// turned text (a transform) is left out of the boxes, its text kept.
fn lines(svg: &str) -> (Vec<Line>, Vec<(String, String)>, f64) {
    let doc = Document::parse(svg).unwrap_or_else(|e| panic!("not XML: {e}\n{svg}"));
    let root = doc.root_element();
    let width = num(root, "width");
    let base_size: f64 = root.attribute("font-size").unwrap_or("11").parse().unwrap();
    let mut out = vec![];
    let mut whole = vec![];
    for t in root.descendants().filter(|n| n.has_tag_name("text")) {
        let size = t
            .attribute("font-size")
            .map(|s| s.parse().unwrap())
            .unwrap_or(base_size);
        let anchor = t.attribute("text-anchor").unwrap_or("start");
        let class = t.attribute("class").unwrap_or("").to_string();
        let mut parts: Vec<(f64, f64, String)> = vec![];
        let (mut x, mut y) = (num(t, "x"), num(t, "y"));
        for c in t.children() {
            if c.is_text() {
                parts.push((x, y, c.text().unwrap().to_string()));
            } else if c.has_tag_name("tspan") {
                x = c.attribute("x").map(|v| v.parse().unwrap()).unwrap_or(x);
                y += c.attribute("dy").map(|v| v.parse().unwrap()).unwrap_or(0.0);
                parts.push((x, y, c.text().unwrap_or("").to_string()));
            }
        }
        whole.push((
            class.clone(),
            parts
                .iter()
                .map(|p| p.2.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ));
        if t.attribute("transform").is_some() {
            continue;
        }
        for (x, y, text) in parts {
            let w = text.chars().count() as f64 * size * EM_PER_CHAR;
            let x0 = match anchor {
                "middle" => x - w / 2.0,
                "end" => x - w,
                _ => x,
            };
            out.push(Line {
                text,
                class: class.clone(),
                rect: (x0, y - size, x0 + w, y + size * 0.25),
            });
        }
    }
    (out, whole, width)
}

fn overlap(a: &(f64, f64, f64, f64), b: &(f64, f64, f64, f64)) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// No line of text reaches outside the figure.
fn inside(svg: &str, name: &str) {
    let (ls, _, width) = lines(svg);
    for l in &ls {
        assert!(
            l.rect.0 >= 0.0 && l.rect.2 <= width,
            "{name}: '{}' reaches outside the figure ({:?}, width {width})",
            l.text,
            l.rect
        );
    }
}

/// No line reaches outside the figure, the title and every series' name are written whole.
fn nothing_cut(svg: &str, name: &str) {
    inside(svg, name);
    let (_, whole, _) = lines(svg);
    let doc = Document::parse(svg).unwrap();
    let title = doc
        .root_element()
        .children()
        .find(|n| n.has_tag_name("title"))
        .and_then(|n| n.text())
        .unwrap_or("");
    assert!(
        whole.iter().any(|(c, t)| c == "title" && t == title),
        "{name}: the title '{title}' is not written whole: {whole:?}"
    );
    for s in doc
        .descendants()
        .filter_map(|n| n.attribute("data-series").filter(|_| n.has_tag_name("g")))
    {
        let legends: Vec<&String> = whole
            .iter()
            .filter(|(c, _)| c == "legend")
            .map(|(_, t)| t)
            .collect();
        if legends.is_empty() {
            continue; // a bar chart: its series is its title
        }
        assert!(
            legends.iter().any(|t| *t == s),
            "{name}: series '{s}' has no whole legend entry: {legends:?}"
        );
    }
}

fn figure(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(dir.join("figures").join(format!("{id}.svg")))
        .unwrap_or_else(|e| panic!("{}/figures/{id}.svg: {e}", dir.display()))
}

/// A tick label written with a unit, back in µs: "100 µs" → 100, "2.5 ms" → 2500.
fn micros(label: &str) -> Option<f64> {
    let (v, unit) = label.split_once(' ')?;
    let v: f64 = v.parse().ok()?;
    Some(
        v * match unit {
            "ns" => 1e-3,
            "µs" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            _ => return None,
        },
    )
}

fn run_default(out: &Path) {
    let o = kvmeter()
        .args([
            "run",
            "--records",
            "500",
            "--duration",
            "2s",
            "--warmup",
            "500ms",
        ])
        .args(["--rate", "4000", "--telemetry-interval", "200ms", "--out"])
        .arg(out)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The spectrum of a real run: log latency axis with µs/ms ticks at log-spaced positions,
/// p0 above the axis line; every figure of the run holds its text whole; a load phase of 500
/// inserts (far shorter than the 1 s interval) is a sentence, not a lone dot.
#[test]
fn run_figures_have_log_latency_whole_text_and_no_lone_dots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    run_default(&out);
    let svg = figure(&out, "run-spectrum");
    let doc = Document::parse(&svg).unwrap();
    // The open-loop run's per-interval latency has the longest legend entry.
    let latency = figure(&out, "run-read-latency");
    assert!(latency.contains("p99 from intended start"));
    let all: Vec<(String, String)> = std::fs::read_dir(out.join("figures"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    for (name, svg) in &all {
        inside(svg, name);
    }
    for (name, svg) in &all {
        nothing_cut(svg, name);
    }
    // Every series' first point (p0) sits above the x axis line.
    let axis_y = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("axes"))
        .flat_map(|g| g.children().filter(|c| c.has_tag_name("line")))
        .map(|l| num(l, "y1"))
        .next()
        .unwrap();
    for p in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
        let first = p.attribute("points").unwrap().split(' ').next().unwrap();
        let y: f64 = first.split(',').nth(1).unwrap().parse().unwrap();
        assert!(
            y < axis_y - 2.0,
            "p0 drawn on the axis: {first} (axis at {axis_y})"
        );
    }
    let ticks: Vec<(f64, f64)> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("y-tick"))
        .map(|n| {
            let label = n.text().unwrap();
            let v = micros(label).unwrap_or_else(|| panic!("tick '{label}' has no unit"));
            (v, num(n, "y"))
        })
        .collect();
    assert!(ticks.len() >= 2, "{ticks:?}");
    // Increasing values upwards (SVG y decreases), equal pixels per decade: a log axis.
    let per_decade: Vec<f64> = ticks
        .windows(2)
        .map(|w| (w[0].1 - w[1].1) / (w[1].0 / w[0].0).log10())
        .collect();
    assert!(per_decade.iter().all(|d| *d > 0.0), "{ticks:?}");
    for d in &per_decade {
        assert!((d - per_decade[0]).abs() < 0.2, "not log-spaced: {ticks:?}");
    }
    // Decade ticks are 10^k µs written as 10 µs, 100 µs, 1 ms...
    for (v, _) in &ticks {
        let m = v / 10f64.powf(v.log10().floor());
        assert!(
            [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 1e-9),
            "{ticks:?}"
        );
    }
    // The load phase took a few ms of a 1 s interval: said, not drawn.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("load: phase shorter than one interval"),
        "no sentence for the sub-interval load phase"
    );
    assert!(!out.join("figures/load-throughput.svg").exists());
    assert!(!html.contains(r#"data-figure="load-insert-latency""#));
    assert!(html.contains(r#"data-figure="run-throughput""#));
}

/// The x of every marker a figure draws, from its hover title ("p50: x 1.53 y 120 µs").
fn marker_xs(svg: &str) -> Vec<f64> {
    let doc = Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("circle"))
        .filter_map(|c| c.children().find(|t| t.has_tag_name("title"))?.text())
        .filter_map(|t| t.split(": x ").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

/// The x axis title of a figure (the axis title that is not turned), its lines joined.
fn x_title(svg: &str) -> String {
    let doc = Document::parse(svg).unwrap();
    doc.descendants()
        .find(|n| n.attribute("class") == Some("axis-title") && n.attribute("transform").is_none())
        .map(|n| {
            n.descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Issue 40 items 8 and 9 on a real open-loop run. Item 9: the run phase's latency figure is
/// drawn on the run's clock, as telemetry is: the same x axis title, and its first interval at
/// the phase's start on that clock (its `started_at` less the manifest's) plus the interval's
/// middle from intervals.csv. Item 8: report.html's operation table has the latency from the
/// intended start beside the service time, with the summary's figures.
#[test]
fn an_open_loop_report_has_one_time_axis_and_from_intended_columns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    run_default(&out);
    let s = json(&out.join("summary.json"));
    let m = json(&out.join("manifest.json"));
    let at = |v: &serde_json::Value| humantime::parse_rfc3339_weak(v.as_str().unwrap()).unwrap();
    let run = phase(&s, "run");
    let offset = at(&run["started_at"])
        .duration_since(at(&m["started_at"]))
        .unwrap()
        .as_secs_f64();
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let first_mid = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[col("phase")] == "run" && f[col("metric")] == "READ")
        .filter(|f| f[col("count")].parse::<u64>().unwrap() > 0)
        .map(|f| {
            let (a, b): (f64, f64) = (
                f[col("start_s")].parse().unwrap(),
                f[col("end_s")].parse().unwrap(),
            );
            (a + b) / 2.0
        })
        .fold(f64::INFINITY, f64::min);
    let latency = figure(&out, "run-read-latency");
    let telemetry = figure(&out, "telemetry-cpu");
    assert_eq!(x_title(&latency), "time since the run started (s)");
    assert_eq!(x_title(&latency), x_title(&telemetry));
    assert_eq!(
        x_title(&figure(&out, "run-throughput")),
        x_title(&telemetry)
    );
    let xs = marker_xs(&latency);
    let first = xs.iter().copied().fold(f64::INFINITY, f64::min);
    // The hover value is written with 2 decimals.
    assert!(
        (first - (offset + first_mid)).abs() <= 0.006,
        "first interval drawn at {first}, expected {offset} + {first_mid}: {xs:?}"
    );

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let table = html
        .split(r#"<table data-table="ops-run">"#)
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    for h in [
        "p99 µs from send",
        "p99 µs from intended",
        "max µs from intended",
    ] {
        assert!(table.contains(&format!("<th>{h}</th>")), "{h}: {table}");
    }
    for f in ["p50", "p99", "p99_9", "max"] {
        let key = format!(r#"data-key="run.READ.intended_latency_us.{f}" data-value=""#);
        let v: f64 = table
            .split(&key)
            .nth(1)
            .unwrap_or_else(|| panic!("{key} in {table}"))
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let want = run["ops"]["READ"]["intended_latency_us"][f]
            .as_f64()
            .unwrap();
        assert!((v - want).abs() <= 1e-9 * want.abs(), "{f}: {v} vs {want}");
    }
    assert!(html.contains("sends late by p99"), "the open-loop line");
}

/// A capacity search on a real memcached with two SLO bounds 10 % apart (their labels would
/// sit on each other) and the capacity marker: no two labels of the figure overlap.
#[test]
fn capacity_figure_labels_do_not_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cap");
    let o = kvmeter()
        .args(["capacity", "-P", "workloadc", "--store", "memcached"])
        .args(["--threads", "1", "--records", "500", "--arrival", "fixed"])
        .args(["--slo", "p50<300us", "--slo", "p99<330us"])
        .args(["--start-rate", "2000", "--max-points", "3", "--repeat", "1"])
        .args([
            "--duration",
            "1s",
            "--warmup",
            "200ms",
            "--telemetry-interval",
            "0",
        ])
        .arg("--out")
        .arg(&out)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for svg in [
        std::fs::read_to_string(out.join("curve.svg")).unwrap(),
        figure(&out, "capacity-curve"),
    ] {
        let (ls, _, _) = lines(&svg);
        for (i, a) in ls.iter().enumerate() {
            for b in &ls[i + 1..] {
                assert!(
                    !overlap(&a.rect, &b.rect),
                    "'{}' {:?} overlaps '{}' {:?}",
                    a.text,
                    a.rect,
                    b.text,
                    b.rect
                );
            }
        }
        let refs = ls.iter().filter(|l| l.class == "reference-label").count();
        assert_eq!(refs, 2, "{ls:#?}");
        nothing_cut(&svg, "capacity-curve");
        // The SLO labels name the bound in a unit.
        assert!(ls.iter().any(|l| l.text == "SLO p99 < 330 µs"), "{ls:#?}");
    }
}

/// A sweep's figures name their axes from the names table: "client threads", "throughput
/// (ops/s)" — never a key such as throughput_ops_per_s.
#[test]
fn sweep_axes_are_named_not_keyed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let o = kvmeter()
        .args([
            "sweep",
            "--param",
            "threads=1,2",
            "--repeat",
            "1",
            "--records",
            "200",
        ])
        .args(["--duration", "1s", "--telemetry-interval", "0", "--out"])
        .arg(&out)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = figure(&out, "sweep-throughput_ops_per_s");
    let (_, whole, _) = lines(&svg);
    for want in ["client threads", "throughput (ops/s)"] {
        assert!(
            whole.iter().any(|(_, t)| t == want),
            "no '{want}': {whole:?}"
        );
    }
    let titles: Vec<&str> = whole
        .iter()
        .filter(|(c, _)| c == "axis-title")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(titles, ["client threads", "throughput (ops/s)"]);
    for entry in std::fs::read_dir(out.join("figures")).unwrap() {
        let p = entry.unwrap().path();
        let svg = std::fs::read_to_string(&p).unwrap();
        for (c, t) in lines(&svg).1 {
            if c == "axis-title" || c == "title" {
                assert!(!t.contains('_'), "{}: a key on an axis: '{t}'", p.display());
            }
        }
        nothing_cut(&svg, &p.display().to_string());
    }
}
