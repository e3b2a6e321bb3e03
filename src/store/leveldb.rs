//! `leveldb`: Google LevelDB (Debian's libleveldb, the real C++ library), through the small
//! shim in `native/leveldb_shim.cc` — LevelDB's C API copies every read into fresh memory,
//! the shim reads into a per-session buffer instead (see its header). RocksDB's ancestor;
//! papers/000 and papers/001 measure LSM stores of this family.

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::*;
use crate::error::UsageError;
use std::ffi::{c_char, c_int, c_long, c_void, CString};
use std::ptr;
use std::sync::Arc;

#[repr(C)]
struct Db {
    _private: [u8; 0],
}

extern "C" {
    fn kvm_ldb_version_major() -> c_int;
    fn kvm_ldb_version_minor() -> c_int;
    fn kvm_ldb_open(
        path: *const c_char,
        cache: usize,
        write_buffer: usize,
        bloom_bits: c_int,
        snappy: c_int,
        max_open_files: usize,
        err: *mut c_char,
        errlen: usize,
    ) -> *mut Db;
    fn kvm_ldb_close(db: *mut Db);
    fn kvm_ldb_buf_new() -> *mut c_void;
    fn kvm_ldb_buf_free(b: *mut c_void);
    fn kvm_ldb_get(
        db: *mut Db,
        k: *const u8,
        kl: usize,
        buf: *mut c_void,
        v: *mut *const u8,
        vl: *mut usize,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn kvm_ldb_put(
        db: *mut Db,
        k: *const u8,
        kl: usize,
        v: *const u8,
        vl: usize,
        sync: c_int,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn kvm_ldb_del(
        db: *mut Db,
        k: *const u8,
        kl: usize,
        sync: c_int,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn kvm_ldb_iter(db: *mut Db) -> *mut c_void;
    fn kvm_ldb_iter_free(it: *mut c_void);
    fn kvm_ldb_iter_seek(it: *mut c_void, k: *const u8, kl: usize);
    fn kvm_ldb_iter_valid(it: *mut c_void) -> c_int;
    fn kvm_ldb_iter_next(it: *mut c_void);
    fn kvm_ldb_iter_entry(
        it: *mut c_void,
        k: *mut *const u8,
        kl: *mut usize,
        v: *mut *const u8,
        vl: *mut usize,
    );
    fn kvm_ldb_iter_status(it: *mut c_void, err: *mut c_char, errlen: usize) -> c_int;
    fn kvm_ldb_property(db: *mut Db, name: *const c_char, out: *mut u8, outlen: usize) -> c_long;
}

const OPTIONS: &[OptSpec] = &[
    OptSpec {
        name: "block_cache_mb",
        default: "64",
        help: "LRU block cache in MiB (0: LevelDB's own 8 MiB default)",
    },
    OptSpec {
        name: "write_buffer_mb",
        default: "64",
        help: "memtable size in MiB (LevelDB's default is 4)",
    },
    OptSpec {
        name: "bloom_bits",
        default: "10",
        help: "bloom filter bits per key (0: no filter)",
    },
    OptSpec {
        name: "compression",
        default: "snappy",
        help: "snappy or none",
    },
    OptSpec {
        name: "sync",
        default: "false",
        help: "fsync the log on every write",
    },
    OptSpec {
        name: "max_open_files",
        default: "1000",
        help: "table files kept open",
    },
];

pub static KIND: StoreKind = StoreKind {
    name: "leveldb",
    summary: "Google LevelDB, embedded LSM (Debian's libleveldb)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: true,
        stores_data: true,
    },
    // SAFETY: constant getters.
    version: || unsafe { format!("{}.{}", kvm_ldb_version_major(), kvm_ldb_version_minor()) },
    probe,
    check: |o| settings(o).map(|_| ()),
    open,
    server: None,
    engine: None,
    scans_refused: super::scans_always_served,
    stats: STATS,
    profile_symbols: &["leveldb::", "leveldb_"],
};

/// What LevelDB says about itself (`DB::GetProperty`): its files per level, its compaction
/// table (`leveldb.stats`, whose MiB are whole numbers as LevelDB prints them) and memory.
pub static STATS: &[stats::StatSpec] = {
    use stats::{stat, Role, StatKind::*};
    &[
        stat("compaction_read_bytes", "bytes", Counter, Role::Plain, "bytes compactions read, summed over levels (leveldb.stats Read(MB), whole MiB)"),
        stat("compaction_write_bytes", "bytes", Counter, Role::StorageWrite, "bytes memtable flushes and compactions wrote, summed over levels (leveldb.stats Write(MB), whole MiB)"),
        stat("compaction_seconds", "s", Counter, Role::Plain, "seconds spent compacting, summed over levels (leveldb.stats Time(sec), whole seconds)"),
        stat("l0_files", "files", Gauge, Role::Backlog, "table files in level 0 (leveldb.num-files-at-level0; writes slow at 8 and stop at 12)"),
        stat("files", "files", Gauge, Role::Plain, "table files in all levels (leveldb.stats Files)"),
        stat("table_bytes", "bytes", Gauge, Role::Plain, "bytes of the table files, summed over levels (leveldb.stats Size(MB), whole MiB)"),
        stat("memory_bytes", "bytes", Gauge, Role::Plain, "memory LevelDB holds: memtables and block cache (leveldb.approximate-memory-usage)"),
    ]
};

/// The sums of `leveldb.stats`'s table rows (level, files, size MB, time s, read MB, write
/// MB): (files, size, time, read, write); zeros for a table without rows (a new database);
/// `None` without the table's header.
fn parse_level_stats(text: &str) -> Option<[u64; 5]> {
    if !text.contains("Level  Files Size(MB) Time(sec) Read(MB) Write(MB)") {
        return None;
    }
    let mut sum = [0u64; 5];
    for line in text.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|w| w.parse::<u64>())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        if f.len() == 6 {
            for (s, v) in sum.iter_mut().zip(&f[1..]) {
                *s = s.saturating_add(*v);
            }
        }
    }
    Some(sum)
}

