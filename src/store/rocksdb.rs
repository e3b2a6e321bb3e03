//! `rocksdb`: the embedded default store (papers/000, papers/001, papers/004 all measure it).
//!
//! A record is one encoded value under its key (`record.rs`), as YCSB's RocksDB binding keeps
//! it; an update reads, merges and writes back, as that binding does. `databases=N` spreads
//! keys over N independent DB instances by a hash of the key, the way papers/000 runs 4–16
//! databases; a scan then merges the N ordered streams.

use super::kv::{undecodable, RawError};
use super::stats::{Role, StatKind, StatSpec};
use super::*;
use crate::error::UsageError;
use ::rocksdb::statistics::{Histogram, StatsLevel, Ticker};
use ::rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DBPinnableSlice, Options, ReadOptions,
    WriteOptions, DB,
};
use std::sync::Arc;

const OPTIONS: &[OptSpec] = &[
    OptSpec { name: "block_cache_mb", default: "64", help: "block cache size in MiB, shared by all databases (0: a cache that keeps nothing, so every block is read from its file, through the OS page cache)" },
    OptSpec { name: "block_cache", default: "lru", help: "lru (RocksDB's and YCSB's binding's default) or hyper_clock (lock-free; the default of db_bench 11.8, not of 7.8)" },
    OptSpec { name: "direct_reads", default: "false", help: "O_DIRECT for user reads and compaction inputs (bypasses the page cache; needs a filesystem that supports it, not tmpfs)" },
    OptSpec { name: "direct_io_flush_compaction", default: "false", help: "O_DIRECT for flush and compaction writes" },
    OptSpec { name: "wal", default: "true", help: "write-ahead log on/off" },
    OptSpec { name: "sync", default: "false", help: "fsync the WAL on every write" },
    OptSpec { name: "compression", default: "snappy", help: "none, snappy, lz4 or zstd" },
    OptSpec { name: "write_buffer_mb", default: "64", help: "memtable size in MiB" },
    OptSpec { name: "bloom_bits", default: "10", help: "bloom filter bits per key (0: no filter)" },
    OptSpec { name: "max_background_jobs", default: "2", help: "flush and compaction threads" },
    OptSpec { name: "l0_compaction_trigger", default: "4", help: "level-0 files that start a compaction into level 1 (level0_file_num_compaction_trigger)" },
    OptSpec { name: "l0_slowdown_trigger", default: "20", help: "level-0 files at which writes are slowed (level0_slowdown_writes_trigger; at least l0_compaction_trigger)" },
    OptSpec { name: "l0_stop_trigger", default: "36", help: "level-0 files at which writes stop until a compaction ends (level0_stop_writes_trigger; at least l0_slowdown_trigger)" },
    OptSpec { name: "databases", default: "1", help: "independent DB instances the keys are spread over (papers/000 uses 4-16)" },
    OptSpec { name: "statistics", default: "basic", help: "RocksDB's Statistics object, sampled into store_stats.csv: basic (its counters only, no histogram or timer: StatsLevel kExceptHistogramOrTimers), timers (RocksDB's and db_bench's default level: adds the latency histograms, so the count of compactions, at a cost to every operation), all (timers inside the mutex and of compression too), or off (none: the DB properties only); costs in BENCHMARKS.md" },
];

pub static KIND: StoreKind = StoreKind {
    name: "rocksdb",
    summary: "RocksDB, embedded (the default)",
    options: OPTIONS,
    capabilities: Capabilities {
        scan: true,
        persistent: true,
        stores_data: true,
    },
    version: || env!("KVMETER_ROCKSDB_VERSION").to_string(),
    probe,
    check: |o| settings(o).map(|_| ()),
    open,
    server: None,
    engine: None,
    scans_refused: super::scans_always_served,
    stats: STATS,
    profile_symbols: &["rocksdb::", "rocksdb_"],
};

fn probe() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let mut opts = Options::default();
    opts.create_if_missing(true);
    let db = DB::open(&opts, dir.path()).map_err(|e| e.to_string())?;
    db.put(b"k", b"v").map_err(|e| e.to_string())?;
    Ok(())
}

