//! A plug-in's store and sessions as kvmeter's `Store` and `Session`: the record semantics of
//! `kv.rs` (field filtering over the lent bytes, update as read-merge-write unless the plug-in
//! applies partial updates itself) over the plug-in's C functions. Per operation: one indirect
//! call, no allocation, no lock.

use super::abi::{self, RawPlugin};
use super::{err_text, loaded, COptions};
use crate::store::kv::undecodable;
use crate::store::record::{self, Record, RecordView};
use crate::store::{ErrorKind, Fields, ScanOut, Session, Status, Store, StoreOptions};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

/// `StoreKind::open` for plug-ins.
pub fn open(dir: &Path, opts: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let p = loaded(opts.store())
        .ok_or_else(|| anyhow::anyhow!("plug-in '{}' is not loaded", opts.store()))?;
    let c = COptions::new(p.kind, opts).map_err(|m| anyhow::anyhow!(m))?;
    let raw = c.raw();
    let dir_c = CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow::anyhow!("data directory {} holds a NUL byte", dir.display()))?;
    let mut err = [0u8; 1024];
    let open = p.table.open.expect("checked at load");
    // SAFETY: arguments live across the call; err's length is passed.
    let store = unsafe { open(dir_c.as_ptr(), &raw, err.as_mut_ptr().cast(), err.len()) };
    if store.is_null() {
        anyhow::bail!(
            "plug-in '{}' could not open the store in {}: {}",
            p.name,
            dir.display(),
            err_text(&err)
        );
    }
    Ok(Box::new(PluginStore {
        table: p.table,
        name: p.name.clone(),
        store,
        stats: p.stats,
    }))
}

struct PluginStore {
    table: &'static RawPlugin,
    name: String,
    store: *mut c_void,
    stats: super::stats::PluginStats,
}

// SAFETY: the ABI promises a store's sessions may be opened from any thread and used
// concurrently (include/kvmeter_store.h, "Threads").
unsafe impl Send for PluginStore {}
unsafe impl Sync for PluginStore {}

impl Store for PluginStore {
    fn stats(&self) -> &'static [crate::store::stats::StatSpec] {
        self.stats.specs
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        super::stats::sample(&self.stats, self.store, out)
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let mut err = [0u8; 1024];
        let f = self.table.session_open.expect("checked at load");
        // SAFETY: the store is open; err's length is passed.
        let s = unsafe { f(self.store, err.as_mut_ptr().cast(), err.len()) };
        if s.is_null() {
            anyhow::bail!(
                "plug-in '{}' could not open a session: {}",
                self.name,
                err_text(&err)
            );
        }
        let insert = self.table.insert.expect("checked at load");
        Ok(Box::new(PluginSession {
            t: self.table,
            s,
            partial_update: self.table.capabilities & abi::CAP_PARTIAL_UPDATE != 0,
            // Without partial updates a NULL update writes the merged record with insert.
            update: self.table.update.unwrap_or(insert),
            read: self.table.read.expect("checked at load"),
            insert,
            table_c: Vec::new(),
            spans: Vec::new(),
            merge: record::Merge::default(),
            encoded: Vec::new(),
            last_error: None,
        }))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        let mut err = [0u8; 1024];
        let f = self.table.close.expect("checked at load");
        // SAFETY: every session was closed before the store (the driver's order).
        let rc = unsafe { f(self.store, err.as_mut_ptr().cast(), err.len()) };
        if rc != 0 {
            anyhow::bail!(
                "plug-in '{}' failed to close: {}",
                self.name,
                err_text(&err)
            );
        }
        Ok(())
    }
}

struct PluginSession {
    t: &'static RawPlugin,
    s: *mut c_void,
    partial_update: bool,
    read: abi::Read,
    update: abi::Write,
    insert: abi::Write,
    /// The table name as a C string (YCSB's "usertable"), remade only when it changes.
    table_c: Vec<u8>,
    spans: Vec<record::Span>,
    merge: record::Merge,
    encoded: Vec<u8>,
    last_error: Option<String>,
}

// SAFETY: a session is used by one thread at a time (the ABI's promise to the plug-in).
unsafe impl Send for PluginSession {}

/// A status code from the C side.
#[inline]
fn status(rc: c_int) -> Status {
    match rc {
        abi::OK => Status::Ok,
        abi::NOT_FOUND => Status::NotFound,
        rc => Status::Error {
            kind: match rc & 0xff {
                3 => ErrorKind::Io,
                4 => ErrorKind::Timeout,
                5 => ErrorKind::Busy,
                6 => ErrorKind::Corruption,
                7 => ErrorKind::NotImplemented,
                _ => ErrorKind::Other,
            },
            fatal: rc & abi::FATAL != 0,
        },
    }
}

/// (pointer, length) from C as a slice; a zero length is empty whatever the pointer.
///
/// # Safety
/// For a non-zero `len`, `ptr` is valid for `len` bytes for `'a`.
#[inline]
unsafe fn lent<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

impl PluginSession {
    #[inline]
    fn table(&mut self, table: &str) -> *const c_char {
        let t = table.as_bytes();
        if self.table_c.len() != t.len() + 1 || &self.table_c[..t.len()] != t {
            self.table_c.clear();
            self.table_c.extend_from_slice(t);
            self.table_c.push(0);
        }
        self.table_c.as_ptr().cast()
    }

