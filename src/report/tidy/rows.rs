//! One run directory's rows: one per phase × operation (and one `ALL` row per phase with the
//! phase's figures over every store call), each carrying the run's and the phase's variables
//! from manifest.json. Every figure is taken from summary.json as it is written there (the
//! same JSON number, never parsed into a model and printed again, never recomputed), so a
//! table of an older kvmeter's runs reads what that version wrote; the one sum is `errors`, the
//! operation's error kinds added up (summary.json keeps them by kind only).

use crate::error::UsageError;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A row: column name to value (a JSON scalar; absent = empty cell).
pub type Row = BTreeMap<String, Value>;

/// The name of the row of a phase's figures over all its store calls (summary.json's
/// `all_ops` and the phase's throughput), beside the rows of each operation.
pub const ALL: &str = "ALL";

/// Latency fields of summary.json, in column order (each column `<prefix>_<field>_us`).
pub const LATENCY_FIELDS: [&str; 8] = ["min", "avg", "p50", "p90", "p99", "p99_9", "p99_99", "max"];
/// The latency objects of an operation and the column prefix of each: service time from the
/// send (`latency_us`), from the intended start (paced and open-loop runs), misses, failed
/// calls.
pub const LATENCIES: [(&str, &str); 4] = [
    ("latency_us", "latency"),
    ("intended_latency_us", "intended"),
    ("missed_latency_us", "missed"),
    ("failed_latency_us", "failed"),
];

/// How deep a nested object (telemetry, energy, engine) is flattened into `a.b.c` columns.
const MAX_NESTING: usize = 6;

/// The columns every table has first, in this order; the others follow sorted by name.
pub fn fixed_columns() -> Vec<String> {
    let mut c: Vec<String> = [
        "run_dir",
        "run_status",
        "point",
        "repetition",
        "phase",
        "phase_kind",
        "phase_outcome",
        "operation",
        "store",
        "store_version",
        "threads",
        "connections",
        "depth",
        "arrival",
        "rate",
        "target_ops_per_s",
        "seed",
        "workload_files",
        "planned_operations",
        "duration_s",
        "warmup_seconds",
        "warmup_operations",
        "measured_seconds",
        "throughput_ops_per_s",
        "throughput_mb_per_s",
        "phase_operations",
        "phase_errors",
        "not_applicable",
        "count",
        "ok",
        "errors",
        "hits",
        "misses",
        "hit_ratio",
        "ops_per_s",
        "mb_per_s",
    ]
    .map(String::from)
    .to_vec();
    for (_, prefix) in LATENCIES {
        for f in LATENCY_FIELDS {
            c.push(format!("{prefix}_{f}_us"));
        }
    }
    c
}

/// One run directory's two files, parsed, with the names its complaints use.
pub struct RunFiles<'a> {
    /// The run directory as shown in the `run_dir` column.
    pub run_dir: &'a str,
    pub manifest: &'a Value,
    pub summary: &'a Value,
    /// summary.json's path, for a complaint about it.
    pub summary_name: &'a str,
    pub manifest_name: &'a str,
}

/// A JSON object's member as a cell: a scalar as it is, null where absent; an array or object
/// where a scalar belongs is refused with the file and key.
fn scalar(obj: &Map<String, Value>, key: &str, file: &str, at: &str) -> Result<Value, UsageError> {
    match obj.get(key) {
        None => Ok(Value::Null),
        Some(Value::Array(_) | Value::Object(_)) => Err(UsageError::new(format!(
            "{file}: {at}{key}: expected a number, text or true/false; is it a file kvmeter wrote?"
        ))),
        Some(v) => Ok(v.clone()),
    }
}

/// `v` as an object, or a complaint naming the file and key.
fn object<'v>(v: &'v Value, file: &str, at: &str) -> Result<&'v Map<String, Value>, UsageError> {
    v.as_object().ok_or_else(|| {
        UsageError::new(format!(
            "{file}: {at}: expected an object; is it a file kvmeter wrote?"
        ))
    })
}

