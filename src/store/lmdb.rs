//! `lmdb`: LMDB, the memory-mapped B+tree store — the closest packaged relative of Kreon's
//! mmap design (papers/000).
//!
//! Bindings: `lmdb-master-sys` (the sys crate heed is built on; it compiles LMDB's own C
//! source). The safe wrappers (heed, lmdb-rkv) begin a new read transaction per read; LMDB's
//! `mdb_txn_reset`/`mdb_txn_renew` reuse one transaction handle per session, so a read takes
//! no allocation and no lock beyond LMDB's reader slot — the few calls here are written by
//! hand for that. Reads return the value in place in the map (zero-copy) until the session's
//! next call. The environment is opened with MDB_NOTLS so a session's read transaction belongs
//! to the session, not to the thread that created it.

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::*;
use crate::error::UsageError;
use lmdb_master_sys as ffi;
use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "map_size_mb", default: "16384", help: "largest size the database may grow to, in MiB (the map is sparse: unused space costs nothing)" },
    OptSpec { name: "sync", default: "full", help: "full (fsync at commit), nometasync (skip the meta page fsync), nosync (no fsync; the OS writes back) or mapasync (with writemap: asynchronous msync)" },
    OptSpec { name: "writemap", default: "false", help: "write through a writable memory map (MDB_WRITEMAP) instead of write()" },
    OptSpec { name: "readahead", default: "false", help: "let the OS read ahead in the map (off: MDB_NORDAHEAD, better for random reads larger than RAM)" },
    OptSpec { name: "max_readers", default: "1024", help: "reader slots (one per session)" },
];

pub static KIND: StoreKind = StoreKind {
    name: "lmdb",
    summary: "LMDB, embedded memory-mapped B+tree",
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
    profile_symbols: &["mdb_"],
};

/// What LMDB says about itself (`mdb_env_stat`: the B+tree of the one database kvmeter uses;
/// `mdb_env_info`: the map and its transactions): no call takes a lock or a transaction.
pub static STATS: &[stats::StatSpec] = {
    use stats::{stat, Role, StatKind::*};
    &[
        stat("write_txns", "count", Counter, Role::Work, "write transactions committed (me_last_txnid: one per write, as kvmeter commits each)"),
        stat("entries", "count", Gauge, Role::Plain, "records in the tree (ms_entries)"),
        stat("depth", "count", Gauge, Role::Plain, "height of the B+tree: pages a lookup reads (ms_depth)"),
        stat("branch_pages", "count", Gauge, Role::Plain, "internal pages of the tree (ms_branch_pages)"),
        stat("leaf_pages", "count", Gauge, Role::Plain, "leaf pages of the tree (ms_leaf_pages)"),
        stat("overflow_pages", "count", Gauge, Role::Plain, "overflow pages: values larger than a page's share (ms_overflow_pages)"),
        stat("tree_bytes", "bytes", Gauge, Role::Plain, "bytes of the tree's pages: branch, leaf and overflow pages × page size"),
        stat("map_used_bytes", "bytes", Gauge, Role::Plain, "bytes of the map in use, free pages included ((me_last_pgno + 1) × page size): the data file's high-water mark"),
        stat("readers", "count", Gauge, Role::Plain, "reader slots in use (me_numreaders)"),
    ]
};

fn version() -> String {
    // SAFETY: mdb_version returns a static string and accepts null out-pointers.
    let s = unsafe {
        CStr::from_ptr(ffi::mdb_version(
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        ))
    };
    // "LMDB 0.9.70: (December 19, 2015)" → "0.9.70"
    let s = s.to_string_lossy();
    let s = s.trim_start_matches("LMDB ");
    s.split(':').next().unwrap_or(s).to_string()
}

fn probe() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let o = StoreOptions::parse("lmdb", OPTIONS, &["map_size_mb=16".into()])
        .map_err(|e| e.to_string())?;
    let s = open(dir.path(), &o).map_err(|e| e.to_string())?;
    s.close().map_err(|e| e.to_string())
}

