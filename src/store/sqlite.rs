//! `sqlite`: SQLite as an embedded key-value store — one table `usertable(key BLOB PRIMARY
//! KEY, value BLOB) WITHOUT ROWID` holding each encoded record (`record.rs`), WAL mode by
//! default, one connection per session.
//!
//! `rusqlite` (bundled SQLite) opens the connection and sets the pragmas; the four statements
//! of the hot path are prepared once per session and driven through `rusqlite::ffi`, because
//! rusqlite's statement and row types borrow the connection (a session cannot own both) and a
//! read through them copies the value. Here a read returns `sqlite3_column_blob`'s pointer,
//! valid until the statement is reset at the session's next call (zero-copy).

use super::kv::{KvSession, RawError, RawKv, ScanError, ScanSink};
use super::*;
use crate::error::UsageError;
use rusqlite::ffi;
use std::ffi::CStr;
use std::os::raw::c_int;
use std::ptr;

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "journal_mode", default: "wal", help: "wal, delete, truncate, persist, memory or off (PRAGMA journal_mode)" },
    OptSpec { name: "synchronous", default: "normal", help: "off, normal, full or extra (PRAGMA synchronous; normal with WAL loses at most the last commits on power loss)" },
    OptSpec { name: "cache_mb", default: "64", help: "page cache per connection, in MiB (PRAGMA cache_size)" },
    OptSpec { name: "mmap_mb", default: "0", help: "memory-mapped I/O size in MiB (PRAGMA mmap_size; 0: off)" },
    OptSpec { name: "busy_timeout_ms", default: "5000", help: "how long a writer waits for the write lock before the operation fails as busy" },
];

pub static KIND: StoreKind = StoreKind {
    name: "sqlite",
    summary: "SQLite, embedded (one table, key primary key)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: true,
        stores_data: true,
    },
    version: || rusqlite::version().to_string(),
    probe,
    check: |o| settings(o).map(|_| ()),
    open,
    server: None,
    engine: None,
    scans_refused: super::scans_always_served,
    stats: STATS,
    profile_symbols: &["sqlite3"],
};

/// What SQLite says about its database (`PRAGMA page_count`, `freelist_count`, `page_size`,
/// read on a read-only connection of the sampler's own) and the size of its write-ahead log.
pub static STATS: &[stats::StatSpec] = {
    use stats::{stat, Role, StatKind::*};
    &[
        stat("pages", "count", Gauge, Role::Plain, "pages of the database, as a reader sees it (PRAGMA page_count)"),
        stat("free_pages", "count", Gauge, Role::Plain, "pages on the free list: space deletes left for reuse (PRAGMA freelist_count)"),
        stat("db_bytes", "bytes", Gauge, Role::Plain, "bytes of the database's pages (page_count × page_size)"),
        stat("wal_bytes", "bytes", Gauge, Role::Plain, "bytes of the -wal file (0 without one); SQLite writes it again from its start after a checkpoint, so it stays near its largest"),
    ]
};

fn probe() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let o = StoreOptions::parse("sqlite", OPTIONS, &[]).map_err(|e| e.to_string())?;
    let s = open(dir.path(), &o).map_err(|e| e.to_string())?;
    s.session().map_err(|e| e.to_string())?;
    s.close().map_err(|e| e.to_string())
}

#[derive(Clone)]
struct Settings {
    journal: &'static str,
    synchronous: &'static str,
    cache_kib: u64,
    mmap_bytes: u64,
    busy_ms: u64,
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    // PRAGMA cache_size reads a 32-bit count of KiB: past 2 TiB it would not be what was asked.
    let cache_mb = o.mib("cache_mb")?;
    if cache_mb > (i32::MAX as u64) >> 10 {
        return Err(UsageError::new(format!(
            "--store-opt cache_mb={cache_mb}: expected at most 2097151 (SQLite's cache_size is a 32-bit count of KiB)"
        )));
    }
    Ok(Settings {
        journal: o.choice(
            "journal_mode",
            &["wal", "delete", "truncate", "persist", "memory", "off"],
        )?,
        synchronous: o.choice("synchronous", &["off", "normal", "full", "extra"])?,
        cache_kib: cache_mb * 1024,
        mmap_bytes: o.mib("mmap_mb")?.saturating_mul(1 << 20),
        busy_ms: o.u64("busy_timeout_ms")?,
    })
}

