//! The layer order of docs/architecture.md, enforced: each module imports only modules on the
//! lines below its own, never one above it or beside it, and nothing imports `cli`. A scan of
//! `crate::` paths (`use crate::{a, b::c}` groups included) in src/<module>.rs and src/<module>/;
//! comments are skipped. `main.rs` (the binary: `kvmeter::cli::main_with`) and `lib.rs` (the
//! `mod` lines) stand outside the order. A new top-level module fails here until it has a line.

use std::path::Path;

/// Top first. `error` has a line of its own: every leaf above it returns its `UsageError`.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["experiment", "distributed"],
    &["driver"],
    &["report"],
    &["fault", "args", "metrics"],
    &["plan", "doctor"],
    &["measure", "calibrate"],
    &["store", "workload", "telemetry", "antagonist", "trace"],
    &["record", "values", "machine", "panics"],
    &["error"],
    &["console"],
];

/// (file under src/, module it may import against the order, why). TEMPORARY: each goes when
/// the named branch lands; an entry no longer needed fails the test, so it is not forgotten.
const ALLOWED: &[(&str, &str, &str)] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|line| line.contains(&module))
}

/// The modules a file's `crate::` paths name, with their lines: `crate::a::b` and the
/// top-level names of a group, `crate::{a, b::{c, d}}` (which may span lines).
fn imports(text: &str) -> Vec<(usize, String)> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").to_string() + "\n")
        .collect();
    let mut out = vec![];
    for (i, _) in code.match_indices("crate::") {
        let line = code[..i].matches('\n').count() + 1;
        let after = &code[i + "crate::".len()..];
        let word = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let Some(group) = after.strip_prefix('{') else {
            out.push((line, word(after)));
            continue;
        };
        let (mut depth, mut first) = (0, true);
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => first = true,
                c if first && depth == 0 && !c.is_whitespace() => {
                    out.push((line, word(&group[j..])));
                    first = false;
                }
                _ => {}
            }
        }
    }
    out
}

pub fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_module_imports_one_above_or_beside_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let (mut bad, mut used) = (vec![], vec![false; ALLOWED.len()]);
    for path in files {
        let rel = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let module = rel.split('/').next().unwrap().trim_end_matches(".rs");
        if module == "main" || module == "lib" {
            continue;
        }
        let Some(own) = layer_of(module) else {
            bad.push(format!(
                "src/{rel}: module '{module}' has no line in LAYERS"
            ));
            continue;
        };
        for (line, to) in imports(&std::fs::read_to_string(&path).unwrap()) {
            if to == module || to.is_empty() {
                continue;
            }
            let ok = match layer_of(&to) {
                Some(l) => l > own && to != "cli",
                None => true, // not a module (`crate::SOME_CONST`): nothing to order
            };
            let allowed = ALLOWED.iter().position(|(f, m, _)| *f == rel && *m == to);
            match (ok, allowed) {
                (true, _) => {}
                (false, Some(i)) => used[i] = true,
                (false, None) => {
                    let why = match layer_of(&to) {
                        _ if to == "cli" => "nothing imports cli",
                        Some(l) if l == own => "a module beside it",
                        _ => "a module above it",
                    };
                    bad.push(format!(
                        "src/{rel}:{line}: {module} imports crate::{to}: {why}"
                    ));
                }
            }
        }
    }
    for (i, (f, m, why)) in ALLOWED.iter().enumerate() {
        if !used[i] {
            bad.push(format!(
                "ALLOWED ({f} -> {m}: {why}) is no longer needed: remove it"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "layering (docs/architecture.md):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_reads_paths_and_groups_and_skips_comments() {
    let text =
        "use crate::{a, b::{c, d},\n    e::f};\n// crate::g\nlet x = crate::h::i; // crate::j\n";
    let got = imports(text);
    let want = [(1, "a"), (1, "b"), (1, "e"), (4, "h")].map(|(l, m)| (l, m.to_string()));
    assert_eq!(got, want);
}

/// Issue 42 item 3: what the engine serves is the store's own declaration (`StoreKind::engine`,
/// `scans_refused`), so the plan names no store outside its tests. The names come from
/// `kvmeter stores`' list, not from the code under test.
#[test]
fn the_plan_names_no_store_outside_its_tests() {
    let plan = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plan");
    let mut files = vec![];
    rust_files(&plan, &mut files);
    let stores = [
        "rocksdb",
        "wiredtiger",
        "lmdb",
        "leveldb",
        "sqlite",
        "memcached",
        "redis",
        "etcd",
        "null",
    ];
    let mut bad = vec![];
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for s in stores {
                if line.contains(&format!("\"{s}\"")) {
                    bad.push(format!("{}:{}: \"{s}\"", path.display(), i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "store names in src/plan:\n{}",
        bad.join("\n")
    );
}
