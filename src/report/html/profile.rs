//! A phase's profile in report.html (`--profile`, issue 44): per group its share of the
//! samples, its time in the kernel and its top functions, with its flame graph — inline as an
//! image (scripts inside never run there; the page's CSP allows only `data:` images) when it
//! is small enough, and always as a link to the interactive SVG beside the report.

use super::{Cell, Page};
use crate::report::rundata::{RunData, Table};
use crate::report::PhaseSummary;
use std::collections::BTreeMap;

/// Intervals singled out as a phase's worst (by p99.9), and the fewest measured intervals a
/// phase needs for that to mean anything.
const WORST: usize = 3;
const MIN_INTERVALS: usize = 10;

/// Flame graphs larger than this are linked, not inlined (report.html stays readable).
const MAX_INLINE_BYTES: u64 = 512 * 1024;

pub(super) fn section(p: &mut Page, d: &RunData, ph: &PhaseSummary) {
    let dir = d.dir.as_path();
    let Some(t) = &ph.telemetry else {
        return;
    };
    let Some(f) = &t.profile else {
        if let Some(why) = t.unavailable.get("profile") {
            p.note("na", &format!("Profile: {why}"));
        }
        return;
    };
    p.note(
        "na",
        &format!(
            "Profile: {} samples of {} at {} Hz; perf's own CPU {:.1} % of one CPU.",
            f.samples, f.event, f.frequency_hz, f.cost_pct_of_one_cpu
        ),
    );
    let mut rows = vec![];
    for (name, g) in &f.groups {
        let k = |x: &str| format!("{}.profile.{name}.{x}", ph.name);
        let pct = |x: &str, v: Option<f64>| match v {
            Some(v) => Cell::num(&k(x), v, format!("{v:.1} %")),
            None => Cell::text("—"),
        };
        let top = match &g.too_few {
            Some(why) => why.clone(),
            None => g
                .top
                .iter()
                .take(5)
                .map(|t| format!("{} {:.1} %", t.function, t.self_pct))
                .collect::<Vec<_>>()
                .join("; "),
        };
        rows.push(vec![
            Cell::text(name.clone()),
            Cell::num(&k("samples"), g.samples as f64, g.samples.to_string()),
            pct("share_pct", g.share_pct),
            pct("kernel_pct", g.kernel_pct),
            Cell::text(top),
        ]);
    }
    p.table(
        &format!("profile-{}", ph.name),
        &[
            "group",
            "samples",
            "share",
            "in kernel",
            "top functions (own time)",
        ],
        &rows,
    );
    for (name, g) in &f.groups {
        if let Some(svg) = &g.flamegraph {
            let path = dir.join(svg);
            let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_INLINE_BYTES);
            let bytes = if small {
                std::fs::read(&path).ok()
            } else {
                None
            };
            p.image(
                &format!("flame-{}-{name}", ph.name),
                bytes.as_deref(),
                svg,
                &format!(
                    "{}: {name}'s flame graph (open {svg} for the interactive one)",
                    ph.name
                ),
            );
        }
    }
    for n in &f.notes {
        p.note("na", n);
    }
    worst_intervals(p, d, ph);
}

/// The measured intervals of `phase` with the highest p99.9 (over its operations), worst first:
/// (start_s, end_s, p99.9 µs).
fn worst(d: &RunData, phase: &str) -> (Vec<(f64, f64, f64)>, usize) {
    let mut by: BTreeMap<u64, (f64, f64, f64)> = BTreeMap::new();
    for r in d.intervals.iter().filter(|r| {
        r.phase == phase
            && !r.warmup
            && !matches!(r.metric.as_str(), "CLEANUP" | "VERIFY" | "SCHEDULE")
    }) {
        let e = by
            .entry(r.start_s.to_bits())
            .or_insert((r.start_s, r.end_s, f64::NAN));
        if r.p99_9_us.is_finite() && (e.2.is_nan() || e.2 < r.p99_9_us) {
            e.2 = r.p99_9_us;
        }
    }
    let n = by.len();
    let mut v: Vec<(f64, f64, f64)> = by.into_values().filter(|x| x.2.is_finite()).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2));
    v.truncate(WORST);
    (v, n)
}

