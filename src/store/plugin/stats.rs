//! A plug-in's own statistics (issue 43 item 1): two optional symbols beside
//! `kvmeter_store_plugin`, so the ABI version — and every plug-in built before them — stays
//! as it was (include/kvmeter_store.h, "Statistics"):
//!
//! - `kvmeter_store_stats_declared()` returns the statistics the plug-in reports (name, unit,
//!   counter or gauge, the part it plays, a one-line meaning), ended by a NULL name;
//! - `kvmeter_store_stats(store, emit, ctx, err, err_len)` calls `emit(ctx, name, value)` for
//!   each it can read now.
//!
//! The declaration is read once, at load, and checked like any input from outside: at most
//! `MAX_STATS` entries, names `[a-z0-9_]` of at most 64 bytes that are not store_stats.csv's
//! own columns and appear once, a known unit, kind and role, bounded meanings. A value under a
//! name that was not declared is ignored; one declared and not emitted is unavailable for that
//! sample. The sampler calls the plug-in from kvmeter's interval thread while sessions run.

use crate::store::stats::{Role, StatKind, StatSpec};
use std::ffi::{c_char, c_int, c_void};

pub const DECLARED_SYMBOL: &[u8] = b"kvmeter_store_stats_declared\0";
pub const SAMPLE_SYMBOL: &[u8] = b"kvmeter_store_stats\0";

/// The most statistics a plug-in may declare.
pub const MAX_STATS: usize = 256;
const UNITS: [&str; 7] = ["count", "bytes", "us", "s", "files", "bytes/s", "bool"];
/// store_stats.csv's own columns.
const RESERVED: [&str; 3] = ["phase", "t_s", "unix_us"];

/// `kvm_stat` of the header.
#[repr(C)]
pub struct RawStat {
    pub name: *const c_char,
    pub unit: *const c_char,
    pub kind: u32,
    pub role: u32,
    pub meaning: *const c_char,
}

pub type Emit = unsafe extern "C" fn(ctx: *mut c_void, name: *const c_char, value: u64);
pub type Declared = unsafe extern "C" fn() -> *const RawStat;
pub type Sample = unsafe extern "C" fn(*mut c_void, Emit, *mut c_void, *mut c_char, usize) -> c_int;

/// The plug-in's statistics, as loaded: the declaration and the call that samples them.
#[derive(Clone, Copy)]
pub struct PluginStats {
    pub specs: &'static [StatSpec],
    pub sample: Option<Sample>,
}

/// The two symbols of `lib`, checked: both or neither (`None`: the plug-in reports no
/// statistics, as every plug-in built before them).
pub fn load(lib: &libloading::Library) -> Result<PluginStats, String> {
    // SAFETY: the symbols' types are the ones the header declares.
    let (declared, sample) = unsafe {
        (
            lib.get::<Declared>(DECLARED_SYMBOL).ok().map(|s| *s),
            lib.get::<Sample>(SAMPLE_SYMBOL).ok().map(|s| *s),
        )
    };
    match (declared, sample) {
        (None, None) => Ok(PluginStats {
            specs: &[],
            sample: None,
        }),
        (Some(_), None) | (None, Some(_)) => Err(
            "it exports only one of kvmeter_store_stats_declared and kvmeter_store_stats (both or neither)"
                .into(),
        ),
        (Some(d), Some(s)) => {
            // SAFETY: the header asks for an array that lives as long as the library, ended
            // by an entry with a NULL name, of NUL-terminated strings.
            let specs = unsafe { declarations(d())? };
            Ok(PluginStats {
                specs: Box::leak(specs.into_boxed_slice()),
                sample: Some(s),
            })
        }
    }
}

/// Reads and checks the declared array.
///
/// # Safety
/// `p` is NULL or points to `kvm_stat` entries ended by one whose name is NULL.
unsafe fn declarations(mut p: *const RawStat) -> Result<Vec<StatSpec>, String> {
    let mut out: Vec<StatSpec> = Vec::new();
    if p.is_null() {
        return Err("kvmeter_store_stats_declared() returned NULL".into());
    }
    while !(*p).name.is_null() {
        if out.len() == MAX_STATS {
            return Err(format!(
                "it declares more than {MAX_STATS} statistics: is the array ended by {{NULL}}?"
            ));
        }
        let s = text((*p).name, 64).map_err(|e| format!("statistic {}: name {e}", out.len()))?;
        let bad = |what: String| format!("statistic '{s}': {what}");
        if s.is_empty()
            || !s
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(bad("a name of a-z, 0-9 and _ was expected".into()));
        }
        if RESERVED.contains(&s.as_str()) || out.iter().any(|o| o.name == s) {
            return Err(bad(
                "the name is store_stats.csv's own column or declared twice".into(),
            ));
        }
        let unit = text((*p).unit, 16).map_err(|e| bad(format!("unit {e}")))?;
        let unit = *UNITS.iter().find(|u| **u == unit).ok_or_else(|| {
            bad(format!(
                "unit '{unit}': expected one of {}",
                UNITS.join(", ")
            ))
        })?;
        let kind = match (*p).kind {
            0 => StatKind::Counter,
            1 => StatKind::Gauge,
            k => {
                return Err(bad(format!(
                    "kind {k}: expected KVM_STAT_COUNTER or KVM_STAT_GAUGE"
                )))
            }
        };
        let role = role((*p).role).ok_or_else(|| bad(format!("role {}: unknown", (*p).role)))?;
        if role == Role::Unwritten && (kind != StatKind::Gauge || unit != "bytes") {
            return Err(bad(
                "role KVM_ROLE_UNWRITTEN: expected a gauge in bytes (memory not yet flushed)"
                    .into(),
            ));
        }
        let meaning = if (*p).meaning.is_null() {
            String::new()
        } else {
            text((*p).meaning, 300).map_err(|e| bad(format!("meaning {e}")))?
        };
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        out.push(StatSpec {
            name: leak(s),
            unit,
            kind,
            role,
            meaning: leak(meaning),
        });
        p = p.add(1);
    }
    Ok(out)
}

