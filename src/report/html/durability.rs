//! A `kvmeter durability` directory in report.html: the result (none lost, lost, or
//! unavailable and why), the counts, the faults or kills and when they came, the per-kill
//! figures, and acknowledged writes over time with the faults marked. Everything is read back
//! from the directory's files — durability.json, manifest.json, events.csv, writes-<w>.csv —
//! never recomputed; a directory whose check did not finish shows its manifest and says so.

use super::{downsample, Cell, Page};
use crate::error::UsageError;
use crate::report::chart::{LineChart, Series};
use serde_json::Value;
use std::path::Path;

/// The manifest schema `kvmeter durability` writes (experiment::durability::output).
pub const MANIFEST_SCHEMA: &str = "kvmeter-durability-manifest/1";

/// Lines of the writes logs read for the figure, in all (a 10 s run on a fast store writes
/// about a million); past this the figure stops and says so.
const MAX_LOG_LINES: usize = 20_000_000;

fn read(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Whether `dir` is a durability directory (finished or not).
pub(super) fn is_durability(dir: &Path) -> bool {
    dir.join("durability.json").is_file()
        || read(&dir.join("manifest.json"))
            .is_some_and(|m| m["schema"].as_str() == Some(MANIFEST_SCHEMA))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(t) => t.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub(super) fn page(dir: &Path) -> anyhow::Result<(Page, Option<Value>)> {
    let d = read(&dir.join("durability.json"));
    let m = read(&dir.join("manifest.json")).unwrap_or(Value::Null);
    if d.is_none() && m.is_null() {
        return Err(UsageError::new(format!(
            "{}: neither durability.json nor manifest.json can be read",
            dir.display()
        ))
        .into());
    }
    let store = d
        .as_ref()
        .map(|d| text(&d["store"]))
        .unwrap_or_else(|| text(&m["store"]["name"]));
    let mut p = Page::new(&format!("kvmeter durability of {store}"));
    match &d {
        Some(d) => result(&mut p, d),
        None => p.note(
            "partial",
            &format!(
                "The check did not finish (status {}{}): no durability.json.",
                text(&m["status"]),
                m["error"]
                    .as_str()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        ),
    }
    facts(&mut p, d.as_ref(), &m);
    let events = events(dir);
    if !events.is_empty() {
        p.h2("Faults");
        let rows: Vec<Vec<Cell>> = events
            .iter()
            .map(|e| {
                vec![
                    Cell::num("durability.event.t_s", e.t, format!("{:.3}", e.t)),
                    Cell::text(e.event.clone()),
                    Cell::text(e.member.clone()),
                    Cell::text(e.pid.clone()),
                    Cell::text(e.cluster.clone()),
                ]
            })
            .collect();
        p.table(
            "durability-events",
            &["t (s)", "event", "member", "pid", "cluster"],
            &rows,
        );
    }
    if let Some(d) = &d {
        kills(&mut p, d);
    }
    timeline(&mut p, dir, &events);
    Ok((p, d))
}

/// The result line and the counts.
fn result(p: &mut Page, d: &Value) {
    let class = match d["result"].as_str() {
        Some("none lost") => "na",
        Some("lost") => "warn",
        _ => "partial",
    };
    p.note(class, &text(&d["result_text"]));
    let v = &d["verdict"];
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let rows: Vec<Vec<Cell>> = [
        ("writes", "writes"),
        ("acknowledged", "acknowledged (ok)"),
        ("failed", "failed (the store refused)"),
        ("indeterminate", "indeterminate (may or may not be there)"),
        ("lost", "LOST: acknowledged, not read back"),
        ("indeterminate_found", "indeterminate, found"),
        ("indeterminate_missing", "indeterminate, missing"),
        (
            "unexpected",
            "unexpected (a failed write found, or another value)",
        ),
        (
            "unreadable",
            "not read back (the check could not read them)",
        ),
    ]
    .iter()
    .map(|(k, label)| {
        vec![
            Cell::text(*label),
            Cell::num(&format!("durability.{k}"), n(k) as f64, n(k).to_string()),
        ]
    })
    .collect();
    p.h2("Writes");
    p.table("durability-counts", &["", "writes"], &rows);
    if let Some(ex) = v["lost_examples"].as_array().filter(|a| !a.is_empty()) {
        let ex: Vec<String> = ex.iter().map(text).collect();
        p.note("na", &format!("Lost, for example: {}", ex.join(", ")));
    }
}

fn facts(p: &mut Page, d: Option<&Value>, m: &Value) {
    p.h2("Check");
    let options: Vec<String> = m["store"]["options"]
        .as_object()
        .or_else(|| d.and_then(|d| d["options"].as_object()))
        .map(|o| o.iter().map(|(k, v)| format!("{k}={}", text(v))).collect())
        .unwrap_or_default();
    let mut rows = vec![
        ("status", text(&m["status"])),
        (
            "store",
            format!(
                "{} {}",
                text(&m["store"]["name"]),
                text(&m["store"]["version"])
            ),
        ),
        ("store options", options.join(", ")),
        ("started", text(&m["started_at"])),
        ("finished", text(&m["finished_at"])),
        ("seed", text(&m["seed"])),
        ("--fail-on-loss", text(&m["settings"]["fail_on_loss"])),
        (
            "command line",
            m["command_line"]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        ),
    ];
    if let Some(d) = d {
        rows.insert(1, ("mode", text(&d["mode"])));
        rows.push(("how it was read back", text(&d["note"])));
    }
    let rows: Vec<Vec<Cell>> = rows
        .into_iter()
        .map(|(k, v)| vec![Cell::text(k), Cell::text(v)])
        .collect();
    p.table("durability-facts", &["", ""], &rows);
}

/// Embedded stores: one row per kill, from durability.json's rounds.
fn kills(p: &mut Page, d: &Value) {
    let rounds: Vec<&Value> = d["rounds"]
        .as_array()
        .map(|a| a.iter().filter(|r| r.get("round").is_some()).collect())
        .unwrap_or_default();
    if rounds.is_empty() {
        return;
    }
    p.h2("Kills");
    let num = |r: &Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let rows: Vec<Vec<Cell>> = rounds
        .iter()
        .map(|r| {
            let c = |k: &str, digits: usize| {
                let v = num(r, k);
                Cell::num(
                    &format!("durability.kill.{k}"),
                    v,
                    if v.is_finite() {
                        format!("{v:.digits$}")
                    } else {
                        "-".into()
                    },
                )
            };
            vec![
                Cell::text(text(&r["round"])),
                c("killed_at_s", 3),
                c("kill_after_ms", 0),
                c("acknowledged_this_round", 0),
                c("lost_so_far", 0),
                c("indeterminate_found_so_far", 0),
            ]
        })
        .collect();
    p.table(
        "durability-kills",
        &[
            "kill",
            "at (s)",
            "into its writes (ms)",
            "acknowledged this round",
            "lost so far",
            "indeterminate found so far",
        ],
        &rows,
    );
}

struct Event {
    t: f64,
    event: String,
    member: String,
    pid: String,
    cluster: String,
}

/// events.csv (servers): phase,t_s,fault,event,target,member,pid,cluster (the first 10,000).
fn events(dir: &Path) -> Vec<Event> {
    let t = match crate::report::csv::Table::read(&dir.join("events.csv")) {
        Ok(t) => t.unwrap_or_default(),
        Err(e) => {
            errln!("warning: {e}");
            return vec![];
        }
    };
    t.rows()
        .take(10_000)
        .filter_map(|r| {
            Some(Event {
                t: r.num("t_s")?,
                event: r.get("event").to_string(),
                member: r.get("member").to_string(),
                pid: r.get("pid").to_string(),
                cluster: r.get("cluster").to_string(),
            })
        })
        .collect()
}

/// Servers: writes acknowledged (and indeterminate) per 100 ms from writes-<w>.csv
/// (seq,outcome,t_s), all writers together, with the faults marked.
fn timeline(p: &mut Page, dir: &Path, events: &[Event]) {
    const BUCKET: f64 = 0.1;
    let mut ok: Vec<u64> = vec![];
    let mut unsure: Vec<u64> = vec![];
    let read = crate::report::durability_files::read_writes(dir, MAX_LOG_LINES, |_, row| {
        // Bounded: an hour of 100 ms buckets at most.
        let b = (row.t_s / BUCKET).floor().clamp(0.0, 36_000.0) as usize;
        let series = match row.outcome {
            "ok" => &mut ok,
            "indeterminate" => &mut unsure,
            _ => return,
        };
        if series.len() <= b {
            series.resize(b + 1, 0);
        }
        series[b] += 1;
    });
    // The last bucket is cut short by the end of the writes: drawn, it would look like a fall.
    let n = ok.len().max(unsure.len()).saturating_sub(1);
    ok.truncate(n);
    unsure.truncate(n);
    if ok.is_empty() && unsure.is_empty() {
        return;
    }
    let per_s = |v: &[u64]| -> Vec<(f64, f64)> {
        v.iter()
            .enumerate()
            .map(|(i, n)| ((i as f64 + 0.5) * BUCKET, *n as f64 / BUCKET))
            .collect()
    };
    let mut c = LineChart::new(
        "durability-writes",
        "writes per second by outcome",
        "time since the writes started (s)",
        "writes/s",
    );
    c.series
        .push(Series::new("acknowledged", downsample(per_s(&ok))));
    if unsure.iter().any(|n| *n > 0) {
        c.series
            .push(Series::new("indeterminate", downsample(per_s(&unsure))));
    }
    // The faults themselves; "answered" (a member back) stays in the table, its label would
    // sit on the restart's.
    for e in events.iter().filter(|e| e.event != "answered") {
        c.vlines.push((e.t, format!("{} {}", e.event, e.member)));
    }
    p.h2("Writes over time");
    p.figure(
        "durability-writes",
        c.svg(),
        &format!(
            "Writes per {:.0} ms bucket, from writes-<w>.csv{}.",
            BUCKET * 1000.0,
            if read.cut {
                format!(" (the first {MAX_LOG_LINES} lines)")
            } else {
                String::new()
            }
        ),
    );
}
