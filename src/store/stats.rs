//! What a store says about itself (issue 43): the statistics each store declares — name,
//! unit, counter or gauge, a one-line meaning, and the part it plays in kvmeter's figures —
//! and samples on the interval clock, so a run can say why a figure is what it is (papers/000
//! explains its results by flushes and compactions, papers/001 by write amplification,
//! papers/004 by compaction I/O). The driver samples them (`driver/store_stats.rs`) and the
//! report keeps them (`report/store_stats.rs`); a store that declares none reports none.

/// A counter only grows while the store is open (a phase reports its increase); a gauge is a
/// level (a phase reports its value at the end and its highest sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatKind {
    Counter,
    Gauge,
}

/// The part a statistic plays in kvmeter's own figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Nothing beyond itself.
    Plain,
    /// The store's own work or trouble, counted (flushes, compactions, evictions, forks,
    /// refused connections): the terminal's line names each that happened in the phase.
    Work,
    /// Bytes the store wrote to storage (WAL, flush, compaction): write amplification's
    /// numerator.
    StorageWrite,
    /// Bytes of keys and values the store was asked to write: write amplification's
    /// denominator.
    UserWrite,
    /// Bytes the store's reads returned: read amplification's denominator.
    UserRead,
    /// A cache's hits and misses: the phase's hit ratio.
    CacheHit,
    CacheMiss,
    /// Time writers were held back (µs).
    Stall,
    /// Work the store owes (bytes or files still to compact): a gauge that must not grow for
    /// a load to be sustainable.
    Backlog,
    /// Memory holding what the store accepted and has not yet flushed to its data files
    /// (RocksDB's memtables; their WAL bytes are already written): a gauge in bytes. What it
    /// holds at a phase's end is flushed by the store's close, after the phase's last sample,
    /// so the phase's write amplification leaves that flush out and the terminal says so. Not a
    /// backlog: it rises and falls with every flush however sustainable the load.
    Unwritten,
}

/// One statistic a store declares.
#[derive(Clone, Copy, Debug)]
pub struct StatSpec {
    /// The column name in store_stats.csv and the key in summary.json (`[a-z0-9_]+`).
    pub name: &'static str,
    /// `count`, `bytes`, `us`, `files`, `bytes/s` or `bool`.
    pub unit: &'static str,
    pub kind: StatKind,
    pub role: Role,
    pub meaning: &'static str,
}

/// A declaration in one line, for the stores' lists.
pub const fn stat(
    name: &'static str,
    unit: &'static str,
    kind: StatKind,
    role: Role,
    meaning: &'static str,
) -> StatSpec {
    StatSpec {
        name,
        unit,
        kind,
        role,
        meaning,
    }
}

/// Something the store did at a moment of its own clock (issue 43, "events on the
/// timeline"): a flush or compaction starting or ending, writes slowed down or stopped. Read
/// from the store's own log; `store_events.csv` keeps each, on the phase's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreEvent {
    /// When, in Unix microseconds (the store's own timestamp).
    pub unix_us: u64,
    /// `flush_started`, `flush_finished`, `compaction_started`, `compaction_finished`,
    /// `write_slowdown`, `write_stop`.
    pub event: &'static str,
    /// The store's job number (a flush's or compaction's start and end share it).
    pub job: Option<u64>,
    /// Bytes the event concerns: a flush's memtable data, a compaction's input at its start
    /// and output at its end.
    pub bytes: Option<u64>,
    /// How long it lasted, where the store says so in one event (a Redis latency spike).
    pub duration_us: Option<u64>,
    /// A short account in the store's words (a reason, a level), at most 200 bytes.
    pub detail: String,
}

/// The most events one poll returns; more in one interval are counted as left out.
pub const MAX_EVENTS_PER_POLL: usize = 10_000;

/// An event's detail: at most 200 bytes, cut at a character boundary.
pub fn event_detail(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A server's statistics (memcached `stats`, Redis `INFO`) are read on a connection of their
/// own, opened at the first sample and again after one fails: never one that carries load, so
/// they are not counted as operations and never queue behind them. The lock is taken once per
/// sample, by the interval loop's thread only; the hot path never sees it.
pub struct Poller<C> {
    conn: std::sync::Mutex<Option<C>>,
}

impl<C> Default for Poller<C> {
    fn default() -> Self {
        Poller {
            conn: std::sync::Mutex::new(None),
        }
    }
}

impl<C> Poller<C> {
    /// `ask` on the open connection (`open` first when there is none); a failure drops the
    /// connection, so the next sample starts on a fresh one.
    pub fn sample<T>(
        &self,
        open: impl FnOnce() -> Result<C, String>,
        ask: impl FnOnce(&mut C) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(open()?);
        }
        let r = ask(slot.as_mut().expect("opened above"));
        if r.is_err() {
            *slot = None;
        }
        r
    }
}

/// The most bytes one answer of a server's statistics may hold (memcached's `stats` is about
/// 3 KB, Redis's `INFO all` about 10 KB): more is a hostile or broken server.
pub const REPLY_LIMIT: usize = 256 << 10;

/// How long a server's statistics may take to arrive: the request's deadline, at most a
/// second, since the interval loop waits for them.
pub fn deadline(request: std::time::Duration) -> std::time::Duration {
    request.min(std::time::Duration::from_secs(1))
}

/// Sets each declared statistic that `name` names to `value` (an unsigned integer; anything
/// else leaves it unset). Servers name their statistics as the declarations do.
pub fn set(specs: &[StatSpec], out: &mut [Option<u64>], name: &str, value: &str) {
    if let Some(i) = specs.iter().position(|s| s.name == name) {
        out[i] = value.trim().parse().ok();
    }
}

#[cfg(test)]
mod tests {
    /// Every declared name is a column name a CSV reader and pandas take as it is.
    #[test]
    fn declared_names_are_plain_columns() {
        let mut all: Vec<&super::StatSpec> = vec![];
        #[cfg(feature = "rocksdb")]
        all.extend(crate::store::rocksdb::STATS);
        #[cfg(feature = "lmdb")]
        all.extend(crate::store::lmdb::STATS);
        #[cfg(feature = "leveldb")]
        all.extend(crate::store::leveldb::STATS);
        #[cfg(feature = "sqlite")]
        all.extend(crate::store::sqlite::STATS);
        #[cfg(feature = "wiredtiger")]
        all.extend(crate::store::wiredtiger::STATS);
        all.extend(crate::store::memcached::STATS);
        all.extend(crate::store::redis::STATS);
        all.extend(crate::store::etcd::STATS);
        for s in all {
            assert!(
                !s.name.is_empty()
                    && s.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                s.name
            );
        }
    }
}

#[cfg(test)]
mod set_tests {
    use super::*;

    const SPECS: &[StatSpec] = &[StatSpec {
        name: "evictions",
        unit: "count",
        kind: StatKind::Counter,
        role: Role::Plain,
        meaning: "",
    }];

    #[test]
    fn only_declared_unsigned_integers_are_taken() {
        let mut out = [None];
        set(SPECS, &mut out, "evictions", "12\r");
        assert_eq!(out, [Some(12)]);
        set(SPECS, &mut out, "evictions", "-1");
        assert_eq!(out, [None]);
        set(SPECS, &mut out, "other", "5");
        assert_eq!(out, [None]);
        set(SPECS, &mut out, "evictions", "99999999999999999999999");
        assert_eq!(out, [None]);
    }
}
