//! Finding run directories below the DIRs given to `kvmeter table`: a run directory is one
//! holding both manifest.json and summary.json. The walk is bounded (depth, entries read, runs
//! found) and never follows a symbolic link below a DIR, because the directories may come from
//! anywhere (a colleague's tarball, a shared disk) and a link loop or a huge tree must end in
//! one line, not a hang. The DIRs themselves are followed: the user named them.
//!
//! A compare directory holds no runs, only compare.json naming them (`a_runs`, `b_runs`, as
//! given to `kvmeter compare`, so relative to where it ran): those runs are taken from there,
//! marked with their side, and one that is not a run directory from here is refused with the
//! compare.json key that names it.

use crate::error::UsageError;
use std::path::{Path, PathBuf};

/// How deep below a DIR the walk looks (an experiment's sweep step is
/// `steps/NAME/points/POINT/rN`, five levels; a capacity step one more).
pub const MAX_DEPTH: usize = 12;
/// Directory entries read in all, over every DIR.
pub const MAX_ENTRIES: usize = 500_000;
/// Run directories found in all.
pub const MAX_RUNS: usize = 20_000;

/// A run a compare directory named: the compare directory and the side (A or B).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    pub compare_dir: PathBuf,
    pub side: &'static str,
}

/// One run directory found.
#[derive(Debug, PartialEq, Eq)]
pub struct FoundRun {
    pub dir: PathBuf,
    /// Set when a compare directory named this run.
    pub side: Option<Side>,
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Found {
    /// Run directories, as the DIR given joined with the path below it, in walk order (each
    /// directory's entries by name, so the order is the same on every file system); each run
    /// once, however many DIRs or compares reach it.
    pub runs: Vec<FoundRun>,
    /// Directories with a manifest.json but no summary.json (a run killed before its first
    /// phase ended writes none): not runs, counted for the note on stderr.
    pub without_summary: Vec<PathBuf>,
}

/// Walks every DIR; a DIR that is not a directory is refused before anything is read.
pub fn run_dirs(dirs: &[PathBuf]) -> Result<Found, UsageError> {
    for d in dirs {
        if !d.is_dir() {
            return Err(UsageError::new(format!(
                "{}: not a directory; give run, sweep, capacity, experiment or compare directories",
                d.display()
            )));
        }
    }
    let mut found = Found::default();
    let mut entries = 0usize;
    for d in dirs {
        walk(d, &mut found, &mut entries)?;
    }
    dedup(&mut found.runs);
    Ok(found)
}

/// Keeps each run once (by its canonical path), with the side a compare gave it.
fn dedup(runs: &mut Vec<FoundRun>) {
    let mut seen: std::collections::HashMap<PathBuf, usize> = Default::default();
    let mut out: Vec<FoundRun> = vec![];
    for r in runs.drain(..) {
        let key = r.dir.canonicalize().unwrap_or_else(|_| r.dir.clone());
        match seen.get(&key) {
            Some(&i) => {
                if out[i].side.is_none() {
                    out[i].side = r.side;
                }
            }
            None => {
                seen.insert(key, out.len());
                out.push(r);
            }
        }
    }
    *runs = out;
}

/// The runs compare.json names, each checked to be a run directory from here.
fn compare_runs(dir: &Path, found: &mut Found) -> Result<(), UsageError> {
    let file = dir.join("compare.json");
    let v = super::read_json(&file, "kvmeter-compare/")?;
    for (key, side) in [("a_runs", "A"), ("b_runs", "B")] {
        let list = v[key].as_array().ok_or_else(|| {
            UsageError::new(format!(
                "{}: {key}: expected a list of run directories",
                file.display()
            ))
        })?;
        for (i, p) in list.iter().enumerate() {
            let run = p.as_str().map(PathBuf::from).filter(|p| is_run(p)).ok_or_else(|| {
                UsageError::new(format!(
                    "{}: {key}[{i}]: {p} is not a run directory (manifest.json with summary.json) from here; run kvmeter table where kvmeter compare ran",
                    file.display()
                ))
            })?;
            if found.runs.len() >= MAX_RUNS {
                return Err(UsageError::new(format!(
                    "{}: more than {MAX_RUNS} run directories; name fewer",
                    file.display()
                )));
            }
            found.runs.push(FoundRun {
                dir: run,
                side: Some(Side {
                    compare_dir: dir.to_path_buf(),
                    side,
                }),
            });
        }
    }
    Ok(())
}

fn is_run(dir: &Path) -> bool {
    dir.join("manifest.json").is_file() && dir.join("summary.json").is_file()
}

/// Depth-first, entries sorted by name. A run directory is not searched further: what lies
/// below one (latency/, figures/, ycsb/) is that run's own files.
fn walk(root: &Path, found: &mut Found, entries: &mut usize) -> Result<(), UsageError> {
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if is_run(&dir) {
            if found.runs.len() >= MAX_RUNS {
                return Err(UsageError::new(format!(
                    "{}: more than {MAX_RUNS} run directories below; name fewer or smaller directories",
                    root.display()
                )));
            }
            found.runs.push(FoundRun { dir, side: None });
            continue;
        }
        if dir.join("compare.json").is_file() {
            compare_runs(&dir, found)?;
        }
        if dir.join("manifest.json").is_file() {
            found.without_summary.push(dir.clone());
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        // An unreadable directory (permissions) is passed over: it holds nothing we can read.
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut subdirs = vec![];
        for e in rd {
            *entries += 1;
            if *entries > MAX_ENTRIES {
                return Err(UsageError::new(format!(
                    "{}: more than {MAX_ENTRIES} directory entries below; name the run, sweep or experiment directories themselves",
                    root.display()
                )));
            }
            let Ok(e) = e else { continue };
            // file_type() does not follow a symbolic link: a link is neither a dir nor walked.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                subdirs.push(e.file_name());
            }
        }
        subdirs.sort();
        // Reversed onto the stack, so the first name by order is walked first.
        for name in subdirs.into_iter().rev() {
            stack.push((dir.join(name), depth + 1));
        }
    }
    Ok(())
}

