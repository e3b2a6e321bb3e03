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
    /// Bytes the store wrote to storage (WAL, flush, compaction): write amplification's
    /// numerator.
    StorageWrite,
    /// Bytes of keys and values the store was asked to write: write amplification's
    /// denominator.
    UserWrite,
    /// A cache's hits and misses: the phase's hit ratio.
    CacheHit,
    CacheMiss,
    /// Time writers were held back (µs).
    Stall,
    /// Work the store owes (bytes or files still to compact): a gauge that must not grow for
    /// a load to be sustainable.
    Backlog,
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

#[cfg(test)]
mod tests {
    /// Every declared name is a column name a CSV reader and pandas take as it is.
    #[test]
    fn declared_names_are_plain_columns() {
        #[cfg(feature = "rocksdb")]
        for s in crate::store::rocksdb::STATS {
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