/// A nested object's scalars as `prefix.key.key` columns (arrays are left out: per-CPU and
/// per-event lists belong in the run's own files, not in a tidy row).
fn flatten(prefix: &str, v: &Value, row: &mut Row, depth: usize) {
    match v {
        Value::Object(m) if depth < MAX_NESTING => {
            for (k, x) in m {
                flatten(&format!("{prefix}.{k}"), x, row, depth + 1);
            }
        }
        Value::Object(_) | Value::Array(_) | Value::Null => {}
        _ => {
            row.insert(prefix.to_string(), v.clone());
        }
    }
}

/// The store's own statistics over a phase (summary.json's `store_stats`): `store.<name>` is a
/// counter's increase or a gauge's value at the end, `store.<name>.max` a gauge's highest
/// sample; then `store.write_amplification` and `store.cache_hit_ratio`. Units are in
/// docs/run-directory.md, not in the cells.
fn store_columns(ss: &Map<String, Value>, row: &mut Row) {
    if let Some(stats) = ss.get("stats").and_then(Value::as_object) {
        for (name, f) in stats {
            if let Some(v) = f.get("increase").or_else(|| f.get("end")) {
                row.insert(format!("store.{name}"), v.clone());
            }
            if let Some(v) = f.get("max") {
                row.insert(format!("store.{name}.max"), v.clone());
            }
        }
    }
    for key in ["write_amplification", "cache_hit_ratio"] {
        if let Some(v) = ss.get(key).filter(|v| !v.is_null()) {
            row.insert(format!("store.{key}"), v.clone());
        }
    }
}

/// The columns every row of a run shares: the run, the store and its options, the machine.
fn run_columns(f: &RunFiles) -> Result<Row, UsageError> {
    let m = object(f.manifest, f.manifest_name, "(the file)")?;
    let s = object(f.summary, f.summary_name, "(the file)")?;
    let mut row = Row::new();
    row.insert("run_dir".into(), Value::String(f.run_dir.to_string()));
    row.insert(
        "run_status".into(),
        scalar(s, "status", f.summary_name, "")?,
    );
    row.insert("seed".into(), scalar(s, "seed", f.summary_name, "")?);
    row.insert("run.error".into(), scalar(s, "error", f.summary_name, "")?);
    for k in [
        "kvmeter_version",
        "git_revision",
        "started_at",
        "finished_at",
    ] {
        row.insert(format!("run.{k}"), scalar(m, k, f.manifest_name, "")?);
    }
    if let Some(plan) = m.get("plan") {
        let plan = object(plan, f.manifest_name, "plan")?;
        row.insert(
            "run.command".into(),
            scalar(plan, "command", f.manifest_name, "plan.")?,
        );
    }
    if let Some(store) = m.get("store") {
        let store = object(store, f.manifest_name, "store")?;
        row.insert(
            "store".into(),
            scalar(store, "name", f.manifest_name, "store.")?,
        );
        row.insert(
            "store_version".into(),
            scalar(store, "version", f.manifest_name, "store.")?,
        );
        if let Some(o) = store.get("options") {
            for (k, v) in object(o, f.manifest_name, "store.options")? {
                flatten(&format!("store-opt.{k}"), v, &mut row, MAX_NESTING);
            }
        }
        if let Some(server) = store.get("server") {
            let server = object(server, f.manifest_name, "store.server")?;
            for k in ["version", "managed"] {
                row.insert(
                    format!("server.{k}"),
                    scalar(server, k, f.manifest_name, "store.server.")?,
                );
            }
        }
    }
    if let Some(machine) = m.get("machine") {
        flatten("machine", machine, &mut row, 1);
    }
    row.retain(|_, v| !v.is_null());
    Ok(row)
}

/// The plan's entry for phase `name` (manifest.json's plan.phases), if there is one.
fn plan_phase<'m>(manifest: &'m Value, name: &str) -> Option<&'m Map<String, Value>> {
    manifest["plan"]["phases"]
        .as_array()?
        .iter()
        .filter_map(Value::as_object)
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
}

