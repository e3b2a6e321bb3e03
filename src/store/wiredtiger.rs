//! `wiredtiger`: WiredTiger (Debian's libwiredtiger), the B-tree/LSM engine papers/001
//! compares with RocksDB. WiredTiger's API is structs of function pointers with variadic
//! key/value setters; the calls go through `native/wiredtiger_shim.c`, compiled against the
//! real header, so no struct layout is restated here (see that file's header).
//!
//! One connection per store; per session a WT_SESSION with two cursors on
//! `table:usertable` (key_format=u, value_format=u): one for point operations (overwrite=true,
//! so insert is an upsert and removing a missing key succeeds), one for scans. A read returns
//! the value in WiredTiger's own memory, valid until the cursor is reset at the session's
//! next call (zero-copy).

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::*;
use crate::error::UsageError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::Arc;

type Conn = c_void;
type Sess = c_void;
type Cursor = c_void;

extern "C" {
    fn kvm_wt_version(maj: *mut c_int, min: *mut c_int, patch: *mut c_int) -> *const c_char;
    fn kvm_wt_strerror(e: c_int) -> *const c_char;
    fn kvm_wt_open(home: *const c_char, config: *const c_char, conn: *mut *mut Conn) -> c_int;
    fn kvm_wt_close(conn: *mut Conn, config: *const c_char) -> c_int;
    fn kvm_wt_create(conn: *mut Conn, uri: *const c_char, config: *const c_char) -> c_int;
    fn kvm_wt_checkpoint(conn: *mut Conn) -> c_int;
    fn kvm_wt_stats_count() -> c_int;
    fn kvm_wt_stats(conn: *mut Conn, vals: *mut i64, ok: *mut c_int, n: c_int) -> c_int;
    fn kvm_wt_session(
        conn: *mut Conn,
        uri: *const c_char,
        s: *mut *mut Sess,
        point: *mut *mut Cursor,
        scan: *mut *mut Cursor,
    ) -> c_int;
    fn kvm_wt_session_close(s: *mut Sess) -> c_int;
    fn kvm_wt_reset(c: *mut Cursor) -> c_int;
    fn kvm_wt_get(
        c: *mut Cursor,
        k: *const u8,
        kl: usize,
        v: *mut *const u8,
        vl: *mut usize,
    ) -> c_int;
    fn kvm_wt_put(c: *mut Cursor, k: *const u8, kl: usize, v: *const u8, vl: usize) -> c_int;
    fn kvm_wt_del(c: *mut Cursor, k: *const u8, kl: usize) -> c_int;
    fn kvm_wt_seek(c: *mut Cursor, k: *const u8, kl: usize) -> c_int;
    fn kvm_wt_next(c: *mut Cursor) -> c_int;
    fn kvm_wt_current(
        c: *mut Cursor,
        k: *mut *const u8,
        kl: *mut usize,
        v: *mut *const u8,
        vl: *mut usize,
    ) -> c_int;
}

const WT_NOTFOUND: c_int = -31803;
const WT_ROLLBACK: c_int = -31800;
const WT_PANIC: c_int = -31804;
const URI: &CStr = c"table:usertable";

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "table_type", default: "btree", help: "btree or lsm" },
    OptSpec { name: "cache_mb", default: "256", help: "WiredTiger cache size in MiB" },
    OptSpec { name: "log", default: "true", help: "the write-ahead log (journal) on/off" },
    OptSpec { name: "sync", default: "false", help: "fsync the log at every commit (needs log=true)" },
    OptSpec { name: "checkpoint_s", default: "60", help: "seconds between checkpoints (0: only at close)" },
    OptSpec { name: "direct_io", default: "none", help: "O_DIRECT for: none or data (data and checkpoint files; O_DIRECT on the log makes WiredTiger 3.2.1 panic on ext4, so it is not offered)" },
    OptSpec { name: "session_max", default: "1100", help: "most sessions the connection allows (one per worker)" },
    OptSpec { name: "statistics", default: "fast", help: "WiredTiger's statistics (statistics=(fast): its cheap counters, sampled into store_stats.csv; MongoDB keeps them on) or none (no counters: store_stats.csv is not written)" },
];

