//! `--store plugin:/path/libfoo.so`: a store loaded from a shared library at run time through
//! the C ABI in `include/kvmeter_store.h` (docs/plugins.md).
//!
//! Why: three stores the papers measured have no package (SplinterDB in papers/001, Kreon in
//! papers/000, RAMCloud in papers/002), and researchers want to measure a prototype without
//! forking the benchmark (YCSB needs a Java binding, db_bench a rebuild). A plug-in gets the
//! same measuring wrapper (`driver/measured.rs`), telemetry and reports as a built-in store:
//! it becomes a `StoreKind` like any other, so nothing downstream knows the difference.
//!
//! Loading (`libloading`, the maintained dlopen wrapper) happens while the plan is checked:
//! a missing library, a missing `kvmeter_store_plugin` symbol, another ABI version, a NULL
//! required function, or options the plug-in's `check` refuses are one line and exit 2 before
//! anything is created. A loaded library stays loaded for the life of the process (its code may
//! run until exit, and its table is `'static`); the few loaded plug-ins are kept in a list
//! taken under a lock only at load, check, open and listing — never per operation.

mod abi;
pub mod crash;
mod session;
mod stats;

use super::{Capabilities, OptSpec, StoreKind, StoreOptions};
use crate::error::UsageError;
use abi::{RawPlugin, ABI_VERSION};
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How `--store` names a plug-in.
pub const PREFIX: &str = "plugin:";

/// A loaded plug-in: what the library says of itself, and its function table.
pub struct Plugin {
    /// The `--store` value it was loaded by (the `StoreKind`'s name).
    pub spec: String,
    /// The library's path as loaded.
    pub path: PathBuf,
    /// The plug-in's own name and version (from its table).
    pub name: String,
    pub version: String,
    table: &'static RawPlugin,
    kind: &'static StoreKind,
    stats: stats::PluginStats,
}

static LOADED: Mutex<Vec<&'static Plugin>> = Mutex::new(Vec::new());

/// Whether `store` names a plug-in.
pub fn is_plugin(store: &str) -> bool {
    store.starts_with(PREFIX)
}

/// The plug-in `spec` (`plugin:PATH`) names, loading it the first time.
pub fn load(spec: &str) -> Result<&'static Plugin, UsageError> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = loaded.iter().find(|p| p.spec == spec) {
        return Ok(p);
    }
    let p: &'static Plugin = Box::leak(Box::new(open_library(spec)?));
    loaded.push(p);
    Ok(p)
}

/// A plug-in already loaded by `spec` (no loading: for the hot-path-free lookups after the
/// plan was checked).
pub fn loaded(spec: &str) -> Option<&'static Plugin> {
    let loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    loaded.iter().find(|p| p.spec == spec).copied()
}

/// The store kind of a plug-in, loading it first.
pub fn kind(spec: &str) -> Result<&'static StoreKind, UsageError> {
    load(spec).map(|p| p.kind)
}

impl Plugin {
    /// "name version (plug-in ABI n, path)": the manifest's store version.
    pub fn describe(&self) -> String {
        format!(
            "{} {} (plug-in ABI {ABI_VERSION}, {})",
            self.name,
            self.version,
            self.path.display()
        )
    }
}

fn bad(spec: &str, what: impl std::fmt::Display) -> UsageError {
    UsageError::new(format!("--store '{spec}': {what}"))
}

/// Where `plugin:PATH` points: an existing file is made absolute; a bare file name is left to
/// the dynamic loader's search (LD_LIBRARY_PATH, the system's directories).
fn library_path(spec: &str) -> Result<PathBuf, UsageError> {
    let path = Path::new(&spec[PREFIX.len()..]);
    if path.as_os_str().is_empty() {
        return Err(bad(
            spec,
            "expected plugin:PATH to a shared library (for example plugin:./libkvm_lmdb.so)",
        ));
    }
    if path.is_file() {
        return path
            .canonicalize()
            .map_err(|e| bad(spec, format!("cannot resolve the path: {e}")));
    }
    if path.components().count() > 1 || path.exists() {
        return Err(bad(
            spec,
            format!(
                "no such file '{}' (a shared library was expected)",
                path.display()
            ),
        ));
    }
    Ok(path.to_path_buf())
}