/// A sweep's or a capacity search's run: its point's number and its repetition (from 1), read
/// from where those commands put each run — a sweep `ROOT/points/NN-LABEL/rK` beside
/// `ROOT/index.csv`, a capacity search `ROOT/points/NN-RATEops-rK` beside `ROOT/capacity.csv`
/// (experiment/sweep.rs, experiment/capacity). `None` for any other run.
pub fn position(dir: &Path) -> Option<(u64, u64)> {
    let name = |p: &Path| p.file_name()?.to_str().map(str::to_string);
    let number = |s: &str| s.parse::<u64>().ok().filter(|n| *n > 0);
    let leading = |s: &str| number(s.split('-').next()?);
    let leaf = name(dir)?;
    let parent = dir.parent()?;
    // A sweep: rK in NN-LABEL in points.
    if let Some(k) = leaf.strip_prefix('r').and_then(number) {
        let points = parent.parent()?;
        if name(points)? == "points" && points.parent()?.join("index.csv").is_file() {
            return Some((leading(&name(parent)?)?, k));
        }
    }
    // A capacity search: NN-RATEops-rK in points.
    let (head, k) = leaf.rsplit_once("ops-r")?;
    if name(parent)? == "points" && parent.parent()?.join("capacity.csv").is_file() {
        return Some((leading(head)?, number(k)?));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweeps_and_a_capacity_searchs_runs_have_their_point_and_repetition() {
        let t = tempfile::tempdir().unwrap();
        let sw = t.path().join("sw");
        let run = sw.join("points/02-threads=4/r3");
        std::fs::create_dir_all(&run).unwrap();
        assert_eq!(position(&run), None, "no index.csv: not a sweep");
        std::fs::write(sw.join("index.csv"), "").unwrap();
        assert_eq!(position(&run), Some((2, 3)));
        let cap = t.path().join("cap");
        let run = cap.join("points/05-2000ops-r2");
        std::fs::create_dir_all(&run).unwrap();
        assert_eq!(position(&run), None);
        std::fs::write(cap.join("capacity.csv"), "").unwrap();
        assert_eq!(position(&run), Some((5, 2)));
        assert_eq!(position(&t.path().join("r1")), None);
    }

    fn run(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("manifest.json"), "{}").unwrap();
        std::fs::write(dir.join("summary.json"), "{}").unwrap();
    }

    #[test]
    fn finds_runs_in_name_order_and_does_not_follow_links() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("sw");
        run(&root.join("points/02-b/r1"));
        run(&root.join("points/01-a/r2"));
        run(&root.join("points/01-a/r1"));
        // A run's own subdirectory is not searched.
        run(&root.join("points/01-a/r1/latency/inner"));
        std::fs::create_dir_all(root.join("killed")).unwrap();
        std::fs::write(root.join("killed/manifest.json"), "{}").unwrap();
        std::os::unix::fs::symlink(&root, root.join("points/loop")).unwrap();
        let f = run_dirs(std::slice::from_ref(&root)).unwrap();
        let rel: Vec<String> = f
            .runs
            .iter()
            .map(|p| p.dir.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(rel, ["points/01-a/r1", "points/01-a/r2", "points/02-b/r1"]);
        assert_eq!(f.without_summary, [root.join("killed")]);
    }

    #[test]
    fn a_run_directory_given_itself_is_one_run_and_a_file_is_refused() {
        let t = tempfile::tempdir().unwrap();
        run(t.path());
        let f = run_dirs(&[t.path().to_path_buf()]).unwrap();
        assert_eq!(
            f.runs,
            [FoundRun {
                dir: t.path().to_path_buf(),
                side: None
            }]
        );
        let e = run_dirs(&[t.path().join("manifest.json")]).unwrap_err();
        assert!(e.0.contains("manifest.json: not a directory"), "{e}");
    }

    #[test]
    fn a_compares_runs_are_taken_with_their_side_and_each_run_once() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("runs/a"), t.path().join("runs/b"));
        run(&a);
        run(&b);
        let cmp = t.path().join("cmp");
        std::fs::create_dir(&cmp).unwrap();
        let doc = serde_json::json!({"schema": "kvmeter-compare/2", "a_runs": [a], "b_runs": [b]});
        std::fs::write(cmp.join("compare.json"), doc.to_string()).unwrap();
        let f = run_dirs(&[t.path().join("runs"), cmp.clone()]).unwrap();
        let got: Vec<(PathBuf, Option<&str>)> = f
            .runs
            .iter()
            .map(|r| (r.dir.clone(), r.side.as_ref().map(|s| s.side)))
            .collect();
        assert_eq!(got, [(a.clone(), Some("A")), (b.clone(), Some("B"))]);
        let doc = serde_json::json!({"schema": "kvmeter-compare/2", "a_runs": [a], "b_runs": ["gone/r1"]});
        std::fs::write(cmp.join("compare.json"), doc.to_string()).unwrap();
        let e = run_dirs(&[cmp]).unwrap_err();
        assert!(
            e.0.contains("compare.json: b_runs[0]: \"gone/r1\" is not a run directory"),
            "{e}"
        );
    }

    #[test]
    fn depth_is_bounded() {
        let t = tempfile::tempdir().unwrap();
        let mut deep = t.path().to_path_buf();
        for i in 0..=MAX_DEPTH {
            deep = deep.join(format!("d{i}"));
        }
        run(&deep);
        assert!(run_dirs(&[t.path().to_path_buf()]).unwrap().runs.is_empty());
        run(deep.parent().unwrap());
        assert_eq!(run_dirs(&[t.path().to_path_buf()]).unwrap().runs.len(), 1);
    }
}
