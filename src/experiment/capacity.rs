//! `kvmeter capacity`: the highest offered load whose latency meets an SLO (papers/003 defines
//! capacity as the highest load with mean latency under 1 ms and plots median latency against
//! offered load, Fig. 6(d)).
//!
//! Every point is an open-loop run at one rate (load, then the run phase), judged on the run
//! phase's latency from intended start over all store calls (`all_ops`). The search steps the
//! rate up by a factor until a point fails, then bisects between the highest passing and the
//! lowest failing rate until they are within the precision. A point whose figure lands within
//! 10 % of a bound is repeated and judged on the median, so one noisy run does not move the
//! answer. The result is the highest passing rate, with the lowest failing one as its upper
//! bound: the capacity lies between them.

use super::{median, run_point, write_atomic};
use crate::error::{UsageError, EXIT_INTERRUPTED, EXIT_OK};
use crate::report::Summary;
use crate::spec::Request;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// One term of the SLO: a statistic of the latency from intended start, under a bound.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Term {
    /// mean, p50, p90, p99 or p99.9.
    pub stat: String,
    pub bound_us: f64,
}

impl Term {
    pub fn parse(text: &str) -> Result<Self, UsageError> {
        let bad = || {
            UsageError::new(format!(
                "--slo '{text}': expected <stat><<bound> with stat mean, p50, p90, p99 or p99.9 and a bound with a unit, e.g. mean<1ms or p99<500us"
            ))
        };
        let (stat, bound) = text.split_once('<').ok_or_else(bad)?;
        let stat = stat.trim().to_ascii_lowercase();
        if !["mean", "p50", "p90", "p99", "p99.9"].contains(&stat.as_str()) {
            return Err(bad());
        }
        let b = bound.trim().replace('µ', "u");
        let d = humantime::parse_duration(&b).map_err(|_| bad())?;
        if d.is_zero() {
            return Err(bad());
        }
        Ok(Term {
            stat,
            bound_us: d.as_secs_f64() * 1e6,
        })
    }

    /// This statistic of a run (latency from intended start, µs).
    fn of(&self, p: &Point) -> f64 {
        match self.stat.as_str() {
            "mean" => p.mean_us,
            "p50" => p.p50_us,
            "p90" => p.p90_us,
            "p99" => p.p99_us,
            _ => p.p99_9_us,
        }
    }

    pub fn label(&self) -> String {
        format!("{} < {} µs", self.stat, fmt_num(self.bound_us))
    }
}

fn fmt_num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

pub struct Settings {
    pub slo: Vec<Term>,
    pub require_achieved: bool,
    pub start_rate: f64,
    pub max_rate: f64,
    pub factor: f64,
    pub precision: f64,
    pub repeat: usize,
    pub max_points: usize,
}

/// One run of the curve.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub offered_ops_per_s: f64,
    pub repetition: usize,
    pub achieved_ops_per_s: f64,
    pub achieved_ratio: f64,
    pub kept_up: bool,
    /// Latency from intended start over all store calls (µs).
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p99_9_us: f64,
    /// Service time over all store calls (µs).
    pub service_mean_us: f64,
    pub service_p99_us: f64,
    pub run_dir: String,
}

/// A rate's verdict (over its repetitions: medians).
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub offered_ops_per_s: f64,
    pub runs: usize,
    /// Each SLO statistic's median over the runs (µs).
    pub figures: Vec<(String, f64)>,
    pub achieved_ratio: f64,
    pub pass: bool,
}

#[derive(Serialize)]
struct Result_ {
    schema: &'static str,
    status: String,
    store: String,
    slo: Vec<Term>,
    slo_text: String,
    require_achieved: bool,
    latency: &'static str,
    /// The highest rate that met the SLO; null if none did.
    capacity_ops_per_s: Option<f64>,
    /// The lowest rate that failed; null if none did (capacity ≥ max rate).
    upper_bound_ops_per_s: Option<f64>,
    /// Half the gap between the two: the capacity's uncertainty from the search.
    uncertainty_ops_per_s: Option<f64>,
    note: String,
    verdicts: Vec<Verdict>,
    points: Vec<Point>,
}