struct RocksStore {
    dbs: Arc<[DB]>,
    write_opts_wal: bool,
    write_opts_sync: bool,
    _cache: Cache,
    /// The options the databases were opened with: their `Statistics` object (`STATS`).
    opts: Options,
    /// The Statistics object's level; `None` (statistics=off): no counters, the properties
    /// remain.
    statistics: Option<StatsLevel>,
    /// Each database's LOG, read for its flushes, compactions and stalls.
    logs: super::rocksdb_log::Logs,
}

struct Settings {
    cache_mb: u64,
    hyper_clock: bool,
    direct_reads: bool,
    direct_fc: bool,
    wal: bool,
    sync: bool,
    compression: DBCompressionType,
    write_buffer_mb: u64,
    bloom_bits: u64,
    jobs: u64,
    databases: u64,
    statistics: Option<StatsLevel>,
    /// Level-0 compaction, slowdown and stop triggers.
    l0: [i32; 3],
}

/// The level-0 triggers, checked in order: RocksDB raises a slowdown below the compaction
/// trigger, or a stop below the slowdown, silently; kvmeter says so instead.
fn l0_triggers(o: &StoreOptions) -> Result<[i32; 3], UsageError> {
    let names = [
        "l0_compaction_trigger",
        "l0_slowdown_trigger",
        "l0_stop_trigger",
    ];
    let mut out = [0i32; 3];
    for (i, n) in names.iter().enumerate() {
        let v = o.positive(n)?;
        out[i] = i32::try_from(v).map_err(|_| {
            UsageError::new(format!(
                "--store-opt {n}={v}: expected at most {}",
                i32::MAX
            ))
        })?;
        if i > 0 && out[i] < out[i - 1] {
            return Err(UsageError::new(format!(
                "--store-opt {n}={v}: expected at least {}={} (RocksDB would raise it silently)",
                names[i - 1],
                out[i - 1]
            )));
        }
    }
    Ok(out)
}

fn settings(o: &StoreOptions) -> Result<Settings, UsageError> {
    let wal = o.bool("wal")?;
    let sync = o.bool("sync")?;
    if sync && !wal {
        return Err(UsageError::new(
            "--store-opt sync=true needs wal=true: there is no log to sync with the WAL off",
        ));
    }
    let databases = o.positive("databases")?;
    if databases > 1024 {
        return Err(UsageError::new(format!(
            "--store-opt databases={databases}: expected at most 1024"
        )));
    }
    Ok(Settings {
        cache_mb: o.mib("block_cache_mb")?,
        hyper_clock: o.choice("block_cache", &["lru", "hyper_clock"])? == "hyper_clock",
        direct_reads: o.bool("direct_reads")?,
        direct_fc: o.bool("direct_io_flush_compaction")?,
        wal,
        sync,
        compression: match o.choice("compression", &["none", "snappy", "lz4", "zstd"])? {
            "none" => DBCompressionType::None,
            "snappy" => DBCompressionType::Snappy,
            "lz4" => DBCompressionType::Lz4,
            _ => DBCompressionType::Zstd,
        },
        write_buffer_mb: o.positive_mib("write_buffer_mb")?,
        bloom_bits: o.u64("bloom_bits")?,
        jobs: o.positive("max_background_jobs")?,
        databases,
        statistics: match o.choice("statistics", &["basic", "timers", "all", "off"])? {
            "basic" => Some(StatsLevel::ExceptHistogramOrTimers),
            "timers" => Some(StatsLevel::ExceptDetailedTimers),
            "all" => Some(StatsLevel::All),
            _ => None,
        },
        l0: l0_triggers(o)?,
    })
}