struct SqliteStore {
    path: std::path::PathBuf,
    settings: Settings,
    /// The statistics' own read-only connection.
    stats: stats::Poller<rusqlite::Connection>,
}

fn connect(path: &Path, s: &Settings) -> anyhow::Result<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)
        .map_err(|e| anyhow::anyhow!("cannot open SQLite at {}: {e}", path.display()))?;
    c.busy_timeout(std::time::Duration::from_millis(s.busy_ms))?;
    let mode: String = c.query_row(&format!("PRAGMA journal_mode={}", s.journal), [], |r| {
        r.get(0)
    })?;
    if !mode.eq_ignore_ascii_case(s.journal) {
        anyhow::bail!("SQLite refused journal_mode={} (it kept {mode})", s.journal);
    }
    c.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA cache_size=-{}; PRAGMA mmap_size={};",
        s.synchronous, s.cache_kib, s.mmap_bytes
    ))?;
    Ok(c)
}

fn open(dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let settings = settings(o)?;
    let path = dir.join("kvmeter.sqlite");
    let c = connect(&path, &settings)?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS usertable (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID",
    )?;
    Ok(Box::new(SqliteStore {
        path,
        settings,
        stats: stats::Poller::default(),
    }))
}

const SQL: [&str; 4] = [
    "SELECT value FROM usertable WHERE key = ?1",
    "INSERT OR REPLACE INTO usertable (key, value) VALUES (?1, ?2)",
    "DELETE FROM usertable WHERE key = ?1",
    "SELECT key, value FROM usertable WHERE key >= ?1 ORDER BY key LIMIT ?2",
];

impl Store for SqliteStore {
    fn stats(&self) -> &'static [stats::StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let open = || {
            use rusqlite::OpenFlags;
            let c = rusqlite::Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
            // A writer holding the database (rollback journals) makes the sample wait at most
            // this long, then fail: the interval loop waits for it.
            c.busy_timeout(std::time::Duration::from_millis(200))
                .map_err(|e| e.to_string())?;
            Ok(c)
        };
        let (pages, free, page_size) = self.stats.sample(open, |c| {
            let pragma = |p: &str| -> Result<u64, String> {
                c.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, i64>(0))
                    .map(|v| v.max(0) as u64)
                    .map_err(|e| format!("PRAGMA {p}: {e}"))
            };
            Ok((
                pragma("page_count")?,
                pragma("freelist_count")?,
                pragma("page_size")?,
            ))
        })?;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let wal = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        out.copy_from_slice(&[Some(pages), Some(free), Some(pages * page_size), Some(wal)]);
        Ok(())
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let conn = connect(&self.path, &self.settings)?;
        let mut stmts = [ptr::null_mut(); 4];
        for (i, sql) in SQL.iter().enumerate() {
            // SAFETY: a live connection; each statement is finalized in Drop before it closes.
            let rc = unsafe {
                ffi::sqlite3_prepare_v2(
                    conn.handle(),
                    sql.as_ptr().cast(),
                    sql.len() as c_int,
                    &mut stmts[i],
                    ptr::null_mut(),
                )
            };
            if rc != ffi::SQLITE_OK {
                anyhow::bail!("SQLite prepare '{sql}': {}", errmsg(&conn));
            }
        }
        Ok(Box::new(KvSession::new(SqliteRaw {
            stmts,
            conn,
            pending: None,
        })))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        // Fold the WAL into the database file so the next open starts clean.
        let c = rusqlite::Connection::open(&self.path)?;
        if self.settings.journal == "wal" {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        Ok(())
    }
}

fn errmsg(c: &rusqlite::Connection) -> String {
    // SAFETY: sqlite3_errmsg returns a string owned by the connection, copied at once.
    unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(c.handle())) }
        .to_string_lossy()
        .into_owned()
}

struct SqliteRaw {
    /// get, put, delete, scan. Declared before `conn` so they are finalized first (Drop).
    stmts: [*mut ffi::sqlite3_stmt; 4],
    conn: rusqlite::Connection,
    /// The statement a read left positioned on its row (its value is still borrowed).
    pending: Option<usize>,
}

// SAFETY: the connection and its statements are used by one thread at a time (rusqlite opens
// connections with SQLITE_OPEN_NO_MUTEX, which allows moving them between threads).
unsafe impl Send for SqliteRaw {}