fn point_of(s: &Summary, rate: f64, repetition: usize, dir: &Path) -> anyhow::Result<Point> {
    let run = s
        .phases
        .iter()
        .rev()
        .find(|p| p.kind == "run")
        .ok_or_else(|| anyhow::anyhow!("{}: no run phase", dir.display()))?;
    let all = run
        .all_ops
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("{}: no operations completed", dir.display()))?;
    let i = all
        .intended_latency_us
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("{}: no intended-start latency", dir.display()))?;
    let ol = run.open_loop.as_ref();
    Ok(Point {
        offered_ops_per_s: rate,
        repetition,
        achieved_ops_per_s: ol.map(|o| o.achieved_ops_per_s).unwrap_or(0.0),
        achieved_ratio: ol.map(|o| o.achieved_ratio).unwrap_or(0.0),
        kept_up: ol.map(|o| o.kept_up).unwrap_or(false),
        mean_us: i.avg,
        p50_us: i.p50,
        p90_us: i.p90,
        p99_us: i.p99,
        p99_9_us: i.p99_9,
        service_mean_us: all.latency_us.avg,
        service_p99_us: all.latency_us.p99,
        run_dir: dir.display().to_string(),
    })
}

/// Judges a rate on its runs: medians of each SLO statistic; achieved (if required) on the
/// majority of runs keeping the schedule.
pub fn judge(rate: f64, runs: &[Point], s: &Settings) -> Verdict {
    let figures: Vec<(String, f64)> = s
        .slo
        .iter()
        .map(|t| {
            let v: Vec<f64> = runs.iter().map(|p| t.of(p)).collect();
            (t.stat.clone(), median(&v))
        })
        .collect();
    let meets = s
        .slo
        .iter()
        .zip(&figures)
        .all(|(t, (_, v))| *v < t.bound_us);
    let kept = runs.iter().filter(|p| p.kept_up).count() * 2 > runs.len();
    let ratio = median(&runs.iter().map(|p| p.achieved_ratio).collect::<Vec<_>>());
    Verdict {
        offered_ops_per_s: rate,
        runs: runs.len(),
        figures,
        achieved_ratio: ratio,
        pass: meets && (!s.require_achieved || kept),
    }
}

/// Whether a run's figures are close enough to a bound (within 10 %) to be worth repeating.
fn near_bound(p: &Point, s: &Settings) -> bool {
    s.slo.iter().any(|t| {
        let v = t.of(p);
        (v - t.bound_us).abs() <= 0.1 * t.bound_us
    })
}

/// The next rate to try, given the highest pass and lowest fail so far; `None`: done.
pub fn next_rate(lo: Option<f64>, hi: Option<f64>, last: f64, s: &Settings) -> Option<f64> {
    match (lo, hi) {
        (Some(l), Some(h)) => {
            if (h - l) / l <= s.precision {
                None
            } else {
                Some(((l + h) / 2.0).round().max(1.0))
            }
        }
        (Some(l), None) => {
            if l >= s.max_rate {
                None
            } else {
                Some((last * s.factor).min(s.max_rate))
            }
        }
        (None, Some(h)) => {
            let r = (h / s.factor).floor();
            (r >= 1.0).then_some(r)
        }
        (None, None) => Some(s.start_rate),
    }
}

const CSV_HEADER: &str = "offered_ops_per_s,repetition,achieved_ops_per_s,achieved_ratio,kept_up,mean_us,p50_us,p90_us,p99_us,p99_9_us,service_mean_us,service_p99_us,run_dir";