fn open(dir: &Path, o: &StoreOptions) -> anyhow::Result<Box<dyn Store>> {
    let Settings {
        cache_mb,
        hyper_clock,
        direct_reads,
        direct_fc,
        wal,
        sync,
        compression,
        write_buffer_mb,
        bloom_bits,
        jobs,
        databases,
        statistics,
        l0,
    } = settings(o)?;
    let cache = if hyper_clock {
        // 0: the entry charge is estimated as the cache fills (AutoHyperClockCache).
        Cache::new_hyper_clock_cache((cache_mb as usize) << 20, 0)
    } else {
        Cache::new_lru_cache((cache_mb as usize) << 20)
    };
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    if bloom_bits > 0 {
        table.set_bloom_filter(bloom_bits as f64, false);
    }
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_use_direct_reads(direct_reads);
    opts.set_use_direct_io_for_flush_and_compaction(direct_fc);
    opts.set_compression_type(compression);
    opts.set_write_buffer_size((write_buffer_mb as usize) << 20);
    opts.set_max_background_jobs(jobs as i32);
    opts.set_level_zero_file_num_compaction_trigger(l0[0]);
    opts.set_level_zero_slowdown_writes_trigger(l0[1]);
    opts.set_level_zero_stop_writes_trigger(l0[2]);
    opts.set_block_based_table_factory(&table);
    // The store's own accounting (issue 43): by default its counters only. On 2 vCPUs
    // (BENCHMARKS.md) RocksDB's own default level (db_bench --statistics), which times every
    // call, cost 4-9 % of throughput, and histograms without timers 5-11 % of reads: past the
    // 2 % a default may cost; counters alone are within the noise.
    if let Some(level) = statistics {
        opts.enable_statistics();
        opts.set_statistics_level(level);
    }

    let mut dbs = Vec::with_capacity(databases as usize);
    let paths: Vec<_> = (0..databases).map(|i| dir.join(format!("db{i}"))).collect();
    for path in &paths {
        let db = DB::open(&opts, path)
            .map_err(|e| anyhow::anyhow!("cannot open RocksDB at {}: {e}", path.display()))?;
        dbs.push(db);
    }
    Ok(Box::new(RocksStore {
        dbs: dbs.into(),
        write_opts_wal: wal,
        write_opts_sync: sync,
        _cache: cache,
        opts,
        statistics,
        logs: super::rocksdb_log::Logs::new(&paths),
    }))
}