struct Settings {
    map_bytes: usize,
    flags: u32,
    max_readers: u32,
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    let mut flags = ffi::MDB_NOTLS;
    let writemap = o.bool("writemap")?;
    match o.choice("sync", &["full", "nometasync", "nosync", "mapasync"])? {
        "nometasync" => flags |= ffi::MDB_NOMETASYNC,
        "nosync" => flags |= ffi::MDB_NOSYNC,
        "mapasync" => {
            if !writemap {
                return Err(UsageError::new(
                    "--store-opt sync=mapasync needs writemap=true (MDB_MAPASYNC applies to a writable map only)",
                ));
            }
            flags |= ffi::MDB_MAPASYNC
        }
        _ => {}
    }
    if writemap {
        flags |= ffi::MDB_WRITEMAP;
    }
    if !o.bool("readahead")? {
        flags |= ffi::MDB_NORDAHEAD;
    }
    let mb = o.positive_mib("map_size_mb")?;
    let readers = o.positive("max_readers")?;
    if readers > 1 << 20 {
        return Err(UsageError::new(format!(
            "--store-opt max_readers={readers}: expected at most 1048576"
        )));
    }
    Ok(Settings {
        map_bytes: usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
        flags,
        max_readers: readers as u32,
    })
}

fn strerror(rc: i32) -> String {
    // SAFETY: mdb_strerror returns a static string for any code.
    unsafe { CStr::from_ptr(ffi::mdb_strerror(rc)) }
        .to_string_lossy()
        .into_owned()
}

#[cold]
fn raw_error(what: &str, rc: i32) -> RawError {
    let (kind, fatal) = match rc {
        ffi::MDB_MAP_FULL => (ErrorKind::Io, true),
        libc::ENOSPC | libc::EIO | libc::EFBIG => (ErrorKind::Io, true),
        ffi::MDB_CORRUPTED | ffi::MDB_PANIC => (ErrorKind::Corruption, true),
        _ => (ErrorKind::Other, false),
    };
    let hint = if rc == ffi::MDB_MAP_FULL {
        " (raise --store-opt map_size_mb)"
    } else {
        ""
    };
    RawError::new(kind, fatal, format!("LMDB {what}: {}{hint}", strerror(rc)))
}

struct Env {
    env: *mut ffi::MDB_env,
    dbi: ffi::MDB_dbi,
}

// SAFETY: an MDB_env is thread-safe; with MDB_NOTLS transactions are not tied to threads.
unsafe impl Send for Env {}
unsafe impl Sync for Env {}

impl Drop for Env {
    fn drop(&mut self) {
        // SAFETY: every session holds an Arc to this Env, so none is open any more.
        unsafe { ffi::mdb_env_close(self.env) }
    }
}

struct LmdbStore {
    env: Arc<Env>,
}

fn open(dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let s = settings(o)?;
    let path = CString::new(dir.as_os_str().as_encoded_bytes())?;
    let mut env = ptr::null_mut();
    // SAFETY: plain LMDB calls on a handle we own; errors close the handle.
    unsafe {
        let rc = ffi::mdb_env_create(&mut env);
        if rc != 0 {
            anyhow::bail!("LMDB env create: {}", strerror(rc));
        }
        let guard = Env { env, dbi: 0 };
        let rc = ffi::mdb_env_set_mapsize(env, s.map_bytes as _);
        if rc != 0 {
            anyhow::bail!("LMDB map size {} B: {}", s.map_bytes, strerror(rc));
        }
        ffi::mdb_env_set_maxreaders(env, s.max_readers);
        let rc = ffi::mdb_env_open(env, path.as_ptr(), s.flags, 0o644);
        if rc != 0 {
            anyhow::bail!("cannot open LMDB at {}: {}", dir.display(), strerror(rc));
        }
        let mut txn = ptr::null_mut();
        let rc = ffi::mdb_txn_begin(env, ptr::null_mut(), 0, &mut txn);
        if rc != 0 {
            anyhow::bail!("LMDB begin: {}", strerror(rc));
        }
        let mut dbi = 0;
        let rc = ffi::mdb_dbi_open(txn, ptr::null(), ffi::MDB_CREATE, &mut dbi);
        if rc != 0 {
            ffi::mdb_txn_abort(txn);
            anyhow::bail!("LMDB open database: {}", strerror(rc));
        }
        let rc = ffi::mdb_txn_commit(txn);
        if rc != 0 {
            anyhow::bail!("LMDB commit: {}", strerror(rc));
        }
        let mut guard = guard;
        guard.dbi = dbi;
        Ok(Box::new(LmdbStore {
            env: Arc::new(guard),
        }))
    }
}

