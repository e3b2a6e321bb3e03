//! The terminal's lines for a phase's profile (`--profile`, issue 44): what was sampled and
//! what it cost, then each group's share and its top functions, or why it has none.

use crate::telemetry::profile::ProfileFigures;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Folded files read per side for a differential flame graph, at most (each bounded below).
const MAX_FOLDED_BYTES: u64 = 64 * 1024 * 1024;

/// Functions named per group on the terminal (summary.json has ten).
const SHOWN: usize = 3;

pub fn lines(f: &ProfileFigures) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  profile  {} samples of {} at {} Hz (perf's own CPU {:.1} % of one CPU), flame graphs in profile/",
        f.samples, f.event, f.frequency_hz, f.cost_pct_of_one_cpu
    );
    for (name, g) in &f.groups {
        let Some(share) = g.share_pct else {
            let why = g.too_few.as_deref().unwrap_or("no shares");
            let _ = writeln!(out, "           {name}: {why}");
            continue;
        };
        let top: Vec<String> = g
            .top
            .iter()
            .take(SHOWN)
            .map(|t| format!("{} {:.0} %", short(&t.function), t.self_pct))
            .collect();
        let _ = writeln!(
            out,
            "           {name} {share:.0} % of samples ({:.0} % in the kernel): {}",
            g.kernel_pct.unwrap_or(0.0),
            top.join(", ")
        );
    }
    for n in &f.notes {
        let _ = writeln!(out, "           note: {n}");
    }
    out
}

/// A function's name cut to 60 characters for the terminal (C++ templates run to hundreds).
fn short(name: &str) -> String {
    match name.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_string(),
    }
}

/// Every `profile/*.folded` of the runs on one side, by file name, the runs' stacks together.
fn folded_by_name(runs: &[PathBuf]) -> BTreeMap<String, Vec<u8>> {
    let mut by = BTreeMap::<String, Vec<u8>>::new();
    for run in runs {
        let Ok(dir) = std::fs::read_dir(run.join("profile")) else {
            continue;
        };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".folded") {
                continue;
            }
            let mut bytes = Vec::new();
            if let Ok(f) = std::fs::File::open(e.path()) {
                let _ = f.take(MAX_FOLDED_BYTES).read_to_end(&mut bytes);
            }
            let all = by.entry(name).or_default();
            all.extend_from_slice(&bytes);
            if !all.ends_with(b"\n") && !all.is_empty() {
                all.push(b'\n');
            }
        }
    }
    by
}

/// `kvmeter compare`: differential flame graphs (B against A) for each phase and group that
/// both sides profiled, under `out/profile-diff/`: `<phase>.<group>.b.svg` on B's stacks (what
/// B does more) and `.a.svg` on A's (what B does less, or no longer). Returns the files
/// written, or why none.
pub fn differential(a: &[PathBuf], b: &[PathBuf], out: &Path) -> Result<Vec<String>, String> {
    let (fa, fb) = (folded_by_name(a), folded_by_name(b));
    let both: Vec<&String> = fa.keys().filter(|k| fb.contains_key(*k)).collect();
    if both.is_empty() {
        return Ok(vec![]);
    }
    let dir = out.join("profile-diff");
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = vec![];
    for name in both {
        let stem = name.trim_end_matches(".folded");
        for (side, shapes_of_a) in [("b", false), ("a", true)] {
            let file = format!("profile-diff/{stem}.{side}.svg");
            let title = format!(
                "{stem}: B against A, {}'s stacks (red: more of B's samples, blue: fewer)",
                side.to_uppercase()
            );
            crate::telemetry::profile::differential(
                &fa[name],
                &fb[name],
                shapes_of_a,
                &title,
                &out.join(&file),
            )
            .map_err(|e| format!("{file}: {e}"))?;
            written.push(file);
        }
    }
    Ok(written)
}