fn probe() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let o = StoreOptions::parse("leveldb", OPTIONS, &[]).map_err(|e| e.to_string())?;
    let s = open(dir.path(), &o).map_err(|e| e.to_string())?;
    s.close().map_err(|e| e.to_string())
}

struct Settings {
    cache: usize,
    write_buffer: usize,
    bloom: c_int,
    snappy: bool,
    sync: bool,
    max_open_files: usize,
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    let bloom = o.u64("bloom_bits")?;
    if bloom > 64 {
        return Err(UsageError::new(format!(
            "--store-opt bloom_bits={bloom}: expected 0 to 64"
        )));
    }
    Ok(Settings {
        cache: (o.mib("block_cache_mb")? as usize) << 20,
        write_buffer: (o.positive_mib("write_buffer_mb")? as usize) << 20,
        bloom: bloom as c_int,
        snappy: o.choice("compression", &["snappy", "none"])? == "snappy",
        sync: o.bool("sync")?,
        max_open_files: o.positive("max_open_files")? as usize,
    })
}

struct Handle(*mut Db);
// SAFETY: leveldb::DB is safe for concurrent use by many threads.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}
impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the last reference; no session or iterator is left.
        unsafe { kvm_ldb_close(self.0) }
    }
}

struct LevelStore {
    db: Arc<Handle>,
    sync: bool,
}

const ERRLEN: usize = 512;

