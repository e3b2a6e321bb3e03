//! Builds the store plug-ins the tests load — the example in examples/plugins and the fixture
//! in tests/plugins — with the system C compiler, as a user would (docs/plugins.md).

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

/// The example LMDB plug-in (needs Debian's liblmdb-dev; scripts/setup.sh installs it).
pub fn lmdb_example() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let p = PATH.get_or_init(|| build("examples/plugins/kvm_lmdb.c", "kvm_lmdb", &["-llmdb"]));
    format!("plugin:{}", p.display())
}

/// The example built with -DKVM_LMDB_PARTIAL_UPDATE: it declares KVM_CAP_PARTIAL_UPDATE and
/// merges updated fields itself (kvm_record_next), so the partial-update path is checked too.
pub fn lmdb_example_partial_updates() -> String {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let p = PATH.get_or_init(|| {
        build(
            "examples/plugins/kvm_lmdb.c",
            "kvm_lmdb_partial",
            &["-DKVM_LMDB_PARTIAL_UPDATE", "-llmdb"],
        )
    });
    format!("plugin:{}", p.display())
}

/// The test fixture, built with `defines` (e.g. "-DFIXTURE_ABI=99").
pub fn fixture(tag: &str, defines: &[&str]) -> String {
    // A variant without the entry point leaves the functions unused.
    let mut args = vec!["-Wno-unused-function", "-Wno-unused-const-variable"];
    args.extend_from_slice(defines);
    let p = build("tests/plugins/fixture.c", &format!("fixture_{tag}"), &args);
    format!("plugin:{}", p.display())
}