/// A phase's columns: its variables (plan and summary) and its figures over all operations.
fn phase_columns(f: &RunFiles, p: &Map<String, Value>, at: &str) -> Result<Row, UsageError> {
    let file = f.summary_name;
    let mut row = Row::new();
    let fixed = [
        ("name", "phase"),
        ("kind", "phase_kind"),
        ("outcome", "phase_outcome"),
        ("threads", "threads"),
        ("target_ops_per_s", "target_ops_per_s"),
        ("warmup_seconds", "warmup_seconds"),
        ("warmup_operations", "warmup_operations"),
        ("measured_seconds", "measured_seconds"),
        ("throughput_ops_per_s", "throughput_ops_per_s"),
        ("throughput_mb_per_s", "throughput_mb_per_s"),
        ("operations", "phase_operations"),
        ("errors", "phase_errors"),
        ("error", "phase_error"),
        ("window_note", "window_note"),
    ];
    for (key, col) in fixed {
        row.insert(col.into(), scalar(p, key, file, at)?);
    }
    if let Some(e) = p.get("engine").and_then(Value::as_object) {
        row.insert(
            "connections".into(),
            scalar(e, "connections", file, &format!("{at}engine."))?,
        );
        row.insert(
            "depth".into(),
            scalar(e, "depth", file, &format!("{at}engine."))?,
        );
    }
    if let Some(files) = p.get("workload_files").and_then(Value::as_array) {
        let names: Vec<&str> = files.iter().filter_map(Value::as_str).collect();
        row.insert("workload_files".into(), Value::String(names.join(";")));
    }
    // Nested figures, each object's scalars under its own name (`telemetry.cpu.busy`).
    for key in [
        "telemetry",
        "energy",
        "open_loop",
        "kvmeter_cpu",
        "engine",
        "pressure",
        "sent_to",
        "storage_io",
        "per_op",
    ] {
        if let Some(v) = p.get(key) {
            flatten(key, v, &mut row, 1);
        }
    }
    if let Some(ss) = p.get("store_stats").and_then(Value::as_object) {
        store_columns(ss, &mut row);
    }
    let name = p.get("name").and_then(Value::as_str).unwrap_or("");
    if let Some(plan) = plan_phase(f.manifest, name) {
        let pf = f.manifest_name;
        row.insert(
            "planned_operations".into(),
            scalar(plan, "operations", pf, "plan.phases[].")?,
        );
        row.insert(
            "duration_s".into(),
            scalar(plan, "duration", pf, "plan.phases[].")?,
        );
        if let Some(ol) = plan.get("open_loop").and_then(Value::as_object) {
            row.insert(
                "rate".into(),
                scalar(ol, "rate", pf, "plan.phases[].open_loop.")?,
            );
            row.insert(
                "arrival".into(),
                scalar(ol, "arrival", pf, "plan.phases[].open_loop.")?,
            );
        }
        if let Some(w) = plan.get("workload").and_then(Value::as_object) {
            for (k, v) in w {
                flatten(&format!("p.{k}"), v, &mut row, MAX_NESTING);
            }
        }
    }
    Ok(row)
}

/// One operation's columns from its entry in the phase's `ops`.
fn op_columns(op: &Map<String, Value>, file: &str, at: &str) -> Result<Row, UsageError> {
    let mut row = Row::new();
    for k in [
        "count",
        "ok",
        "hits",
        "misses",
        "hit_ratio",
        "ops_per_s",
        "mb_per_s",
    ] {
        row.insert(k.into(), scalar(op, k, file, at)?);
    }
    if let Some(errors) = op.get("errors") {
        let mut total = 0u64;
        for (kind, n) in object(errors, file, &format!("{at}errors"))? {
            let n = n.as_u64().ok_or_else(|| {
                UsageError::new(format!("{file}: {at}errors.{kind}: expected a count"))
            })?;
            total = total.saturating_add(n);
            row.insert(format!("errors.{kind}"), n.into());
        }
        row.insert("errors".into(), total.into());
    }
    latency_columns(op, file, at, &mut row)?;
    Ok(row)
}

