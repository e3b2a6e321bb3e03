//! No import circle between the files of one module (issue 42 item 4): within each folder of
//! src/, the files and subfolders form an order — if `a.rs` uses `b.rs`, nothing under `b`
//! uses `a`. Edges come from `crate::`, `super::` and `self::` paths (groups included) in the
//! code before `#[cfg(test)]`, resolved to the module they name; a module using its parent
//! (`super::Item` defined in mod.rs) or its own children is no edge between siblings. A file
//! is its module; a subfolder counts as one sibling with all its files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of src/ (`driver::engine::conn`), by its file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, std::path::PathBuf> {
    let mut files = vec![];
    super::layering::rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for p in files {
        let rel = p
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let mut parts: Vec<String> = rel
            .trim_end_matches(".rs")
            .split('/')
            .map(String::from)
            .collect();
        if parts.last().is_some_and(|l| l == "mod") {
            parts.pop();
        }
        if parts == ["main"] || parts == ["lib"] {
            continue;
        }
        out.insert(parts, p);
    }
    out
}

/// The paths a file's code names from `crate::`, `super::` or `self::`, each as its words
/// (`super::super::net::Conn` → ["super", "super", "net", "Conn"]); groups are expanded.
pub fn paths(text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap()
        .lines()
        .map(|l| l.split("//").next().unwrap_or("").to_string() + "\n")
        .collect();
    let b = code.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| b[i..].starts_with(p.as_bytes()));
        let boundary =
            i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        if starts && boundary {
            let mut at = i;
            expand(&code, &mut at, vec![], &mut out);
            i = at.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// Reads `a::b::{c, d::e}` from `at`, appending each whole path to `out`.
fn expand(code: &str, at: &mut usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let b = code.as_bytes();
    loop {
        while *at < b.len() && b[*at].is_ascii_whitespace() {
            *at += 1;
        }
        if *at < b.len() && b[*at] == b'{' {
            *at += 1;
            loop {
                expand(code, at, prefix.clone(), out);
                while *at < b.len() && b[*at].is_ascii_whitespace() {
                    *at += 1;
                }
                match b.get(*at) {
                    Some(b',') => *at += 1,
                    Some(b'}') => {
                        *at += 1;
                        return;
                    }
                    _ => return,
                }
                while *at < b.len() && b[*at].is_ascii_whitespace() {
                    *at += 1;
                }
                if b.get(*at) == Some(&b'}') {
                    *at += 1;
                    return;
                }
            }
        }
        let start = *at;
        while *at < b.len() && (b[*at].is_ascii_alphanumeric() || b[*at] == b'_') {
            *at += 1;
        }
        if *at > start {
            prefix.push(code[start..*at].to_string());
        }
        if b[*at..].starts_with(b"::") {
            *at += 2;
            continue;
        }
        if !prefix.is_empty() {
            out.push(prefix);
        }
        return;
    }
}

/// The module a path names from module `from` (`is_dir`: `from` is a mod.rs): the longest
/// prefix of the resolved path that is a module of src/.
fn target(
    from: &[String],
    is_dir: bool,
    path: &[String],
    mods: &BTreeMap<Vec<String>, std::path::PathBuf>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut words = path.iter().peekable();
    match words.peek().map(|w| w.as_str()) {
        Some("crate") => {
            base.clear();
            words.next();
        }
        Some("self") => {
            words.next();
            if !is_dir {
                // `self::x` in a file module names its own items or its inline modules.
                return None;
            }
        }
        Some("super") => {
            // In a file `a/b.rs` (module a::b), `super` is `a`; in `a/b/mod.rs` (a::b) too.
            while words.peek().is_some_and(|w| *w == "super") {
                words.next();
                base.pop()?;
            }
        }
        _ => return None,
    }
    let mut full = base;
    full.extend(words.cloned());
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|p| !p.is_empty() && mods.contains_key(p))
}

#[test]
fn no_import_circle_between_the_files_of_one_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    // Per folder: sibling → siblings it uses, with one example line each.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>> =
        BTreeMap::new();
    for (m, file) in &mods {
        let is_dir = file.ends_with("mod.rs");
        let text = std::fs::read_to_string(file).unwrap();
        for p in paths(&text) {
            let Some(t) = target(m, is_dir, &p, &mods) else {
                continue;
            };
            // The folder both sit in, and the sibling of each under it.
            let common = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if common >= m.len() || common >= t.len() {
                continue; // one contains the other: a parent and its child
            }
            let folder = m[..common].to_vec();
            graphs
                .entry(folder)
                .or_default()
                .entry(m[common].clone())
                .or_default()
                .entry(t[common].clone())
                .or_insert_with(|| format!("{} uses {}", m.join("::"), p.join("::")));
        }
    }
    let mut bad = vec![];
    for (folder, g) in &graphs {
        for cycle in cycles(g) {
            let how: Vec<String> = cycle.windows(2).map(|w| g[&w[0]][&w[1]].clone()).collect();
            bad.push(format!(
                "src/{}: {} ({})",
                folder.join("/"),
                cycle.join(" -> "),
                how.join("; ")
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "import circles between files:\n{}",
        bad.join("\n")
    );
}

/// Each circle once (from its smallest member), as a closed walk.
fn cycles(g: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let mut found = BTreeSet::new();
    for start in g.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, walk)) = stack.pop() {
            for next in g.get(&at).map(|e| e.keys()).into_iter().flatten() {
                if next == start {
                    let mut c = walk.clone();
                    let min = c
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| (*s).clone())
                        .unwrap()
                        .0;
                    c.rotate_left(min);
                    let first = c[0].clone();
                    c.push(first);
                    found.insert(c);
                } else if !walk.contains(next) && walk.len() < 6 {
                    let mut w = walk.clone();
                    w.push(next.clone());
                    stack.push((next.clone(), w));
                }
            }
        }
    }
    found.into_iter().collect()
}

#[test]
fn paths_are_read_with_their_groups() {
    let got = paths("use super::{a::{b, c}, d};\nlet x = super::super::e::f(1); // crate::no\n");
    let want: Vec<Vec<String>> = [
        &["super", "a", "b"][..],
        &["super", "a", "c"],
        &["super", "d"],
        &["super", "super", "e", "f"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got, want);
}