pub static KIND: StoreKind = StoreKind {
    name: "wiredtiger",
    summary: "WiredTiger, embedded B-tree or LSM (Debian's libwiredtiger)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: true,
        stores_data: true,
    },
    version,
    probe,
    check: |o| settings(o).map(|_| ()),
    open,
    server: None,
    engine: None,
    scans_refused: super::scans_always_served,
    stats: STATS,
    profile_symbols: &["__wt_", "wiredtiger_"],
};

/// What WiredTiger says about itself: connection statistics from a `statistics:` cursor
/// (`statistics=(fast)`), the shim naming each by its header's constant in this order.
pub static STATS: &[stats::StatSpec] = {
    use stats::{stat, Role, StatKind::*};
    &[
        stat("evicted_clean", "count", Counter, Role::Work, "unmodified pages evicted from the cache (cache: unmodified pages evicted)"),
        stat("evicted_dirty", "count", Counter, Role::Work, "modified pages evicted: written before they left the cache (cache: modified pages evicted)"),
        stat("pages_read", "count", Counter, Role::Plain, "pages read into the cache (cache: pages read into cache)"),
        stat("pages_written", "count", Counter, Role::Plain, "pages written from the cache (cache: pages written from cache)"),
        stat("block_bytes_written", "bytes", Counter, Role::StorageWrite, "bytes the block manager wrote: pages, checkpoints (block-manager: bytes written)"),
        stat("block_bytes_read", "bytes", Counter, Role::Plain, "bytes the block manager read (block-manager: bytes read)"),
        stat("log_bytes_written", "bytes", Counter, Role::StorageWrite, "bytes written to the log (log: log bytes written)"),
        stat("log_syncs", "count", Counter, Role::Work, "log syncs (log: log sync operations)"),
        stat("checkpoints", "count", Counter, Role::Work, "checkpoints taken (transaction: transaction checkpoints)"),
        stat("cache_bytes", "bytes", Gauge, Role::Plain, "bytes in the cache (cache: bytes currently in the cache)"),
        stat("cache_dirty_bytes", "bytes", Gauge, Role::Backlog, "modified bytes in the cache, still to be written (cache: tracked dirty bytes in the cache)"),
        stat("cache_max_bytes", "bytes", Gauge, Role::Plain, "the cache's configured size (cache: maximum bytes configured)"),
        stat("checkpoint_running", "bool", Gauge, Role::Plain, "1 while a checkpoint runs (transaction: transaction checkpoint currently running)"),
    ]
};

fn version() -> String {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: writes three ints, returns a static string.
    unsafe { kvm_wt_version(&mut a, &mut b, &mut c) };
    format!("{a}.{b}.{c}")
}

fn strerror(rc: c_int) -> String {
    // SAFETY: a static string for any code.
    unsafe { CStr::from_ptr(kvm_wt_strerror(rc)) }
        .to_string_lossy()
        .into_owned()
}

fn probe() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let o = StoreOptions::parse("wiredtiger", OPTIONS, &["cache_mb=16".into()])
        .map_err(|e| e.to_string())?;
    let s = open(dir.path(), &o).map_err(|e| e.to_string())?;
    s.session().map_err(|e| e.to_string())?;
    s.close().map_err(|e| e.to_string())
}

struct Settings {
    open_config: String,
    table_config: String,
    statistics: bool,
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    let lsm = o.choice("table_type", &["btree", "lsm"])? == "lsm";
    let log = o.bool("log")?;
    let sync = o.bool("sync")?;
    if sync && !log {
        return Err(UsageError::new(
            "--store-opt sync=true needs log=true: there is no log to sync with the log off",
        ));
    }
    let direct = match o.choice("direct_io", &["none", "data"])? {
        "none" => "",
        _ => ",direct_io=[data,checkpoint]",
    };
    let cache = o.positive_mib("cache_mb")?;
    // WiredTiger refuses an LSM tree whose chunks (10 MiB) do not fit its cache thrice.
    if lsm && cache < 32 {
        return Err(UsageError::new(format!(
            "--store-opt cache_mb={cache}: table_type=lsm needs cache_mb ≥ 32 (WiredTiger keeps several 10 MiB LSM chunks in cache)"
        )));
    }
    let checkpoint = o.u64("checkpoint_s")?;
    let mut open_config = format!(
        "create,cache_size={}M,session_max={},log=(enabled={log}),transaction_sync=(enabled={sync},method=fsync){direct}",
        cache,
        o.positive("session_max")?,
    );
    if checkpoint > 0 {
        open_config.push_str(&format!(",checkpoint=(wait={checkpoint})"));
    }
    let statistics = o.choice("statistics", &["fast", "none"])? == "fast";
    open_config.push_str(if statistics {
        ",statistics=(fast)"
    } else {
        ",statistics=(none)"
    });
    let table_config = format!(
        "key_format=u,value_format=u{}",
        if lsm { ",type=lsm" } else { "" }
    );
    Ok(Settings {
        open_config,
        table_config,
        statistics,
    })
}