pub fn run(base: &Request, out: Option<&Path>, s: Settings) -> anyhow::Result<i32> {
    if base.rate.is_some() {
        return Err(UsageError::new(
            "--rate: kvmeter capacity chooses the offered load; use --start-rate and --max-rate",
        )
        .into());
    }
    if base.target.is_some() {
        return Err(UsageError::new(
            "--target: kvmeter capacity runs an open loop; leave --target out",
        )
        .into());
    }
    // Checks the whole request once, at the first rate, before any directory exists.
    let mut probe = base.clone();
    probe.rate = Some(s.start_rate);
    crate::spec::build(&probe)?;
    let root = super::experiment_dir(out, "capacity", &base.store)?;
    let slo_text = s
        .slo
        .iter()
        .map(Term::label)
        .collect::<Vec<_>>()
        .join(" and ");
    eprintln!(
        "capacity: {} on {}{}; each point {} (+ load); results in {}",
        slo_text,
        base.store,
        if s.require_achieved {
            ", achieved ≥ 99 % of offered"
        } else {
            ""
        },
        base.duration.as_deref().unwrap_or("10s"),
        root.display()
    );
    let interrupted = crate::driver::install_signals();
    let mut points: Vec<Point> = Vec::new();
    let mut verdicts: Vec<Verdict> = Vec::new();
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    let mut rate = s.start_rate;
    let mut status = "completed".to_string();
    let mut runs_done = 0usize;
    let mut csv = String::from(CSV_HEADER) + "\n";
    'search: loop {
        let mut runs: Vec<Point> = Vec::new();
        for k in 1..=s.repeat {
            if runs_done >= s.max_points {
                status = "stopped: --max-points reached".into();
                break 'search;
            }
            let dir =
                root.join("points")
                    .join(format!("{:02}-{}ops-r{k}", runs_done + 1, rate as u64));
            let mut req = base.clone();
            req.rate = Some(rate);
            req.command = "capacity".into();
            let (code, summary) = run_point(&req, &dir)?;
            runs_done += 1;
            if code == EXIT_INTERRUPTED || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
                status = "interrupted".into();
                break 'search;
            }
            if code != EXIT_OK {
                status = format!(
                    "failed at {rate} ops/s: {}",
                    summary
                        .error
                        .clone()
                        .unwrap_or_else(|| "the run failed".into())
                );
                break 'search;
            }
            let p = point_of(&summary, rate, k, &dir)?;
            let _ = writeln!(
                csv,
                "{},{},{:.1},{:.4},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{}",
                rate,
                k,
                p.achieved_ops_per_s,
                p.achieved_ratio,
                p.kept_up,
                p.mean_us,
                p.p50_us,
                p.p90_us,
                p.p99_us,
                p.p99_9_us,
                p.service_mean_us,
                p.service_p99_us,
                p.run_dir
            );
            write_atomic(&root.join("capacity.csv"), csv.as_bytes())?;
            let near = near_bound(&p, &s);
            runs.push(p.clone());
            points.push(p);
            if !near {
                break;
            }
        }
        let v = judge(rate, &runs, &s);
        eprintln!(
            "capacity: {:>10} ops/s offered, {:>10.0} achieved: {} → {}{}",
            rate,
            v.achieved_ratio * rate,
            v.figures
                .iter()
                .map(|(k, x)| format!("{k} {} µs", fmt_num(*x)))
                .collect::<Vec<_>>()
                .join(", "),
            if v.pass { "meets" } else { "misses" },
            if v.runs > 1 {
                format!(" (median of {} runs)", v.runs)
            } else {
                String::new()
            }
        );
        if v.pass {
            lo = Some(lo.map_or(rate, |l: f64| l.max(rate)));
        } else {
            hi = Some(hi.map_or(rate, |h: f64| h.min(rate)));
        }
        verdicts.push(v);
        match next_rate(lo, hi, rate, &s) {
            Some(r) => rate = r,
            None => break,
        }
    }
    let note = match (lo, hi) {
        (Some(l), Some(h)) => format!(
            "capacity {} ops/s: the highest offered load that met {slo_text}; {} ops/s missed it, so the capacity lies between them (± {} ops/s)",
            l, h, (h - l) / 2.0
        ),
        (Some(l), None) => format!(
            "at least {l} ops/s: every rate up to --max-rate met {slo_text}; raise --max-rate to find the limit"
        ),
        (None, Some(h)) => format!("below {h} ops/s: even the lowest rate tried missed {slo_text}"),
        (None, None) => "no point completed".into(),
    };
    let result = Result_ {
        schema: "kvmeter-capacity/1",
        status: status.clone(),
        store: base.store.clone(),
        slo: s.slo.clone(),
        slo_text: slo_text.clone(),
        require_achieved: s.require_achieved,
        latency: "from intended start (coordinated omission corrected), all store calls together",
        capacity_ops_per_s: lo,
        upper_bound_ops_per_s: hi,
        uncertainty_ops_per_s: lo.zip(hi).map(|(l, h)| (h - l) / 2.0),
        note: note.clone(),
        verdicts,
        points: points.clone(),
    };
    write_atomic(
        &root.join("capacity.json"),
        (serde_json::to_string_pretty(&result)? + "\n").as_bytes(),
    )?;
    write_atomic(
        &root.join("curve.svg"),
        curve_svg(&points, &s.slo).as_bytes(),
    )?;
    print!("{}", render(&points, &note, &status));
    eprintln!("results: {}", root.display());
    Ok(match status.as_str() {
        "completed" | "stopped: --max-points reached" => EXIT_OK,
        "interrupted" => EXIT_INTERRUPTED,
        _ => crate::error::EXIT_FAILED,
    })
}