/// The statistics RocksDB reports (db_bench `--statistics`, `DB::GetIntProperty`): tickers
/// and histogram counts from the `Statistics` object all of a store's databases share, and
/// properties summed over them (the block cache's usage once: the cache is shared).
pub static STATS: &[StatSpec] = &[
    StatSpec { name: "flushes", unit: "count", kind: StatKind::Counter, role: Role::Work, meaning: "memtables RocksDB itself sent to flush: full, over the memory limit or past its range deletions (rocksdb.flush.reason.*; a manual flush is not counted; one flush job may write two)" },
    StatSpec { name: "flush_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::StorageWrite, meaning: "bytes flushes wrote to SST files (rocksdb.flush.write.bytes)" },
    StatSpec { name: "compactions", unit: "count", kind: StatKind::Counter, role: Role::Work, meaning: "compactions finished (rocksdb.compaction.times.micros count: statistics=timers or all only, the timers basic skips)" },
    StatSpec { name: "compaction_read_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::Plain, meaning: "bytes compactions read (rocksdb.compact.read.bytes)" },
    StatSpec { name: "compaction_write_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::StorageWrite, meaning: "bytes compactions wrote (rocksdb.compact.write.bytes)" },
    StatSpec { name: "wal_bytes", unit: "bytes", kind: StatKind::Counter, role: Role::StorageWrite, meaning: "bytes written to the write-ahead log (rocksdb.wal.bytes)" },
    StatSpec { name: "wal_syncs", unit: "count", kind: StatKind::Counter, role: Role::Work, meaning: "write-ahead log syncs (rocksdb.wal.synced)" },
    StatSpec { name: "user_bytes_written", unit: "bytes", kind: StatKind::Counter, role: Role::UserWrite, meaning: "bytes of the write batches the application wrote: keys, values and their framing, 16 bytes a put (rocksdb.bytes.written)" },
    StatSpec { name: "user_bytes_read", unit: "bytes", kind: StatKind::Counter, role: Role::UserRead, meaning: "value bytes point reads returned (rocksdb.bytes.read)" },
    StatSpec { name: "scan_bytes_read", unit: "bytes", kind: StatKind::Counter, role: Role::UserRead, meaning: "key and value bytes iterators (scans) returned (rocksdb.db.iter.bytes.read); point reads do not count here" },
    StatSpec { name: "stall_us", unit: "us", kind: StatKind::Counter, role: Role::Stall, meaning: "time writers were delayed or stopped by a write stall (rocksdb.stall.micros)" },
    StatSpec { name: "block_cache_hits", unit: "count", kind: StatKind::Counter, role: Role::CacheHit, meaning: "block cache hits (rocksdb.block.cache.hit)" },
    StatSpec { name: "block_cache_misses", unit: "count", kind: StatKind::Counter, role: Role::CacheMiss, meaning: "block cache misses (rocksdb.block.cache.miss)" },
    StatSpec { name: "bloom_useful", unit: "count", kind: StatKind::Counter, role: Role::Plain, meaning: "reads a bloom filter answered without reading the file (rocksdb.bloom.filter.useful)" },
    StatSpec { name: "l0_files", unit: "files", kind: StatKind::Gauge, role: Role::Backlog, meaning: "SST files in level 0 (rocksdb.num-files-at-level0)" },
    StatSpec { name: "pending_compaction_bytes", unit: "bytes", kind: StatKind::Gauge, role: Role::Backlog, meaning: "bytes compaction still has to rewrite to reach the level targets (rocksdb.estimate-pending-compaction-bytes)" },
    StatSpec { name: "flush_pending", unit: "bool", kind: StatKind::Gauge, role: Role::Plain, meaning: "1 while a flush waits to start (rocksdb.mem-table-flush-pending)" },
    StatSpec { name: "running_flushes", unit: "count", kind: StatKind::Gauge, role: Role::Plain, meaning: "flushes running (rocksdb.num-running-flushes)" },
    StatSpec { name: "running_compactions", unit: "count", kind: StatKind::Gauge, role: Role::Plain, meaning: "compactions running (rocksdb.num-running-compactions)" },
    StatSpec { name: "write_stopped", unit: "bool", kind: StatKind::Gauge, role: Role::Plain, meaning: "1 while writes are stopped (rocksdb.is-write-stopped)" },
    StatSpec { name: "delayed_write_rate", unit: "bytes/s", kind: StatKind::Gauge, role: Role::Plain, meaning: "the write rate a slowdown allows, 0 when none (rocksdb.actual-delayed-write-rate)" },
    StatSpec { name: "memtable_bytes", unit: "bytes", kind: StatKind::Gauge, role: Role::Unwritten, meaning: "bytes of all memtables, active and immutable (rocksdb.cur-size-all-mem-tables): memory holding what flushes still to come write to SST files" },
    StatSpec { name: "block_cache_bytes", unit: "bytes", kind: StatKind::Gauge, role: Role::Plain, meaning: "bytes in the block cache (rocksdb.block-cache-usage)" },
    StatSpec { name: "live_sst_bytes", unit: "bytes", kind: StatKind::Gauge, role: Role::Plain, meaning: "bytes of the SST files of the current version (rocksdb.live-sst-files-size)" },
];

impl Store for RocksStore {
    fn stats(&self) -> &'static [StatSpec] {
        STATS
    }

    fn sample_stats(&self, out: &mut [Option<u64>]) -> Result<(), String> {
        let o = &self.opts;
        let on = self.statistics.is_some();
        let t = |k| on.then(|| o.get_ticker_count(k));
        // Timer histograms are recorded from `timers` up (RocksDB's kExceptDetailedTimers).
        let timed = matches!(
            self.statistics,
            Some(StatsLevel::ExceptDetailedTimers | StatsLevel::All)
        );
        let prop = |name: &str| {
            let dbs = if name == "rocksdb.block-cache-usage" {
                &self.dbs[..1] // one cache shared by every database
            } else {
                &self.dbs[..]
            };
            dbs.iter().try_fold(0u64, |sum, db| {
                Some(sum + db.property_int_value(name).ok().flatten()?)
            })
        };
        let flushes = [
            Ticker::FlushReasonWriteBufferFull,
            Ticker::FlushReasonWriteBufferManager,
            Ticker::FlushReasonMemtableMaxRangeDeletions,
        ]
        .into_iter()
        .map(t)
        .sum::<Option<u64>>();
        let values = [
            flushes,
            t(Ticker::FlushWriteBytes),
            timed.then(|| o.get_histogram_data(Histogram::CompactionTime).count()),
            t(Ticker::CompactReadBytes),
            t(Ticker::CompactWriteBytes),
            t(Ticker::WalFileBytes),
            t(Ticker::WalFileSynced),
            t(Ticker::BytesWritten),
            t(Ticker::BytesRead),
            t(Ticker::IterBytesRead),
            t(Ticker::StallMicros),
            t(Ticker::BlockCacheHit),
            t(Ticker::BlockCacheMiss),
            t(Ticker::BloomFilterUseful),
            prop("rocksdb.num-files-at-level0"),
            prop("rocksdb.estimate-pending-compaction-bytes"),
            prop("rocksdb.mem-table-flush-pending"),
            prop("rocksdb.num-running-flushes"),
            prop("rocksdb.num-running-compactions"),
            prop("rocksdb.is-write-stopped"),
            prop("rocksdb.actual-delayed-write-rate"),
            prop("rocksdb.cur-size-all-mem-tables"),
            prop("rocksdb.block-cache-usage"),
            prop("rocksdb.live-sst-files-size"),
        ];
        out.copy_from_slice(&values);
        Ok(())
    }

    fn poll_events(&self, out: &mut Vec<super::stats::StoreEvent>) -> Result<(), String> {
        self.logs.poll(out)
    }

    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        let mut write = WriteOptions::default();
        write.disable_wal(!self.write_opts_wal);
        write.set_sync(self.write_opts_sync);
        Ok(Box::new(RocksSession {
            pinned: None,
            spans: Vec::new(),
            dbs: self.dbs.clone(),
            read: ReadOptions::default(),
            write,
            encoded: Vec::new(),
            current: Record::new(),
            merged: Record::new(),
            scratch: Vec::new(),
            last_error: None,
        }))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        for db in self.dbs.iter() {
            // Flushing the memtable makes the next open fast and keeps reopen tests honest
            // even with the WAL off.
            db.flush()
                .map_err(|e| anyhow::anyhow!("RocksDB flush at close failed: {e}"))?;
        }
        Ok(())
    }
}

struct RocksSession {
    /// The last read's value, pinned in RocksDB's block cache (or memtable) until the next
    /// read. Declared before `dbs` so it is dropped first.
    pinned: Option<DBPinnableSlice<'static>>,
    spans: Vec<record::Span>,
    dbs: Arc<[DB]>,
    read: ReadOptions,
    write: WriteOptions,
    encoded: Vec<u8>,
    current: Record,
    merged: Record,
    scratch: Vec<(Vec<u8>, Vec<u8>)>,
    last_error: Option<String>,
}

/// The database a key lives in (FNV-1a over the key bytes when there are several).
#[inline]
fn pick<'a>(dbs: &'a [DB], key: &[u8]) -> &'a DB {
    if dbs.len() == 1 {
        return &dbs[0];
    }
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in key {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01B3);
    }
    &dbs[(h % dbs.len() as u64) as usize]
}