struct Connection(*mut Conn);
// SAFETY: WT_CONNECTION is thread-safe; sessions are per thread.
unsafe impl Send for Connection {}
unsafe impl Sync for Connection {}
impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the last reference: every session has been closed.
        unsafe { kvm_wt_close(self.0, ptr::null()) };
    }
}

struct WtStore {
    conn: Arc<Connection>,
    /// statistics=fast: the connection keeps its counters (`STATS`).
    statistics: bool,
}

fn open(dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let s = settings(o)?;
    let home = CString::new(dir.as_os_str().as_encoded_bytes())?;
    let cfg = CString::new(s.open_config.clone())?;
    let mut conn = ptr::null_mut();
    // SAFETY: valid strings; the connection is closed by `Connection`'s Drop.
    let rc = unsafe { kvm_wt_open(home.as_ptr(), cfg.as_ptr(), &mut conn) };
    if rc != 0 {
        anyhow::bail!(
            "cannot open WiredTiger at {} ({}): {}",
            dir.display(),
            s.open_config,
            strerror(rc)
        );
    }
    let conn = Connection(conn);
    let tcfg = CString::new(s.table_config.clone())?;
    // SAFETY: a live connection.
    let rc = unsafe { kvm_wt_create(conn.0, URI.as_ptr(), tcfg.as_ptr()) };
    if rc != 0 {
        anyhow::bail!(
            "WiredTiger create {} ({}): {} (a data directory made with another table_type or key format cannot be reused: use a fresh --data-dir)",
            URI.to_string_lossy(),
            s.table_config,
            strerror(rc)
        );
    }
    Ok(Box::new(WtStore {
        conn: Arc::new(conn),
        statistics: s.statistics,
    }))
}