impl Store for LmdbStore {
    fn stats(&self) -> &'static [stats::StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        // SAFETY: a valid env (the store holds it); both calls fill plain structs.
        let (st, info) = unsafe {
            let mut st: ffi::MDB_stat = std::mem::zeroed();
            let mut info: ffi::MDB_envinfo = std::mem::zeroed();
            let rc = ffi::mdb_env_stat(self.env.env, &mut st);
            if rc != 0 {
                return Err(format!("mdb_env_stat: {}", strerror(rc)));
            }
            let rc = ffi::mdb_env_info(self.env.env, &mut info);
            if rc != 0 {
                return Err(format!("mdb_env_info: {}", strerror(rc)));
            }
            (st, info)
        };
        let page = st.ms_psize as u64;
        let pages =
            st.ms_branch_pages as u64 + st.ms_leaf_pages as u64 + st.ms_overflow_pages as u64;
        let values = [
            info.me_last_txnid as u64,
            st.ms_entries as u64,
            st.ms_depth as u64,
            st.ms_branch_pages as u64,
            st.ms_leaf_pages as u64,
            st.ms_overflow_pages as u64,
            pages * page,
            (info.me_last_pgno as u64 + 1) * page,
            info.me_numreaders as u64,
        ];
        for (o, v) in out.iter_mut().zip(values) {
            *o = Some(v);
        }
        Ok(())
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        Ok(Box::new(KvSession::new(LmdbRaw {
            env: self.env.clone(),
            read: ptr::null_mut(),
            cursor: ptr::null_mut(),
            active: false,
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        // SAFETY: a valid env; a forced sync makes nosync/nometasync data durable at close.
        let rc = unsafe { ffi::mdb_env_sync(self.env.env, 1) };
        if rc != 0 {
            anyhow::bail!("LMDB sync at close: {}", strerror(rc));
        }
        Ok(())
    }
}

struct LmdbRaw {
    env: Arc<Env>,
    /// The session's read-only transaction, reset between operations and renewed for reads.
    read: *mut ffi::MDB_txn,
    cursor: *mut ffi::MDB_cursor,
    active: bool,
}

// SAFETY: MDB_NOTLS: the read transaction and its cursor may move between threads; a session
// is used by one thread at a time.
unsafe impl Send for LmdbRaw {}

fn val(b: &[u8]) -> ffi::MDB_val {
    ffi::MDB_val {
        mv_size: b.len(),
        mv_data: b.as_ptr() as *mut _,
    }
}

impl LmdbRaw {
    /// Ends the previous read (its values stop being valid).
    #[inline]
    fn release(&mut self) {
        if self.active {
            // SAFETY: an active read transaction of this session.
            unsafe { ffi::mdb_txn_reset(self.read) };
            self.active = false;
        }
    }

    #[inline]
    fn begin_read(&mut self) -> Result<(), RawError> {
        self.release();
        // SAFETY: renew a reset handle, or create it on first use.
        let rc = unsafe {
            if self.read.is_null() {
                ffi::mdb_txn_begin(
                    self.env.env,
                    ptr::null_mut(),
                    ffi::MDB_RDONLY,
                    &mut self.read,
                )
            } else {
                ffi::mdb_txn_renew(self.read)
            }
        };
        if rc != 0 {
            return Err(raw_error("read transaction", rc));
        }
        self.active = true;
        Ok(())
    }

    fn write(
        &mut self,
        f: impl FnOnce(*mut ffi::MDB_txn, ffi::MDB_dbi) -> i32,
        what: &str,
    ) -> Result<(), RawError> {
        self.release();
        let mut txn = ptr::null_mut();
        // SAFETY: a top-level write transaction, committed or aborted before returning.
        unsafe {
            let rc = ffi::mdb_txn_begin(self.env.env, ptr::null_mut(), 0, &mut txn);
            if rc != 0 {
                return Err(raw_error("write transaction", rc));
            }
            let rc = f(txn, self.env.dbi);
            if rc != 0 && rc != ffi::MDB_NOTFOUND {
                ffi::mdb_txn_abort(txn);
                return Err(raw_error(what, rc));
            }
            let rc = ffi::mdb_txn_commit(txn);
            if rc != 0 {
                return Err(raw_error("commit", rc));
            }
        }
        Ok(())
    }
}

impl RawKv for LmdbRaw {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        self.begin_read()?;
        let k = val(key);
        let mut v = ffi::MDB_val {
            mv_size: 0,
            mv_data: ptr::null_mut(),
        };
        // SAFETY: an active read transaction; the value points into the map and stays valid
        // until this session's next call resets the transaction.
        let rc = unsafe { ffi::mdb_get(self.read, self.env.dbi, &k as *const _ as *mut _, &mut v) };
        match rc {
            0 => Ok(Some(unsafe {
                std::slice::from_raw_parts(v.mv_data as *const u8, v.mv_size)
            })),
            ffi::MDB_NOTFOUND => Ok(None),
            rc => Err(raw_error("get", rc)),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        let (k, v) = (val(key), val(value));
        // SAFETY: key and value outlive the call; LMDB copies them.
        self.write(
            |txn, dbi| unsafe {
                ffi::mdb_put(
                    txn,
                    dbi,
                    &k as *const _ as *mut _,
                    &v as *const _ as *mut _,
                    0,
                )
            },
            "put",
        )
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        let k = val(key);
        // SAFETY: as for put; MDB_NOTFOUND (missing key) counts as success.
        self.write(
            |txn, dbi| unsafe { ffi::mdb_del(txn, dbi, &k as *const _ as *mut _, ptr::null_mut()) },
            "delete",
        )
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError> {
        self.begin_read()?;
        // SAFETY: the cursor belongs to this session's read transaction and is renewed with it.
        unsafe {
            let rc = if self.cursor.is_null() {
                ffi::mdb_cursor_open(self.read, self.env.dbi, &mut self.cursor)
            } else {
                ffi::mdb_cursor_renew(self.read, self.cursor)
            };
            if rc != 0 {
                return Err(raw_error("cursor", rc).into());
            }
            let mut k = val(start);
            let mut v = ffi::MDB_val {
                mv_size: 0,
                mv_data: ptr::null_mut(),
            };
            let mut op = ffi::MDB_SET_RANGE;
            for _ in 0..count {
                match ffi::mdb_cursor_get(self.cursor, &mut k, &mut v, op) {
                    0 => {}
                    ffi::MDB_NOTFOUND => break,
                    rc => return Err(raw_error("scan", rc).into()),
                }
                let kb = std::slice::from_raw_parts(k.mv_data as *const u8, k.mv_size);
                let vb = std::slice::from_raw_parts(v.mv_data as *const u8, v.mv_size);
                sink(kb, vb).map_err(ScanError::Decode)?;
                op = ffi::MDB_NEXT;
            }
        }
        self.release();
        Ok(())
    }

    fn close(&mut self) -> Result<(), RawError> {
        self.release();
        Ok(())
    }
}

impl Drop for LmdbRaw {
    fn drop(&mut self) {
        // SAFETY: cursor before its transaction; both belong to this session.
        unsafe {
            if !self.cursor.is_null() {
                ffi::mdb_cursor_close(self.cursor);
            }
            if !self.read.is_null() {
                ffi::mdb_txn_abort(self.read);
            }
        }
    }
}