/// `kvm_stat_role` of the header.
fn role(r: u32) -> Option<Role> {
    Some(match r {
        0 => Role::Plain,
        1 => Role::Work,
        2 => Role::StorageWrite,
        3 => Role::UserWrite,
        4 => Role::UserRead,
        5 => Role::CacheHit,
        6 => Role::CacheMiss,
        7 => Role::Stall,
        8 => Role::Backlog,
        9 => Role::Unwritten,
        _ => return None,
    })
}

/// A NUL-terminated string of at most `max` bytes (looked at no further), as UTF-8.
///
/// # Safety
/// `p` is NULL or points to readable bytes up to a NUL or past `max`.
unsafe fn text(p: *const c_char, max: usize) -> Result<String, String> {
    if p.is_null() {
        return Err("is NULL".into());
    }
    let mut len = 0;
    while *p.add(len) != 0 {
        len += 1;
        if len > max {
            return Err(format!("is longer than {max} bytes"));
        }
    }
    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|_| "is not UTF-8".into())
}

/// What `emit` fills: each declared statistic's value, by its place in the declaration.
struct Sink<'a> {
    specs: &'static [StatSpec],
    out: &'a mut [Option<u64>],
}

unsafe extern "C" fn emit(ctx: *mut c_void, name: *const c_char, value: u64) {
    if ctx.is_null() || name.is_null() {
        return;
    }
    // SAFETY: ctx is the Sink `sample` passed, alive across the plug-in's call; the name is
    // read no further than 64 bytes past its start.
    let sink = &mut *ctx.cast::<Sink>();
    let Ok(name) = text(name, 64) else { return };
    if let Some(i) = sink.specs.iter().position(|s| s.name == name) {
        if let Some(o) = sink.out.get_mut(i) {
            *o = Some(value);
        }
    }
}

/// One sample of the plug-in's statistics into `out` (as long as the declaration).
pub fn sample(
    stats: &PluginStats,
    store: *mut c_void,
    out: &mut [Option<u64>],
) -> Result<(), String> {
    let Some(f) = stats.sample else {
        return Ok(());
    };
    out.iter_mut().for_each(|o| *o = None);
    let mut sink = Sink {
        specs: stats.specs,
        out,
    };
    let mut err = [0u8; 512];
    // SAFETY: the store is open (the driver samples between open and close); sink and err
    // live across the call, err's length is passed.
    let rc = unsafe {
        f(
            store,
            emit,
            (&mut sink as *mut Sink).cast(),
            err.as_mut_ptr().cast(),
            err.len(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "kvmeter_store_stats returned {rc}: {}",
            super::err_text(&err)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null;

    fn entry(name: &'static [u8], unit: &'static [u8], kind: u32, role: u32) -> RawStat {
        RawStat {
            name: name.as_ptr().cast(),
            unit: unit.as_ptr().cast(),
            kind,
            role,
            meaning: null(),
        }
    }

    fn end() -> RawStat {
        RawStat {
            name: null(),
            unit: null(),
            kind: 0,
            role: 0,
            meaning: null(),
        }
    }

    #[test]
    fn declarations_are_checked_like_any_input() {
        let good = [
            entry(b"user_bytes\0", b"bytes\0", 0, 3),
            entry(b"depth\0", b"count\0", 1, 0),
            end(),
        ];
        let specs = unsafe { declarations(good.as_ptr()) }.unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].role, Role::UserWrite);
        assert_eq!(specs[1].kind, StatKind::Gauge);
        let refused = |entries: &[RawStat]| unsafe { declarations(entries.as_ptr()) }.unwrap_err();
        let e = refused(&[entry(b"Bad-Name\0", b"count\0", 0, 0), end()]);
        assert!(e.contains("a-z, 0-9 and _"), "{e}");
        let e = refused(&[entry(b"t_s\0", b"count\0", 0, 0), end()]);
        assert!(e.contains("own column"), "{e}");
        let e = refused(&[
            entry(b"a\0", b"count\0", 0, 0),
            entry(b"a\0", b"count\0", 0, 0),
            end(),
        ]);
        assert!(e.contains("declared twice"), "{e}");
        let e = refused(&[entry(b"a\0", b"furlongs\0", 0, 0), end()]);
        assert!(e.contains("unit 'furlongs'"), "{e}");
        let e = refused(&[entry(b"a\0", b"count\0", 7, 0), end()]);
        assert!(e.contains("kind 7"), "{e}");
        let e = refused(&[entry(b"a\0", b"count\0", 0, 99), end()]);
        assert!(e.contains("role 99"), "{e}");
        let long = [b'a'; 100];
        let mut named = long.to_vec();
        named.push(0);
        let e = refused(&[
            RawStat {
                name: named.as_ptr().cast(),
                ..entry(b"x\0", b"count\0", 0, 0)
            },
            end(),
        ]);
        assert!(e.contains("longer than 64"), "{e}");
        let names: Vec<std::ffi::CString> = (0..=MAX_STATS)
            .map(|i| std::ffi::CString::new(format!("s{i}")).unwrap())
            .collect();
        let many: Vec<RawStat> = names
            .iter()
            .map(|n| RawStat {
                name: n.as_ptr(),
                ..entry(b"x\0", b"count\0", 0, 0)
            })
            .collect();
        // No end entry: the count bounds the walk.
        assert!(refused(&many).contains("more than 256"));
    }
}