impl SqliteRaw {
    #[inline]
    fn release(&mut self) {
        if let Some(i) = self.pending.take() {
            // SAFETY: a prepared statement of this session.
            unsafe { ffi::sqlite3_reset(self.stmts[i]) };
        }
    }

    #[cold]
    fn error(&self, what: &str, rc: c_int) -> RawError {
        let (kind, fatal) = match rc & 0xff {
            ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => (ErrorKind::Busy, false),
            ffi::SQLITE_FULL | ffi::SQLITE_IOERR => (ErrorKind::Io, true),
            ffi::SQLITE_CORRUPT | ffi::SQLITE_NOTADB => (ErrorKind::Corruption, true),
            _ => (ErrorKind::Other, false),
        };
        RawError::new(
            kind,
            fatal,
            format!("SQLite {what}: {}", errmsg(&self.conn)),
        )
    }

    #[inline]
    fn bind(&self, i: usize, n: c_int, b: &[u8]) {
        // SAFETY: SQLITE_STATIC: the bytes outlive the step, and the statement is reset
        // before they go away.
        unsafe {
            ffi::sqlite3_bind_blob(
                self.stmts[i],
                n,
                b.as_ptr().cast(),
                b.len() as c_int,
                ffi::SQLITE_STATIC(),
            );
        }
    }

    /// Runs a statement that returns no rows.
    fn exec(&mut self, i: usize, what: &str) -> Result<(), RawError> {
        // SAFETY: a prepared statement whose parameters were just bound.
        let rc = unsafe { ffi::sqlite3_step(self.stmts[i]) };
        let out = if rc == ffi::SQLITE_DONE {
            Ok(())
        } else {
            Err(self.error(what, rc))
        };
        unsafe { ffi::sqlite3_reset(self.stmts[i]) };
        out
    }
}

unsafe fn column(stmt: *mut ffi::sqlite3_stmt, col: c_int) -> &'static [u8] {
    let n = ffi::sqlite3_column_bytes(stmt, col) as usize;
    if n == 0 {
        return &[];
    }
    std::slice::from_raw_parts(ffi::sqlite3_column_blob(stmt, col) as *const u8, n)
}

impl RawKv for SqliteRaw {
    #[inline]
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        self.release();
        self.bind(0, 1, key);
        // SAFETY: the row's blob stays valid until the statement is reset, at the session's
        // next call; the returned slice borrows `self` for no longer than that.
        match unsafe { ffi::sqlite3_step(self.stmts[0]) } {
            ffi::SQLITE_ROW => {
                self.pending = Some(0);
                Ok(Some(unsafe { column(self.stmts[0], 0) }))
            }
            ffi::SQLITE_DONE => {
                unsafe { ffi::sqlite3_reset(self.stmts[0]) };
                Ok(None)
            }
            rc => {
                let e = self.error("read", rc);
                unsafe { ffi::sqlite3_reset(self.stmts[0]) };
                Err(e)
            }
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        self.release();
        self.bind(1, 1, key);
        self.bind(1, 2, value);
        self.exec(1, "write")
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        self.release();
        self.bind(2, 1, key);
        self.exec(2, "delete")
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError> {
        self.release();
        self.bind(3, 1, start);
        let st = self.stmts[3];
        // SAFETY: row data is used before the next step; the statement is reset at the end.
        unsafe {
            ffi::sqlite3_bind_int64(st, 2, count.min(i64::MAX as usize) as i64);
            let out = loop {
                match ffi::sqlite3_step(st) {
                    ffi::SQLITE_ROW => {
                        if let Err(e) = sink(column(st, 0), column(st, 1)) {
                            break Err(ScanError::Decode(e));
                        }
                    }
                    ffi::SQLITE_DONE => break Ok(()),
                    rc => break Err(ScanError::Store(self.error("scan", rc))),
                }
            };
            ffi::sqlite3_reset(st);
            out
        }
    }

    fn close(&mut self) -> Result<(), RawError> {
        self.release();
        Ok(())
    }
}

impl Drop for SqliteRaw {
    fn drop(&mut self) {
        for s in self.stmts {
            // SAFETY: finalized once, before the connection (dropped after this) closes.
            unsafe { ffi::sqlite3_finalize(s) };
        }
    }
}
