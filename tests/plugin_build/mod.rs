//! Builds the store plug-ins the tests load — the example in examples/plugins (by its Makefile,
//! from a copy outside the source tree) and the fixture in tests/plugins (with the system C
//! compiler) — as a user would (docs/plugins.md).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `source` (relative to the repository) into a shared library named `name` with the
/// extra compiler arguments; each test binary builds its own copy (the name carries its
/// process id), so test binaries running at once never race on one file.
pub fn build(source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("lib{name}-{}.so", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(&cc)
        .args([
            "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-I",
        ])
        .arg(root.join("include"))
        .arg(root.join(source))
        .args(extra)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
    assert!(
        o.status.success(),
        "building {source} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Builds the example as a user would from a copy of examples/plugins outside the repository:
/// `make -C COPY KVMETER_INCLUDE=<repo>/include` (docs/plugins.md), with `cflags` (warnings are
/// errors here). Returns make's output and the library's path.
pub fn make_example_copy(
    copy: &Path,
    include: Option<&Path>,
    cflags: &str,
) -> (std::process::Output, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(copy).unwrap();
    for f in ["Makefile", "kvm_lmdb.c"] {
        std::fs::copy(root.join("examples/plugins").join(f), copy.join(f)).unwrap();
    }
    let mut make = Command::new("make");
    make.arg("-C").arg(copy).arg(format!("CFLAGS={cflags}"));
    if let Some(i) = include {
        make.arg(format!("KVMETER_INCLUDE={}", i.display()));
    }
    let o = make
        .output()
        .unwrap_or_else(|e| panic!("cannot run make: {e}"));
    (o, copy.join("libkvm_lmdb.so"))
}

/// The example built by its Makefile from a copy (one per test binary and variant).
fn example_from_copy(tag: &str, cflags: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("plugins")
        .join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    let (o, lib) = make_example_copy(&copy, Some(&root.join("include")), cflags);
    assert!(
        o.status.success() && lib.is_file(),
        "make -C {} KVMETER_INCLUDE=... failed:\n{}{}",
        copy.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    lib
}

/// The example built once per test binary as `tag` with `defines`, as a `plugin:` spec.
fn example_variant(
    cell: &'static std::sync::OnceLock<PathBuf>,
    tag: &str,
    defines: &str,
) -> String {
    let p = cell
        .get_or_init(|| example_from_copy(tag, &format!("-O2 -Wall -Wextra -Werror {defines}")));
    format!("plugin:{}", p.display())
}

/// The example LMDB plug-in (needs Debian's liblmdb-dev; scripts/setup.sh installs it), built
/// by examples/plugins/Makefile from a copy outside the source tree, as docs/plugins.md says.
pub fn lmdb_example() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    example_variant(&PATH, "kvm_lmdb", "")
}

/// The example built with -DKVM_LMDB_PARTIAL_UPDATE: it declares KVM_CAP_PARTIAL_UPDATE and
/// merges updated fields itself (kvm_record_next), so the partial-update path is checked too.
pub fn lmdb_example_partial_updates() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    example_variant(&PATH, "kvm_lmdb_partial", "-DKVM_LMDB_PARTIAL_UPDATE")
}

/// The example built with -DKVM_LMDB_NO_STATS: a plug-in from before the statistics calls.
pub fn lmdb_example_without_stats() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    example_variant(&PATH, "kvm_lmdb_no_stats", "-DKVM_LMDB_NO_STATS")
}

/// The example built with -DKVM_LMDB_BUSY_READ: a named busy loop (`kvm_lmdb_busy_read`) in
/// its read path, the truth a profile must find (issue 44).
pub fn lmdb_example_busy_read() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    example_variant(&PATH, "kvm_lmdb_busy", "-DKVM_LMDB_BUSY_READ=200000")
}

/// The test fixture, built with `defines` (e.g. "-DFIXTURE_ABI=99").
pub fn fixture(tag: &str, defines: &[&str]) -> String {
    // A variant without the entry point leaves the functions unused.
    let mut args = vec!["-Wno-unused-function", "-Wno-unused-const-variable"];
    args.extend_from_slice(defines);
    let p = build("tests/plugins/fixture.c", &format!("fixture_{tag}"), &args);
    format!("plugin:{}", p.display())
}