fn message(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn open(dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let s = settings(o)?;
    let path = CString::new(dir.join("db").as_os_str().as_encoded_bytes())?;
    let mut err = [0u8; ERRLEN];
    // SAFETY: valid C strings and buffers.
    let db = unsafe {
        kvm_ldb_open(
            path.as_ptr(),
            s.cache,
            s.write_buffer,
            s.bloom,
            s.snappy as c_int,
            s.max_open_files,
            err.as_mut_ptr().cast(),
            ERRLEN,
        )
    };
    if db.is_null() {
        anyhow::bail!(
            "cannot open LevelDB at {}: {}",
            dir.display(),
            message(&err)
        );
    }
    Ok(Box::new(LevelStore {
        db: Arc::new(Handle(db)),
        sync: s.sync,
    }))
}

impl LevelStore {
    /// A property's text (at most 64 KiB: `leveldb.stats` is about 600 bytes).
    fn property(&self, name: &std::ffi::CStr) -> Result<String, String> {
        let mut buf = vec![0u8; 64 << 10];
        // SAFETY: a live DB handle; the shim copies at most buf.len() bytes.
        let n = unsafe { kvm_ldb_property(self.db.0, name.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return Err(format!(
                "LevelDB has no property {}",
                name.to_string_lossy()
            ));
        }
        buf.truncate((n as usize).min(buf.len()));
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

impl Store for LevelStore {
    fn stats(&self) -> &'static [stats::StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let table = self.property(c"leveldb.stats")?;
        let [files, size_mb, secs, read_mb, write_mb] = parse_level_stats(&table)
            .ok_or_else(|| format!("leveldb.stats: no table in {:?}", table.get(..200)))?;
        let num = |name: &std::ffi::CStr| -> Option<u64> {
            self.property(name).ok()?.trim().parse().ok()
        };
        let mib = 1u64 << 20;
        let values = [
            Some(read_mb.saturating_mul(mib)),
            Some(write_mb.saturating_mul(mib)),
            Some(secs),
            num(c"leveldb.num-files-at-level0"),
            Some(files),
            Some(size_mb.saturating_mul(mib)),
            num(c"leveldb.approximate-memory-usage"),
        ];
        out.copy_from_slice(&values);
        Ok(())
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        // SAFETY: freed in Drop.
        let buf = unsafe { kvm_ldb_buf_new() };
        Ok(Box::new(KvSession::new(LevelRaw {
            db: self.db.clone(),
            buf,
            sync: self.sync as c_int,
            err: [0; ERRLEN],
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        // LevelDB has no flush call; closing the DB (when the last session is gone) writes
        // nothing more than its log already holds.
        Ok(())
    }
}

struct LevelRaw {
    db: Arc<Handle>,
    buf: *mut c_void,
    sync: c_int,
    err: [u8; ERRLEN],
}

// SAFETY: the read buffer belongs to this session alone.
unsafe impl Send for LevelRaw {}

impl LevelRaw {
    #[cold]
    fn error(&self, what: &str, code: c_int) -> RawError {
        let (kind, fatal) = match code {
            2 => (ErrorKind::Corruption, true),
            3 => (ErrorKind::Io, true),
            _ => (ErrorKind::Other, false),
        };
        RawError::new(
            kind,
            fatal,
            format!("LevelDB {what}: {}", message(&self.err)),
        )
    }
}

impl RawKv for LevelRaw {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        let (mut v, mut vl) = (ptr::null(), 0usize);
        // SAFETY: the value lives in this session's buffer until the next read.
        let rc = unsafe {
            kvm_ldb_get(
                self.db.0,
                key.as_ptr(),
                key.len(),
                self.buf,
                &mut v,
                &mut vl,
                self.err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        match rc {
            // SAFETY: the value stays valid until the session's next call (the shim keeps it).
            0 => Ok(Some(unsafe { super::kv::raw_slice(v, vl) })),
            1 => Ok(None),
            c => Err(self.error("read", c)),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        // SAFETY: LevelDB copies key and value.
        match unsafe {
            kvm_ldb_put(
                self.db.0,
                key.as_ptr(),
                key.len(),
                value.as_ptr(),
                value.len(),
                self.sync,
                self.err.as_mut_ptr().cast(),
                ERRLEN,
            )
        } {
            0 => Ok(()),
            c => Err(self.error("write", c)),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        // SAFETY: as put.
        match unsafe {
            kvm_ldb_del(
                self.db.0,
                key.as_ptr(),
                key.len(),
                self.sync,
                self.err.as_mut_ptr().cast(),
                ERRLEN,
            )
        } {
            0 | 1 => Ok(()),
            c => Err(self.error("delete", c)),
        }
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError> {
        // LevelDB allocates the iterator, as YCSB's bindings' iterators do; the records go
        // into reused buffers.
        // SAFETY: the iterator is freed before return; entries are used before `next`.
        unsafe {
            let it = kvm_ldb_iter(self.db.0);
            kvm_ldb_iter_seek(it, start.as_ptr(), start.len());
            let mut n = 0;
            let mut out = Ok(());
            while n < count && kvm_ldb_iter_valid(it) != 0 {
                let (mut k, mut kl, mut v, mut vl) = (ptr::null(), 0, ptr::null(), 0);
                kvm_ldb_iter_entry(it, &mut k, &mut kl, &mut v, &mut vl);
                let kb = super::kv::raw_slice(k, kl);
                let vb = super::kv::raw_slice(v, vl);
                if let Err(e) = sink(kb, vb) {
                    out = Err(ScanError::Decode(e));
                    break;
                }
                n += 1;
                kvm_ldb_iter_next(it);
            }
            if out.is_ok() {
                let c = kvm_ldb_iter_status(it, self.err.as_mut_ptr().cast(), ERRLEN);
                if c != 0 {
                    out = Err(ScanError::Store(self.error("scan", c)));
                }
            }
            kvm_ldb_iter_free(it);
            out
        }
    }
}

impl Drop for LevelRaw {
    fn drop(&mut self) {
        // SAFETY: allocated by kvm_ldb_buf_new in session().
        unsafe { kvm_ldb_buf_free(self.buf) }
    }
}

#[cfg(test)]
mod stats_tests {
    /// LevelDB 1.23's `leveldb.stats` (db_impl.cc GetProperty), as it prints it.
    #[test]
    fn the_compaction_table_is_summed_over_levels() {
        let text = "                               Compactions\nLevel  Files Size(MB) Time(sec) Read(MB) Write(MB)\n--------------------------------------------------\n  0        3        5         0        0         5\n  1        7       12         1       17        12\n";
        assert_eq!(super::parse_level_stats(text), Some([10, 17, 1, 17, 17]));
        assert_eq!(super::parse_level_stats("nothing here"), None);
        let empty = text.lines().take(3).collect::<Vec<_>>().join("\n");
        assert_eq!(super::parse_level_stats(&empty), Some([0; 5]));
    }
}
