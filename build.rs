//! Records the git revision and the bundled RocksDB version for the run manifest, and compiles
//! the C/C++ shims (native/) for the stores that link Debian's libraries.
use std::process::Command;

fn main() {
    let rev = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    println!(
        "cargo:rustc-env=KVMETER_GIT_REV={}{}",
        rev,
        if dirty { "-dirty" } else { "" }
    );
    // The bundled RocksDB version is the build metadata of librocksdb-sys ("0.19.0+11.8.1").
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut version = "unknown".to_string();
    let mut in_sys = false;
    for line in lock.lines() {
        if line == "name = \"librocksdb-sys\"" {
            in_sys = true;
        } else if in_sys && line.starts_with("version = ") {
            let v = line.trim_start_matches("version = ").trim_matches('"');
            version = v.split('+').nth(1).unwrap_or(v).to_string();
            break;
        }
    }
    println!("cargo:rustc-env=KVMETER_ROCKSDB_VERSION={version}");
    if std::env::var_os("CARGO_FEATURE_WIREDTIGER").is_some() {
        need_header("wiredtiger.h", "libwiredtiger-dev", "wiredtiger");
        cc::Build::new()
            .file("native/wiredtiger_shim.c")
            .warnings(true)
            .compile("kvm_wiredtiger_shim");
        println!("cargo:rustc-link-lib=wiredtiger");
        println!("cargo:rerun-if-changed=native/wiredtiger_shim.c");
    }
    if std::env::var_os("CARGO_FEATURE_LEVELDB").is_some() {
        need_header("leveldb/db.h", "libleveldb-dev", "leveldb");
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .file("native/leveldb_shim.cc")
            .warnings(true)
            .compile("kvm_leveldb_shim");
        println!("cargo:rustc-link-lib=leveldb");
        println!("cargo:rerun-if-changed=native/leveldb_shim.cc");
    }
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    println!("cargo:rerun-if-changed=Cargo.lock");
}

/// Fails the build with one clear line when a store's system library is missing.
fn need_header(header: &str, package: &str, feature: &str) {
    let found = ["/usr/include", "/usr/local/include"]
        .iter()
        .any(|d| std::path::Path::new(d).join(header).exists());
    if !found {
        panic!(
            "feature '{feature}' needs {header}: install Debian's {package} (scripts/setup.sh does), or build without --features {feature}"
        );
    }
}