/// The curve as a table, sorted by offered load.
fn render(points: &[Point], note: &str, status: &str) -> String {
    let mut v: Vec<&Point> = points.iter().collect();
    v.sort_by(|a, b| {
        a.offered_ops_per_s
            .partial_cmp(&b.offered_ops_per_s)
            .unwrap()
            .then(a.repetition.cmp(&b.repetition))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "latency from intended start (µs) against offered load, all store calls"
    );
    let _ = writeln!(
        out,
        "  {:>12} {:>12} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  service p99",
        "offered/s", "achieved/s", "kept", "mean", "p50", "p90", "p99", "p99.9"
    );
    for p in v {
        let _ = writeln!(
            out,
            "  {:>12} {:>12.0} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            p.offered_ops_per_s,
            p.achieved_ops_per_s,
            if p.kept_up { "yes" } else { "NO" },
            fmt_num(p.mean_us),
            fmt_num(p.p50_us),
            fmt_num(p.p90_us),
            fmt_num(p.p99_us),
            fmt_num(p.p99_9_us),
            fmt_num(p.service_p99_us)
        );
    }
    if status != "completed" {
        let _ = writeln!(out, "search {status}");
    }
    let _ = writeln!(out, "{note}");
    out
}

/// Mean and p99 latency (log scale) against offered load, with the SLO bounds: a
/// self-contained SVG.
fn curve_svg(points: &[Point], slo: &[Term]) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 420.0, 70.0, 20.0, 30.0, 50.0);
    let mut v: Vec<&Point> = points.iter().collect();
    v.sort_by(|a, b| {
        a.offered_ops_per_s
            .partial_cmp(&b.offered_ops_per_s)
            .unwrap()
    });
    let xmax = v.iter().map(|p| p.offered_ops_per_s).fold(1.0, f64::max) * 1.05;
    let ys: Vec<f64> = v
        .iter()
        .flat_map(|p| [p.mean_us, p.p99_us])
        .chain(slo.iter().map(|t| t.bound_us))
        .filter(|y| *y > 0.0)
        .collect();
    let ymin = ys.iter().cloned().fold(f64::INFINITY, f64::min).max(0.1) / 1.5;
    let ymax = ys.iter().cloned().fold(1.0, f64::max) * 1.5;
    let (l0, l1) = (ymin.log10(), ymax.log10());
    let x = |r: f64| ml + (w - ml - mr) * r / xmax;
    let y = |us: f64| mt + (h - mt - mb) * (1.0 - (us.max(ymin).log10() - l0) / (l1 - l0));
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="18" text-anchor="middle">latency from intended start against offered load</text>
<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">offered load (ops/s)</text>
<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">latency (µs, log)</text>
"#,
        w / 2.0,
        h - mb,
        w - mr,
        h - mb,
        h - mb,
        (ml + w - mr) / 2.0,
        h - 12.0,
        h / 2.0,
        h / 2.0
    );
    for i in 0..=4 {
        let r = xmax * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{:.0}</text>"#,
            x(r),
            h - mb + 16.0,
            r
        );
    }
    let mut d = l0.ceil() as i32;
    while (d as f64) <= l1 {
        let us = 10f64.powi(d);
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="lightgrey"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            y(us),
            w - mr,
            y(us),
            ml - 4.0,
            y(us) + 4.0,
            fmt_num(us)
        );
        d += 1;
    }
    for t in slo {
        let _ = writeln!(
            s,
            r#"<line x1="{ml}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="red" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" fill="red" text-anchor="end">SLO {}</text>"#,
            y(t.bound_us),
            w - mr,
            y(t.bound_us),
            w - mr - 4.0,
            y(t.bound_us) - 4.0,
            t.label()
        );
    }
    for (name, color, get) in [
        (
            "mean",
            "steelblue",
            (|p: &Point| p.mean_us) as fn(&Point) -> f64,
        ),
        ("p99", "darkorange", |p: &Point| p.p99_us),
    ] {
        let path: Vec<String> = v
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.offered_ops_per_s), y(get(p))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for p in &v {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                x(p.offered_ops_per_s),
                y(get(p))
            );
        }
        let ly = if name == "mean" { 40.0 } else { 56.0 };
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{ly}" fill="{color}">{name}</text>"#,
            ml + 10.0
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            slo: vec![Term::parse("mean<1ms").unwrap()],
            require_achieved: false,
            start_rate: 1000.0,
            max_rate: 1e6,
            factor: 2.0,
            precision: 0.05,
            repeat: 3,
            max_points: 30,
        }
    }

    #[test]
    fn slo_terms_parse_with_units_and_reject_the_rest() {
        assert_eq!(
            Term::parse("mean<1ms").unwrap(),
            Term {
                stat: "mean".into(),
                bound_us: 1000.0
            }
        );
        assert_eq!(Term::parse("p99.9<250us").unwrap().bound_us, 250.0);
        assert_eq!(Term::parse("P99 < 2s").unwrap().bound_us, 2e6);
        for bad in ["mean", "p42<1ms", "mean<1", "mean<0ms", "p99>1ms"] {
            assert!(Term::parse(bad).is_err(), "{bad}");
        }
    }

    /// The search against a store whose capacity is known: mean latency rises past 1 ms at
    /// exactly 37,000 ops/s. Steps 1k, 2k, … 64k, then bisects to within 5 %.
    #[test]
    fn the_search_brackets_a_known_capacity() {
        let s = settings();
        let truth = 37_000.0;
        let (mut lo, mut hi) = (None, None);
        let mut rate = s.start_rate;
        let mut tried = vec![];
        loop {
            tried.push(rate);
            if rate <= truth {
                lo = Some(lo.map_or(rate, |l: f64| l.max(rate)));
            } else {
                hi = Some(hi.map_or(rate, |h: f64| h.min(rate)));
            }
            match next_rate(lo, hi, rate, &s) {
                Some(r) => rate = r,
                None => break,
            }
        }
        let (l, h) = (lo.unwrap(), hi.unwrap());
        assert!(l <= truth && truth < h, "{l} .. {h}");
        assert!((h - l) / l <= 0.05);
        assert_eq!(&tried[..7], &[1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 64e3]);
        assert!(tried.len() <= 12, "{tried:?}");
    }

    #[test]
    fn a_failing_start_steps_down_and_a_passing_max_stops() {
        let s = settings();
        assert_eq!(next_rate(None, Some(1000.0), 1000.0, &s), Some(500.0));
        assert_eq!(next_rate(Some(1e6), None, 1e6, &s), None);
        assert_eq!(next_rate(Some(6e5), None, 6e5, &s), Some(1e6));
    }

    #[test]
    fn repeated_runs_are_judged_on_their_median() {
        let s = settings();
        let p = |mean: f64| Point {
            offered_ops_per_s: 1000.0,
            repetition: 1,
            achieved_ops_per_s: 1000.0,
            achieved_ratio: 1.0,
            kept_up: true,
            mean_us: mean,
            p50_us: 0.0,
            p90_us: 0.0,
            p99_us: 0.0,
            p99_9_us: 0.0,
            service_mean_us: 0.0,
            service_p99_us: 0.0,
            run_dir: String::new(),
        };
        // One noisy run over the bound, two under: passes on the median (950 µs).
        let v = judge(1000.0, &[p(950.0), p(1400.0), p(900.0)], &s);
        assert!(v.pass);
        assert_eq!(v.figures, vec![("mean".to_string(), 950.0)]);
        assert!(!judge(1000.0, &[p(1001.0)], &s).pass);
        assert!(near_bound(&p(950.0), &s) && !near_bound(&p(500.0), &s));
    }
}