    /// The status of `rc`, keeping the plug-in's text for an error.
    #[inline]
    fn done(&mut self, rc: c_int) -> Status {
        let st = status(rc);
        if let Status::Error { .. } = st {
            self.keep_error(rc);
        }
        st
    }

    #[cold]
    fn keep_error(&mut self, rc: c_int) {
        let text = match self.t.last_error {
            // SAFETY: valid until the session's next call; copied now.
            Some(f) => unsafe {
                let p = f(self.s);
                (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
            },
            None => None,
        };
        self.last_error = Some(text.unwrap_or_else(|| format!("plug-in status {rc}")));
    }

    /// The record under `key`, lent by the plug-in until this session's next call.
    #[inline]
    fn get(&mut self, table: *const c_char, key: &[u8]) -> (c_int, &'static [u8]) {
        let (mut p, mut n) = (std::ptr::null::<u8>(), 0usize);
        // SAFETY: the session is open; the out-pointers live across the call.
        let rc = unsafe { (self.read)(self.s, table, key.as_ptr(), key.len(), &mut p, &mut n) };
        // SAFETY: lent until the next call on this session; the borrow ends before it (the
        // 'static is narrowed by every caller to the session's borrow).
        (rc, unsafe { lent(p, n) })
    }

    /// Calls the plug-in's update or insert with the encoded record in `self.encoded`.
    #[inline]
    fn write(&mut self, f: abi::Write, table: *const c_char, key: &[u8]) -> Status {
        // SAFETY: the buffers live across the call; the plug-in copies what it keeps.
        let rc = unsafe {
            f(
                self.s,
                table,
                key.as_ptr(),
                key.len(),
                self.encoded.as_ptr(),
                self.encoded.len(),
            )
        };
        self.done(rc)
    }
}

struct ScanCtx<'a> {
    out: &'a mut ScanOut,
    fields: Fields<'a>,
    error: Option<record::DecodeError>,
}

unsafe extern "C" fn emit(
    ctx: *mut c_void,
    key: *const u8,
    klen: usize,
    rec: *const u8,
    rlen: usize,
) -> c_int {
    // SAFETY: ctx is the ScanCtx passed to scan, alive across it; key and rec are valid for
    // the call (the header's promise).
    let ctx = unsafe { &mut *ctx.cast::<ScanCtx>() };
    let (k, r) = unsafe { (lent(key, klen), lent(rec, rlen)) };
    let (kb, record) = ctx.out.next_slot();
    kb.extend_from_slice(k);
    let fields = ctx.fields;
    match record.decode_from(r, |n| fields.wants(n)) {
        Ok(()) => 0,
        Err(e) => {
            ctx.error = Some(e);
            1
        }
    }
}

impl Session for PluginSession {
    #[inline]
    fn read(&mut self, table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        let table = self.table(table);
        let (rc, bytes) = self.get(table, key);
        match rc {
            abi::OK => match record::index_encoded(bytes, |n| fields.wants(n), &mut self.spans) {
                Ok(()) => (Status::Ok, RecordView::new(bytes, &self.spans)),
                Err(e) => (undecodable(&mut self.last_error, e), RecordView::EMPTY),
            },
            rc => (self.done(rc), RecordView::EMPTY),
        }
    }

    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        out.clear();
        let Some(scan) = self.t.scan else {
            return Status::error(ErrorKind::NotImplemented);
        };
        let table = self.table(table);
        let mut ctx = ScanCtx {
            out,
            fields,
            error: None,
        };
        // SAFETY: ctx outlives the call; emit matches the header's kvm_scan_emit.
        let rc = unsafe {
            scan(
                self.s,
                table,
                start.as_ptr(),
                start.len(),
                count,
                emit,
                (&mut ctx as *mut ScanCtx).cast(),
            )
        };
        if let Some(e) = ctx.error {
            return undecodable(&mut self.last_error, e);
        }
        self.done(rc)
    }

    #[inline]
    fn update(&mut self, table: &str, key: &[u8], values: &Record) -> Status {
        let table = self.table(table);
        if self.partial_update {
            self.encoded.clear();
            values.encode_into(&mut self.encoded);
        } else {
            let (rc, stored) = self.get(table, key);
            if rc != abi::OK {
                return self.done(rc);
            }
            if let Err(e) = self.merge.apply(stored, values, &mut self.encoded) {
                return undecodable(&mut self.last_error, e);
            }
        }
        self.write(self.update, table, key)
    }

    #[inline]
    fn insert(&mut self, table: &str, key: &[u8], values: &Record) -> Status {
        let table = self.table(table);
        self.encoded.clear();
        values.encode_into(&mut self.encoded);
        self.write(self.insert, table, key)
    }

    #[inline]
    fn delete(&mut self, table: &str, key: &[u8]) -> Status {
        let table = self.table(table);
        let remove = self.t.remove.expect("checked at load");
        // SAFETY: the key lives across the call.
        let rc = unsafe { remove(self.s, table, key.as_ptr(), key.len()) };
        self.done(rc)
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    fn close(mut self: Box<Self>) -> Status {
        let f = self.t.session_close.expect("checked at load");
        // SAFETY: the session is closed once, here.
        let rc = unsafe { f(self.s) };
        self.s = std::ptr::null_mut();
        status(rc)
    }
}