fn open_library(spec: &str) -> Result<Plugin, UsageError> {
    let path = library_path(spec)?;
    // SAFETY: loading a library runs its initializers; the user asked for this library.
    let lib = unsafe { libloading::Library::new(&path) }
        .map_err(|e| bad(spec, format!("cannot load the library: {e}")))?;
    // SAFETY: the symbol's type is the one the header declares.
    let table: *const RawPlugin = unsafe {
        let entry: libloading::Symbol<unsafe extern "C" fn() -> *const RawPlugin> = lib
            .get(abi::ENTRY_SYMBOL)
            .map_err(|_| {
                bad(
                    spec,
                    "not a kvmeter store plug-in: it has no function 'kvmeter_store_plugin' (include/kvmeter_store.h)",
                )
            })?;
        entry()
    };
    if table.is_null() {
        return Err(bad(spec, "kvmeter_store_plugin() returned NULL"));
    }
    let plugin_stats = stats::load(&lib).map_err(|m| bad(spec, m))?;
    // The library stays loaded for the life of the process: its table and code are 'static.
    std::mem::forget(lib);
    // SAFETY: the first field is the ABI version in every version of the header; nothing else
    // is read before it matches.
    let version = unsafe { *table.cast::<u32>() };
    if version != ABI_VERSION {
        return Err(bad(
            spec,
            format!(
                "built against kvmeter store ABI version {version}; this kvmeter loads version {ABI_VERSION} (rebuild the plug-in with this kvmeter's include/kvmeter_store.h)"
            ),
        ));
    }
    // SAFETY: same layout (ABI version checked); the table lives as long as the library.
    let table: &'static RawPlugin = unsafe { &*table };
    table.check_complete().map_err(|m| bad(spec, m))?;
    // SAFETY: checked non-null above; the header asks for NUL-terminated strings.
    let text = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    let name = text(table.name);
    let version = text(table.version);
    let summary = if table.summary.is_null() {
        String::new()
    } else {
        text(table.summary)
    };
    let options = abi::options(table).map_err(|m| bad(spec, m))?;
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let options: &'static [OptSpec] = Box::leak(
        options
            .into_iter()
            .map(|(n, d, h)| OptSpec {
                name: leak(n),
                default: leak(d),
                help: leak(h),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let caps = table.capabilities;
    let kind: &'static StoreKind = Box::leak(Box::new(StoreKind {
        name: leak(spec.to_string()),
        summary: leak(format!("plug-in '{name}': {summary}")),
        options,
        capabilities: Capabilities {
            scan: caps & abi::CAP_SCAN != 0,
            persistent: caps & abi::CAP_PERSISTENT != 0,
            stores_data: caps & abi::CAP_STORES_DATA != 0,
        },
        // The plug-in's own version comes through `store::version_of`, which finds the
        // plug-in by name; a plain `fn` cannot capture it.
        version: String::new,
        probe: || Ok(()),
        check: check_options,
        open: session::open,
        server: None,
        engine: None,
        scans_refused: crate::store::scans_always_served,
        stats: plugin_stats.specs,
        // Its frames are told apart by their library (`telemetry::profile::fold`).
        profile_symbols: &[],
    }));
    Ok(Plugin {
        spec: spec.to_string(),
        path,
        name,
        version,
        table,
        kind,
        stats: plugin_stats,
    })
}

/// Every declared option with its value, in declaration order, as C strings.
struct COptions {
    names: Vec<CString>,
    values: Vec<CString>,
    name_ptrs: Vec<*const c_char>,
    value_ptrs: Vec<*const c_char>,
}

impl COptions {
    fn new(kind: &StoreKind, opts: &StoreOptions) -> Result<Self, String> {
        let c =
            |s: &str| CString::new(s).map_err(|_| format!("option value '{s}' holds a NUL byte"));
        let mut names = Vec::new();
        let mut values = Vec::new();
        for o in kind.options {
            names.push(c(o.name)?);
            values.push(c(opts.str(o.name))?);
        }
        let name_ptrs = names.iter().map(|s| s.as_ptr()).collect();
        let value_ptrs = values.iter().map(|s| s.as_ptr()).collect();
        Ok(COptions {
            names,
            values,
            name_ptrs,
            value_ptrs,
        })
    }

    fn raw(&self) -> abi::RawOptions {
        debug_assert_eq!(self.names.len(), self.values.len());
        abi::RawOptions {
            names: self.name_ptrs.as_ptr(),
            values: self.value_ptrs.as_ptr(),
            count: self.name_ptrs.len(),
        }
    }
}

/// A C function's error text from its buffer.
fn err_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let s = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    if s.is_empty() {
        "(the plug-in gave no reason)".to_string()
    } else {
        s
    }
}

/// `StoreKind::check` for plug-ins: the plug-in's own `check`, before anything is created.
fn check_options(opts: &StoreOptions) -> Result<(), UsageError> {
    let Some(p) = loaded(opts.store()) else {
        return Err(UsageError::new(format!(
            "--store '{}': plug-in not loaded",
            opts.store()
        )));
    };
    let Some(check) = p.table.check else {
        return Ok(());
    };
    let c = COptions::new(p.kind, opts).map_err(|m| bad(&p.spec, m))?;
    let raw = c.raw();
    let mut err = [0u8; 512];
    // SAFETY: the arguments live across the call; err's length is passed.
    let rc = unsafe { check(&raw, err.as_mut_ptr().cast(), err.len()) };
    if rc != 0 {
        return Err(UsageError::new(format!(
            "--store-opt: plug-in '{}' refused its options: {}",
            p.name,
            err_text(&err)
        )));
    }
    Ok(())
}

/// A short name for paths and titles: `plugin-<file stem>` for a plug-in, the store itself
/// otherwise.
pub fn short_name(store: &str) -> String {
    match store.strip_prefix(PREFIX) {
        Some(path) => {
            let stem = Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let stem = stem.strip_prefix("lib").unwrap_or(&stem).to_string();
            let clean: String = stem
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("plugin-{clean}")
        }
        None => store.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_names_and_bad_specs() {
        assert_eq!(
            super::short_name("plugin:/a/b/libkvm_lmdb.so"),
            "plugin-kvm_lmdb"
        );
        assert_eq!(super::short_name("rocksdb"), "rocksdb");
        let e = super::load("plugin:").err().unwrap().to_string();
        assert!(e.contains("expected plugin:PATH"), "{e}");
        let e = super::load("plugin:/nonexistent/libx.so")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no such file '/nonexistent/libx.so'"), "{e}");
        // A file that is not a shared library.
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b"not an ELF file").unwrap();
        let spec = format!("plugin:{}", f.path().display());
        let e = super::load(&spec).err().unwrap().to_string();
        assert!(e.contains("cannot load the library"), "{e}");
    }
}