/// What ran in the phase's worst intervals (profile/<phase>.slices.csv) beside what ran over
/// the whole phase, with the store's events in those intervals (store_events.csv).
fn worst_intervals(p: &mut Page, d: &RunData, ph: &PhaseSummary) {
    let safe = crate::telemetry::profile::file_safe(&ph.name);
    let Ok(Some(slices)) = Table::read(&d.dir.join(format!("profile/{safe}.slices.csv"))) else {
        return;
    };
    let (worst, n) = worst(d, &ph.name);
    if n < MIN_INTERVALS || worst.is_empty() {
        p.note(
            "na",
            &format!("Profile of the worst intervals: {n} measured intervals; at least {MIN_INTERVALS} are needed to single out the worst."),
        );
        return;
    }
    let counts = slice_counts(&slices, &worst);
    let all = |g: &str| {
        counts
            .get(&(g.to_string(), "[all]".to_string()))
            .copied()
            .unwrap_or_default()
    };
    let mut rows = vec![];
    let groups: Vec<String> = counts
        .keys()
        .map(|k| k.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for g in &groups {
        let (w_all, p_all) = all(g);
        if w_all == 0 {
            continue;
        }
        let mut fs: Vec<(&String, (u64, u64))> = counts
            .iter()
            .filter(|(k, _)| &k.0 == g && k.1 != "[all]")
            .map(|(k, v)| (&k.1, *v))
            .collect();
        fs.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        for (f, (w, whole)) in fs.into_iter().take(3).filter(|f| f.1 .0 > 0) {
            let share = |n: u64, of: u64| n as f64 / of.max(1) as f64 * 100.0;
            rows.push(vec![
                Cell::text(g.clone()),
                Cell::text(f.clone()),
                Cell::num(
                    &format!("{}.worst.{g}.{f}", ph.name),
                    share(w, w_all),
                    format!("{:.1} %", share(w, w_all)),
                ),
                Cell::text(format!("{:.1} %", share(whole, p_all))),
            ]);
        }
    }
    let when: Vec<String> = worst
        .iter()
        .map(|w| format!("{:.0}–{:.0} s (p99.9 {:.0} µs)", w.0, w.1, w.2))
        .collect();
    p.note(
        "na",
        &format!(
            "The {} worst intervals by p99.9 — {} — against the whole phase (own time; a function outside a time slice's top five is not counted in it, so shares are at least these):",
            worst.len(),
            when.join(", ")
        ),
    );
    p.table(
        &format!("profile-worst-{}", ph.name),
        &[
            "group",
            "function",
            "in the worst intervals",
            "over the phase",
        ],
        &rows,
    );
    events_note(p, d, ph, &worst);
}

/// (group, function) → (samples in the worst intervals, samples over the phase), from the
/// profile's time slices.
fn slice_counts(
    slices: &Table,
    worst: &[(f64, f64, f64)],
) -> BTreeMap<(String, String), (u64, u64)> {
    // A slice belongs to the interval holding its middle (slices start at the window's start,
    // the interval grid a few milliseconds earlier: an overlap test would take neighbours too).
    let inside = |a: f64, b: f64| {
        let mid = (a + b) / 2.0;
        worst.iter().any(|w| mid >= w.0 && mid < w.1)
    };
    let mut counts: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for r in slices.rows() {
        let (Some(a), Some(b), Some(n)) = (r.num("start_s"), r.num("end_s"), r.num("samples"))
        else {
            continue;
        };
        let e = counts
            .entry((r.get("group").to_string(), r.get("function").to_string()))
            .or_default();
        e.1 += n as u64;
        if inside(a, b) {
            e.0 += n as u64;
        }
    }
    counts
}

/// The store's events (store_events.csv) that fell in the worst intervals.
fn events_note(p: &mut Page, d: &RunData, ph: &PhaseSummary, worst: &[(f64, f64, f64)]) {
    let mut events: BTreeMap<&str, u64> = BTreeMap::new();
    for r in d.store_events.rows_where("phase", &ph.name) {
        if let Some(t) = r.num("t_s") {
            if worst.iter().any(|w| t >= w.0 && t < w.1) {
                *events.entry(r.get("event")).or_default() += 1;
            }
        }
    }
    let said: Vec<String> = events.iter().map(|(e, n)| format!("{e} ×{n}")).collect();
    p.note(
        "na",
        &format!(
            "The store's events in those intervals: {}.",
            if said.is_empty() {
                "none logged".to_string()
            } else {
                said.join(", ")
            }
        ),
    );
}