/// `latency_p99_us`, `intended_p99_us`, ... from the latency objects present; a latency of no
/// samples (`count` 0: null figures, or the zeros an older kvmeter wrote) leaves its cells empty.
fn latency_columns(
    obj: &Map<String, Value>,
    file: &str,
    at: &str,
    row: &mut Row,
) -> Result<(), UsageError> {
    for (key, prefix) in LATENCIES {
        let Some(l) = obj.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let l = object(l, file, &format!("{at}{key}"))?;
        if l.get("count").and_then(Value::as_u64) == Some(0) {
            continue;
        }
        for f in LATENCY_FIELDS {
            row.insert(
                format!("{prefix}_{f}_us"),
                scalar(l, f, file, &format!("{at}{key}."))?,
            );
        }
    }
    Ok(())
}

/// The longest operation name accepted (kvmeter's longest is `READ-MODIFY-WRITE`, 17 bytes).
pub const MAX_OP_NAME: usize = 64;

/// An operation name as kvmeter writes them: 1 to 64 ASCII letters, digits, `_` or `-`. Any
/// other key of a phase's `ops` (a path, control characters, a megabyte of text) is refused
/// with the file and key, so a hand-made summary cannot pass off arbitrary keys as rows.
fn check_op_name(name: &str, file: &str, at: &str) -> Result<(), UsageError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name.is_empty() && name.len() <= MAX_OP_NAME && name.chars().all(ok) {
        return Ok(());
    }
    let shown: String = name.chars().take(MAX_OP_NAME).collect();
    let more = if shown.len() < name.len() { "…" } else { "" };
    Err(UsageError::new(format!(
        "{file}: {at}ops: key {shown:?}{more} is not an operation name (expected 1 to {MAX_OP_NAME} ASCII letters, digits, '_' or '-'); is it a file kvmeter wrote?"
    )))
}

/// Every row of one run directory, collected (for tests and small callers; the table streams
/// through `for_each_row`).
pub fn rows(f: &RunFiles) -> Result<Vec<Row>, UsageError> {
    let mut out = vec![];
    for_each_row::<UsageError>(f, &mut |r| {
        out.push(r);
        Ok(())
    })?;
    Ok(out)
}

/// Every row of one run directory, in order, each handed to `each` as soon as it is made and
/// never kept here: a run of 320,000 operations costs one row at a time, not 320,000.
pub fn for_each_row<E: From<UsageError>>(
    f: &RunFiles,
    each: &mut dyn FnMut(Row) -> Result<(), E>,
) -> Result<(), E> {
    let run = run_columns(f)?;
    let file = f.summary_name;
    let phases = match &f.summary["phases"] {
        Value::Array(a) => a,
        Value::Null => return Ok(()),
        _ => return Err(UsageError::new(format!("{file}: phases: expected a list")).into()),
    };
    let empty = Map::new();
    for (i, p) in phases.iter().enumerate() {
        let at = format!("phases[{i}].");
        let p = object(p, file, &format!("phases[{i}]"))?;
        // A clear phase empties the store: it has no operations to tabulate.
        if p.get("kind").and_then(Value::as_str) == Some("clear") {
            continue;
        }
        let mut base = run.clone();
        base.extend(phase_columns(f, p, &at)?);
        let not_applicable: Vec<&str> = p
            .get("not_applicable")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ops = match p.get("ops") {
            None | Some(Value::Null) => &empty,
            Some(o) => object(o, file, &format!("{at}ops"))?,
        };
        for (name, op) in ops {
            check_op_name(name, file, &at)?;
            let op_at = format!("{at}ops.{name}.");
            let mut row = base.clone();
            row.insert("operation".into(), Value::String(name.clone()));
            row.insert(
                "not_applicable".into(),
                not_applicable.contains(&name.as_str()).into(),
            );
            row.extend(op_columns(
                object(op, file, &format!("{at}ops.{name}"))?,
                file,
                &op_at,
            )?);
            row.retain(|_, v| !v.is_null());
            each(row)?;
        }
        let mut all = all_row(base, p, file, &at)?;
        all.retain(|_, v| !v.is_null());
        each(all)?;
    }
    Ok(())
}