#[cold]
fn fail(last: &mut Option<String>, e: ::rocksdb::Error) -> Status {
    use ::rocksdb::ErrorKind as K;
    let (kind, fatal) = match e.kind() {
        K::IOError => (ErrorKind::Io, true),
        K::Corruption => (ErrorKind::Corruption, true),
        K::ShutdownInProgress => (ErrorKind::Other, true),
        K::TimedOut => (ErrorKind::Timeout, false),
        K::Busy | K::TryAgain => (ErrorKind::Busy, false),
        K::NotSupported => (ErrorKind::NotImplemented, false),
        _ => (ErrorKind::Other, false),
    };
    super::kv::fail(last, RawError::new(kind, fatal, e.into_string()))
}

impl Session for RocksSession {
    fn read(&mut self, _table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        self.pinned = None;
        match pick(&self.dbs, key).get_pinned_opt(key, &self.read) {
            Ok(Some(v)) => {
                // SAFETY: `v` borrows a DB owned by `self.dbs`, an Arc this session holds for
                // its whole life and never replaces; `pinned` is dropped before `dbs` (field
                // order) and is released at the start of every read, so the slice never
                // outlives the DB. The returned view borrows `self`, so it cannot outlive it.
                let v: DBPinnableSlice<'static> = unsafe { std::mem::transmute(v) };
                let bytes: &[u8] = self.pinned.insert(v);
                match record::index_encoded(bytes, |n| fields.wants(n), &mut self.spans) {
                    Ok(()) => (Status::Ok, RecordView::new(bytes, &self.spans)),
                    Err(e) => (undecodable(&mut self.last_error, e), RecordView::EMPTY),
                }
            }
            Ok(None) => (Status::NotFound, RecordView::EMPTY),
            Err(e) => (fail(&mut self.last_error, e), RecordView::EMPTY),
        }
    }

