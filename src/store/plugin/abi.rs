//! The C side of `include/kvmeter_store.h`, field for field. Written by hand (not bindgen):
//! the header is ours, small, and changes only with `KVMETER_STORE_ABI_VERSION`; a layout
//! test below pins the offsets a C compiler gives the same struct on this target.

use std::ffi::{c_char, c_int, c_void, CStr};

pub const ABI_VERSION: u32 = 1;
pub const ENTRY_SYMBOL: &[u8] = b"kvmeter_store_plugin\0";

pub const CAP_SCAN: u32 = 1 << 0;
pub const CAP_PERSISTENT: u32 = 1 << 1;
pub const CAP_STORES_DATA: u32 = 1 << 2;
pub const CAP_PARTIAL_UPDATE: u32 = 1 << 3;

pub const OK: c_int = 0;
pub const NOT_FOUND: c_int = 1;
pub const FATAL: c_int = 0x100;

#[repr(C)]
pub struct RawOption {
    pub name: *const c_char,
    pub default_value: *const c_char,
    pub help: *const c_char,
}

#[repr(C)]
pub struct RawOptions {
    pub names: *const *const c_char,
    pub values: *const *const c_char,
    pub count: usize,
}

pub type Emit = unsafe extern "C" fn(
    ctx: *mut c_void,
    key: *const u8,
    klen: usize,
    rec: *const u8,
    rlen: usize,
) -> c_int;

pub type Read = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const u8,
    usize,
    *mut *const u8,
    *mut usize,
) -> c_int;

pub type Write =
    unsafe extern "C" fn(*mut c_void, *const c_char, *const u8, usize, *const u8, usize) -> c_int;

#[repr(C)]
pub struct RawPlugin {
    pub abi_version: u32,
    pub capabilities: u32,
    pub name: *const c_char,
    pub version: *const c_char,
    pub summary: *const c_char,
    pub options: *const RawOption,
    pub check: Option<unsafe extern "C" fn(*const RawOptions, *mut c_char, usize) -> c_int>,
    pub open: Option<
        unsafe extern "C" fn(*const c_char, *const RawOptions, *mut c_char, usize) -> *mut c_void,
    >,
    pub close: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> c_int>,
    pub session_open: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> *mut c_void>,
    pub session_close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub read: Option<Read>,
    pub scan: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *const c_char,
            *const u8,
            usize,
            usize,
            Emit,
            *mut c_void,
        ) -> c_int,
    >,
    pub update: Option<Write>,
    pub insert: Option<Write>,
    pub remove: Option<unsafe extern "C" fn(*mut c_void, *const c_char, *const u8, usize) -> c_int>,
    pub last_error: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
}

// SAFETY: the table is immutable data and function pointers the library keeps for its life.
unsafe impl Sync for RawPlugin {}

impl RawPlugin {
    /// Every function kvmeter calls unconditionally is there, and the strings it reads.
    pub fn check_complete(&self) -> Result<(), String> {
        let missing = [
            ("name", self.name.is_null()),
            ("version", self.version.is_null()),
            ("open", self.open.is_none()),
            ("close", self.close.is_none()),
            ("session_open", self.session_open.is_none()),
            ("session_close", self.session_close.is_none()),
            ("read", self.read.is_none()),
            (
                "update (the plug-in declares KVM_CAP_PARTIAL_UPDATE)",
                self.capabilities & CAP_PARTIAL_UPDATE != 0 && self.update.is_none(),
            ),
            ("insert", self.insert.is_none()),
            ("remove", self.remove.is_none()),
            (
                "scan (the plug-in declares KVM_CAP_SCAN)",
                self.capabilities & CAP_SCAN != 0 && self.scan.is_none(),
            ),
        ];
        match missing.iter().find(|(_, m)| *m) {
            Some((what, _)) => Err(format!("its kvm_plugin table has no '{what}' (NULL)")),
            None => Ok(()),
        }
    }
}

/// The declared options as (name, default, help).
pub fn options(t: &RawPlugin) -> Result<Vec<(String, String, String)>, String> {
    let mut out = Vec::new();
    if t.options.is_null() {
        return Ok(out);
    }
    // SAFETY: the header asks for an array ended by an entry with a NULL name, and for
    // NUL-terminated strings; a NULL default or help reads as empty.
    unsafe {
        let mut p = t.options;
        while !(*p).name.is_null() {
            let s = |c: *const c_char| {
                if c.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(c).to_string_lossy().into_owned()
                }
            };
            let name = s((*p).name);
            if name.is_empty() || name.contains('=') {
                return Err(format!("option name '{name}' is empty or holds '='"));
            }
            out.push((name, s((*p).default_value), s((*p).help)));
            if out.len() > 1000 {
                return Err("more than 1000 options: is the options array ended by {NULL}?".into());
            }
            p = p.add(1);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The offsets of the C struct on an LP64 target: two u32, then 8-byte pointers.
    #[test]
    fn layout_matches_the_header() {
        assert_eq!(offset_of!(RawPlugin, capabilities), 4);
        assert_eq!(offset_of!(RawPlugin, name), 8);
        assert_eq!(offset_of!(RawPlugin, options), 32);
        assert_eq!(offset_of!(RawPlugin, check), 40);
        assert_eq!(offset_of!(RawPlugin, read), 80);
        assert_eq!(offset_of!(RawPlugin, last_error), 120);
        assert_eq!(std::mem::size_of::<RawPlugin>(), 128);
        assert_eq!(std::mem::size_of::<RawOptions>(), 24);
    }
}