impl Store for WtStore {
    fn stats(&self) -> &'static [stats::StatSpec] {
        if self.statistics {
            STATS
        } else {
            &[]
        }
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let n = STATS.len();
        let (mut vals, mut ok) = ([0i64; 16], [0 as c_int; 16]);
        // SAFETY: a live connection; both arrays hold at least n entries, and the shim
        // refuses an n other than its own count.
        let rc = unsafe {
            if kvm_wt_stats_count() as usize != n || n > vals.len() {
                return Err("the shim's statistics are not this build's".into());
            }
            kvm_wt_stats(self.conn.0, vals.as_mut_ptr(), ok.as_mut_ptr(), n as c_int)
        };
        if rc != 0 {
            return Err(format!("statistics cursor: {}", strerror(rc)));
        }
        for i in 0..n {
            out[i] = (ok[i] != 0 && vals[i] >= 0).then_some(vals[i] as u64);
        }
        Ok(())
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let (mut s, mut point, mut scan) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: a live connection; the session is closed in Drop.
        let rc =
            unsafe { kvm_wt_session(self.conn.0, URI.as_ptr(), &mut s, &mut point, &mut scan) };
        if rc != 0 {
            if !s.is_null() {
                unsafe { kvm_wt_session_close(s) };
            }
            anyhow::bail!("WiredTiger session: {}", strerror(rc));
        }
        Ok(Box::new(KvSession::new(WtRaw {
            conn: self.conn.clone(),
            session: s,
            point,
            scan,
            positioned: false,
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        // A checkpoint makes the data durable whatever the log setting; the connection itself
        // closes with its last session.
        // SAFETY: a live connection.
        let rc = unsafe { kvm_wt_checkpoint(self.conn.0) };
        if rc != 0 {
            anyhow::bail!("WiredTiger checkpoint at close: {}", strerror(rc));
        }
        Ok(())
    }
}

struct WtRaw {
    /// Keeps the connection open while the session lives (Drop closes the session first).
    conn: Arc<Connection>,
    session: *mut Sess,
    point: *mut Cursor,
    scan: *mut Cursor,
    /// The point cursor holds a read's value (and its page) until reset.
    positioned: bool,
}

// SAFETY: a WT_SESSION is used by one thread at a time; it may move between threads.
unsafe impl Send for WtRaw {}

#[cold]
fn raw_error(what: &str, rc: c_int) -> RawError {
    let (kind, fatal) = match rc {
        WT_ROLLBACK => (ErrorKind::Busy, false),
        WT_PANIC => (ErrorKind::Corruption, true),
        libc::ENOSPC | libc::EIO | libc::EFBIG => (ErrorKind::Io, true),
        _ => (ErrorKind::Other, false),
    };
    RawError::new(kind, fatal, format!("WiredTiger {what}: {}", strerror(rc)))
}

impl WtRaw {
    #[inline]
    fn release(&mut self) {
        if self.positioned {
            // SAFETY: this session's cursor.
            unsafe { kvm_wt_reset(self.point) };
            self.positioned = false;
        }
    }
}

impl RawKv for WtRaw {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        self.release();
        let (mut v, mut vl) = (ptr::null(), 0usize);
        // SAFETY: the value stays valid until the cursor is reset at the next call.
        match unsafe { kvm_wt_get(self.point, key.as_ptr(), key.len(), &mut v, &mut vl) } {
            0 => {
                self.positioned = true;
                Ok(Some(unsafe { super::kv::raw_slice(v, vl) }))
            }
            WT_NOTFOUND => {
                unsafe { kvm_wt_reset(self.point) };
                Ok(None)
            }
            rc => {
                unsafe { kvm_wt_reset(self.point) };
                Err(raw_error("read", rc))
            }
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        self.release();
        // SAFETY: WiredTiger copies key and value before returning.
        match unsafe {
            kvm_wt_put(
                self.point,
                key.as_ptr(),
                key.len(),
                value.as_ptr(),
                value.len(),
            )
        } {
            0 => Ok(()),
            rc => Err(raw_error("write", rc)),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        self.release();
        // SAFETY: as put.
        match unsafe { kvm_wt_del(self.point, key.as_ptr(), key.len()) } {
            0 | WT_NOTFOUND => Ok(()),
            rc => Err(raw_error("delete", rc)),
        }
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError> {
        self.release();
        let c = self.scan;
        // SAFETY: entries are used before the cursor moves; it is reset at the end.
        unsafe {
            let mut rc = kvm_wt_seek(c, start.as_ptr(), start.len());
            let mut n = 0;
            let mut out = Ok(());
            while rc == 0 && n < count {
                let (mut k, mut kl, mut v, mut vl) = (ptr::null(), 0, ptr::null(), 0);
                rc = kvm_wt_current(c, &mut k, &mut kl, &mut v, &mut vl);
                if rc != 0 {
                    break;
                }
                let kb = super::kv::raw_slice(k, kl);
                let vb = super::kv::raw_slice(v, vl);
                if let Err(e) = sink(kb, vb) {
                    out = Err(ScanError::Decode(e));
                    break;
                }
                n += 1;
                if n < count {
                    rc = kvm_wt_next(c);
                }
            }
            if out.is_ok() && rc != 0 && rc != WT_NOTFOUND {
                out = Err(ScanError::Store(raw_error("scan", rc)));
            }
            kvm_wt_reset(c);
            out
        }
    }

    fn close(&mut self) -> Result<(), RawError> {
        self.release();
        Ok(())
    }
}

impl Drop for WtRaw {
    fn drop(&mut self) {
        // SAFETY: closing the session closes its cursors; the connection outlives it.
        unsafe { kvm_wt_session_close(self.session) };
        let _ = &self.conn;
    }
}