    fn scan(
        &mut self,
        _table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        out.clear();
        // Each scan creates a RocksDB iterator (RocksDB allocates it), as YCSB's binding does;
        // the records themselves go into the reused ScanOut buffers.
        if self.dbs.len() == 1 {
            let mut it = self.dbs[0].raw_iterator_opt(ReadOptions::default());
            it.seek(start);
            while it.valid() && out.len() < count {
                let (k, r) = out.next_slot();
                k.extend_from_slice(it.key().unwrap_or_default());
                if let Err(e) = r.decode_from(it.value().unwrap_or_default(), |n| fields.wants(n)) {
                    return undecodable(&mut self.last_error, e);
                }
                it.next();
            }
            return match it.status() {
                Ok(()) => Status::Ok,
                Err(e) => fail(&mut self.last_error, e),
            };
        }
        // Several databases: take up to `count` from each, then the `count` smallest keys.
        let mut used = 0;
        for db in self.dbs.iter() {
            let mut it = db.raw_iterator_opt(ReadOptions::default());
            it.seek(start);
            let mut n = 0;
            while it.valid() && n < count {
                if used == self.scratch.len() {
                    self.scratch.push((Vec::new(), Vec::new()));
                }
                let (k, v) = &mut self.scratch[used];
                k.clear();
                v.clear();
                k.extend_from_slice(it.key().unwrap_or_default());
                v.extend_from_slice(it.value().unwrap_or_default());
                used += 1;
                n += 1;
                it.next();
            }
            if let Err(e) = it.status() {
                return fail(&mut self.last_error, e);
            }
        }
        let slice = &mut self.scratch[..used];
        slice.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for i in 0..used.min(count) {
            let (k, r) = out.next_slot();
            k.extend_from_slice(&self.scratch[i].0);
            if let Err(e) = r.decode_from(&self.scratch[i].1, |n| fields.wants(n)) {
                return undecodable(&mut self.last_error, e);
            }
        }
        Status::Ok
    }

    fn update(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let decoded = match pick(&self.dbs, key).get_pinned_opt(key, &self.read) {
            Ok(Some(v)) => self.current.decode_from(&v, |_| true),
            Ok(None) => return Status::NotFound,
            Err(e) => return fail(&mut self.last_error, e),
        };
        if let Err(e) = decoded {
            return undecodable(&mut self.last_error, e);
        }
        self.merged.merge_from(&self.current, values);
        self.encoded.clear();
        self.merged.encode_into(&mut self.encoded);
        match pick(&self.dbs, key).put_opt(key, &self.encoded, &self.write) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn insert(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        self.encoded.clear();
        values.encode_into(&mut self.encoded);
        match pick(&self.dbs, key).put_opt(key, &self.encoded, &self.write) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn delete(&mut self, _table: &str, key: &[u8]) -> Status {
        match pick(&self.dbs, key).delete_opt(key, &self.write) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }
}