/// The phase's row over every store call: `all_ops`' count and latencies, the phase's
/// throughput and error count. A phase that ended before any operation still gets this row,
/// so its outcome and error show in the table.
fn all_row(mut row: Row, p: &Map<String, Value>, file: &str, at: &str) -> Result<Row, UsageError> {
    row.insert("operation".into(), Value::String(ALL.into()));
    row.insert(
        "ops_per_s".into(),
        scalar(p, "throughput_ops_per_s", file, at)?,
    );
    row.insert(
        "mb_per_s".into(),
        scalar(p, "throughput_mb_per_s", file, at)?,
    );
    row.insert("errors".into(), scalar(p, "errors", file, at)?);
    if let Some(a) = p.get("all_ops").filter(|v| !v.is_null()) {
        let a_at = format!("{at}all_ops.");
        let a = object(a, file, &format!("{at}all_ops"))?;
        row.insert("count".into(), scalar(a, "count", file, &a_at)?);
        latency_columns(a, file, &a_at, &mut row)?;
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn files<'a>(m: &'a Value, s: &'a Value) -> RunFiles<'a> {
        RunFiles {
            run_dir: "runs/r1",
            manifest: m,
            summary: s,
            summary_name: "runs/r1/summary.json",
            manifest_name: "runs/r1/manifest.json",
        }
    }

    #[test]
    fn one_row_per_operation_and_one_for_all_with_values_as_written() {
        let m = json!({"store": {"name": "sqlite", "version": "3", "options": {"sync": "off"}},
            "machine": {"cpu_model": "X", "logical_cpus": 2, "cpu_affinity": [0, 1]},
            "plan": {"command": "run", "phases": [{"name": "run", "operations": 100, "duration": null,
                "open_loop": {"rate": 500.0, "arrival": "poisson"}, "workload": {"recordcount": 10}}]}});
        let lat = json!({"count": 3, "min": 1.5, "avg": 2.25, "p50": 2.0, "p90": 3.0, "p99": 3.0,
            "p99_9": 3.0, "p99_99": 3.0, "max": 3.5});
        let s = json!({"status": "completed", "seed": 7, "phases": [
            {"name": "clear", "kind": "clear"},
            {"name": "run", "kind": "run", "threads": 2, "throughput_ops_per_s": 123.456,
             "errors": 1, "not_applicable": ["SCAN"],
             "energy": {"source": "estimate", "estimate": true, "energy_j": 5.0},
             "store_stats": {"stats": {"flushes": {"kind": "counter", "unit": "count", "increase": 3},
                 "l0_files": {"kind": "gauge", "unit": "files", "end": 2, "max": 5}},
                 "write_amplification": 2.5, "write_amplification_source": "x",
                 "cache_hit_ratio": null},
             "ops": {"READ": {"count": 4, "ok": 3, "errors": {"timeout": 1},
                              "ops_per_s": 0.1, "latency_us": lat.clone()},
                     "SCAN": {"count": 0, "ok": 0, "errors": {}, "ops_per_s": 0.0}},
             "all_ops": {"count": 4, "latency_us": lat}}]});
        let rows = rows(&files(&m, &s)).unwrap();
        let ops: Vec<&str> = rows
            .iter()
            .map(|r| r["operation"].as_str().unwrap())
            .collect();
        assert_eq!(ops, ["READ", "SCAN", "ALL"]);
        let read = &rows[0];
        assert_eq!(read["errors"], 1);
        assert_eq!(read["errors.timeout"], 1);
        assert_eq!(read["latency_p50_us"], 2.0);
        assert_eq!(read["store-opt.sync"], "off");
        assert_eq!(read["machine.logical_cpus"], 2);
        assert!(!read.contains_key("machine.cpu_affinity"));
        assert_eq!(read["p.recordcount"], 10);
        assert_eq!(read["rate"], 500.0);
        assert_eq!(read["energy.estimate"], true);
        assert_eq!(
            (
                &read["store.flushes"],
                &read["store.l0_files"],
                &read["store.l0_files.max"]
            ),
            (&json!(3), &json!(2), &json!(5))
        );
        assert_eq!(read["store.write_amplification"], 2.5);
        assert!(
            !read.contains_key("store.cache_hit_ratio"),
            "null is an empty cell"
        );
        assert_eq!(read["not_applicable"], false);
        assert_eq!(rows[1]["not_applicable"], true);
        assert!(!rows[1].contains_key("duration_s"), "null is an empty cell");
        assert_eq!(rows[2]["ops_per_s"], 123.456);
        assert_eq!(rows[2]["count"], 4);
        assert_eq!(rows[2]["errors"], 1);
    }

    #[test]
    fn a_latency_of_no_samples_is_empty_whether_written_null_or_zero() {
        let zeros = json!({"count": 0, "min": 0.0, "avg": 0.0, "p50": 0.0, "p90": 0.0,
            "p99": 0.0, "p99_9": 0.0, "p99_99": 0.0, "max": 0.0});
        let nulls = json!({"count": 0, "min": null, "avg": null, "p50": null, "p90": null,
            "p99": null, "p99_9": null, "p99_99": null, "max": null});
        let missed = json!({"count": 5, "min": 1.0, "avg": 2.0, "p50": 2.0, "p90": 3.0,
            "p99": 3.0, "p99_9": 3.0, "p99_99": 3.0, "max": 3.0});
        for lat in [zeros, nulls] {
            let s = json!({"phases": [{"name": "run", "kind": "run", "ops": {"READ": {
                "count": 5, "ok": 0, "errors": {"not_found": 5}, "hits": 0, "misses": 5,
                "hit_ratio": 0.0, "latency_us": lat, "missed_latency_us": missed}}}]});
            let rows = rows(&files(&json!({}), &s)).unwrap();
            let read = &rows[0];
            for f in LATENCY_FIELDS {
                assert!(!read.contains_key(&format!("latency_{f}_us")), "{f}");
            }
            assert_eq!(read["missed_p99_us"], 3.0);
            assert_eq!((&read["hits"], &read["misses"]), (&json!(0), &json!(5)));
            assert_eq!(read["hit_ratio"], 0.0);
        }
    }

    #[test]
    fn a_bad_key_is_named_with_its_file() {
        let m = json!({});
        let s = json!({"phases": [{"name": "run", "ops": {"READ": {"count": [1]}}}]});
        let e = rows(&files(&m, &s)).unwrap_err();
        assert_eq!(
            e.0,
            "runs/r1/summary.json: phases[0].ops.READ.count: expected a number, text or true/false; is it a file kvmeter wrote?"
        );
        let s = json!({"phases": [{"name": "run", "ops": {"READ": {"errors": {"io": -1}}}}]});
        let e = rows(&files(&m, &s)).unwrap_err();
        assert!(
            e.0.contains("phases[0].ops.READ.errors.io: expected a count"),
            "{e}"
        );
        let s = json!({"phases": {"run": 1}});
        assert!(rows(&files(&m, &s))
            .unwrap_err()
            .0
            .contains("phases: expected a list"));
    }

    #[test]
    fn an_operation_name_is_letters_digits_underscore_or_dash() {
        let m = json!({});
        let op = json!({"count": 1, "ok": 1});
        for good in [
            "READ",
            "READ-MODIFY-WRITE",
            "op_2",
            &"A".repeat(MAX_OP_NAME),
        ] {
            let s = json!({"phases": [{"name": "run", "ops": {good: op.clone()}}]});
            assert_eq!(rows(&files(&m, &s)).unwrap()[0]["operation"], good);
        }
        let long = "B".repeat(MAX_OP_NAME + 1);
        for bad in ["", "../x", "READ ALL", "a\nb", "ÉCRIRE", &long] {
            let s = json!({"phases": [{"name": "run", "ops": {bad: op.clone()}}]});
            let e = rows(&files(&m, &s)).unwrap_err().0;
            assert!(
                e.starts_with("runs/r1/summary.json: phases[0].ops: key \""),
                "{e}"
            );
            assert!(e.contains("is not an operation name"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
