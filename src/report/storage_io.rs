//! I/O amplification of a phase (issue 43 item 4; papers/001 reports RocksDB's and
//! SplinterDB's throughput "before factoring in any write amplification" and guesses at where
//! WiredTiger's and the LSMs' disk traffic comes from): the bytes the store's own threads (or
//! its server's process) made the kernel write to and read from storage, over the bytes the
//! store was asked to write and returned — each figure with its source, cross-checked against
//! the store's own counters where it has them, and `unavailable: <why>` where the kernel cannot
//! know (a tmpfs data directory, a server kvmeter did not start, no permission).
//!
//! The kernel's figures are `/proc/PID/io`'s `write_bytes − cancelled_write_bytes` and
//! `read_bytes`: bytes dirtied for writeback (counted when dirtied, by the thread that dirtied
//! them, once per page until it is written back) and bytes read from the device (page-cache
//! hits are not reads). The driver takes them (`driver/storage_io.rs`); this module holds the
//! phase's figures and derives the ratios.

use super::store_stats::StoreStats;
use serde::{Deserialize, Serialize};

/// A phase's storage I/O and amplification.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct StorageIo {
    /// Whose I/O the kernel's figures are.
    pub source: String,
    /// Bytes the store wrote for storage (dirtied in the page cache, or written directly) and
    /// bytes read from the device over the phase, as the kernel counted them; null with
    /// `unavailable` saying why.
    pub write_bytes: Option<u64>,
    pub read_bytes: Option<u64>,
    /// Of `write_bytes`, those whose file was truncated or deleted before they reached the
    /// device (a write-ahead log dropped after its memtable's flush): the device saw
    /// `write_bytes − cancelled_write_bytes`.
    pub cancelled_write_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// Bytes the store was asked to write and bytes its reads returned: from its own counters
    /// (statistics whose role is user_write, user_read), else kvmeter's own count of the
    /// values it sent and got back (`ASKED`; the ratio's source says which); null where
    /// neither is known.
    pub user_write_bytes: Option<u64>,
    pub user_read_bytes: Option<u64>,
    /// kvmeter's own bytes of the phase (`ASKED`), whatever the store counts: the same base
    /// for every store, which a comparison of stores divides by; null where they do not cover
    /// the kernel's window (a warm-up).
    #[serde(default)]
    pub kvmeter_write_bytes: Option<u64>,
    #[serde(default)]
    pub kvmeter_read_bytes: Option<u64>,
    /// The bytes that reached the device (`write_bytes − cancelled_write_bytes`) and the
    /// kernel's read bytes, over the user bytes: the store's own count where it keeps one,
    /// else kvmeter's.
    pub write_amplification: Option<f64>,
    pub read_amplification: Option<f64>,
    /// The same over kvmeter's own bytes whatever the store counts: the figures to compare
    /// across stores (a store's user bytes hold a whole record where kvmeter sent one field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvmeter_write_amplification: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvmeter_read_amplification: Option<f64>,
    /// How each ratio was computed, or `unavailable: <why>`.
    pub write_amplification_source: String,
    pub read_amplification_source: String,
    /// The store's own storage write bytes (statistics whose role is storage_write: RocksDB's
    /// WAL, flush and compaction bytes) and the kernel's figure over them: near 1 when both
    /// saw the same writes.
    pub store_write_bytes: Option<u64>,
    pub kernel_over_store: Option<f64>,
    /// Bytes the data directory's files hold on disk when the phase ends: each file's
    /// allocated blocks that hold data (`report::on_disk`: space a store reserved and has not
    /// written is not data, nor are a sparse file's holes).
    pub on_disk_bytes: Option<u64>,
    /// Space reserved on disk and not written yet, apart from `on_disk_bytes`: past a file's
    /// end (RocksDB's write-ahead log reserves a memtable's worth; XFS preallocates behind a
    /// growing file) or, for a server's files, within it (etcd makes each 64 MB WAL segment
    /// that long at once, and the next one ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// Space amplification: `on_disk_bytes` over the logical data the store holds, known
    /// where a load put it into an empty store (its values with their field names; keys not
    /// counted); null otherwise, with `space_amplification_source` saying why.
    #[serde(default)]
    pub space_amplification: Option<f64>,
    #[serde(default)]
    pub space_amplification_source: String,
    /// How a distributed run's figures were put together from its agents'; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<String>,
}

impl StorageIo {
    /// The bytes the device saw written: the kernel's count less those a delete or truncate
    /// cancelled before writeback. The kernel charges a cancellation to the phase that
    /// deletes, so a phase that cancelled more than it wrote (a log written in the one before)
    /// has no such figure.
    pub fn device_write_bytes(&self) -> Option<u64> {
        self.write_bytes?
            .checked_sub(self.cancelled_write_bytes.unwrap_or(0))
    }

    /// Adds the store's counters of the phase (`stats`) and derives the ratios. A store that
    /// counts no user bytes of its own (LMDB, SQLite, WiredTiger, LevelDB, a plug-in, a
    /// server) is measured against `asked`: the bytes kvmeter itself asked it to write and got
    /// back from it, or why those cannot stand in.
    pub fn derive(&mut self, stats: Option<&StoreStats>, asked: &Asked) {
        let by_role = |role: &str| -> Option<u64> {
            let s = stats?;
            let mut found = false;
            let sum = s
                .stats
                .values()
                .filter(|f| f.role.as_deref() == Some(role))
                .map(|f| {
                    found = true;
                    f.increase.unwrap_or(0)
                })
                .sum();
            found.then_some(sum)
        };
        self.store_write_bytes = by_role("storage_write");
        (self.kvmeter_write_bytes, self.kvmeter_read_bytes) = match asked {
            Ok((w, r)) => (Some(*w), Some(*r)),
            Err(_) => (None, None),
        };
        let why = self.unavailable.clone();
        let own = |role: &str, verb: &str, pick: fn(&(u64, u64)) -> u64| match by_role(role) {
            Some(b) => (Some(b), format!("the store's user bytes {verb}")),
            None => match asked {
                Ok(a) => (Some(pick(a)), format!("kvmeter's bytes {verb} ({ASKED})")),
                Err(e) => (
                    None,
                    format!("unavailable: the store counts no user bytes {verb} and {e}"),
                ),
            },
        };
        let (user_write, write_den) = own("user_write", "written", |a| a.0);
        let (user_read, read_den) = own("user_read", "read", |a| a.1);
        self.user_write_bytes = user_write;
        self.user_read_bytes = user_read;
        let device_writes = self.device_write_bytes();
        let cancelled_more = (device_writes.is_none() && self.write_bytes.is_some()).then_some(
            "unavailable: the phase's deletes cancelled more bytes than it wrote (a log written before it), so what it wrote to the device is not known",
        );
        (self.write_amplification, self.write_amplification_source) = ratio(
            device_writes,
            user_write,
            "written",
            &write_den,
            cancelled_more.or(why.as_deref()),
        );
        (self.read_amplification, self.read_amplification_source) = ratio(
            self.read_bytes,
            user_read,
            "read",
            &read_den,
            why.as_deref(),
        );
        let over = |n: Option<u64>, d: Option<u64>| match (n, d) {
            (Some(n), Some(d)) if d > 0 => Some(n as f64 / d as f64),
            _ => None,
        };
        self.kvmeter_write_amplification = over(device_writes, self.kvmeter_write_bytes);
        self.kvmeter_read_amplification = over(self.read_bytes, self.kvmeter_read_bytes);
        // Both count what was written, a log deleted before writeback included.
        self.kernel_over_store = match (self.write_bytes, self.store_write_bytes) {
            (Some(k), Some(s)) if s > 0 => Some(k as f64 / s as f64),
            _ => None,
        };
    }

    /// A distributed phase's figures from its agents' (`each`: agent index and figures).
    /// Each agent's own store (`shared` false) is summed: the kernel's bytes, the bytes on
    /// disk and kvmeter's bytes, the ratios derived again from the sums and the merged store
    /// counters (`stats`). A server every agent drives (`shared`) is one store: the kernel's
    /// figures are those of the agent that saw its process (the lowest such agent), over
    /// every agent's bytes. A figure some agent lacks is unavailable, saying which agent.
    pub fn merged(
        each: &[(usize, &StorageIo)],
        shared: bool,
        stats: Option<&StoreStats>,
    ) -> Option<StorageIo> {
        let mut each = each.to_vec();
        each.sort_by_key(|(a, _)| *a);
        let (first_agent, first) = *each.first()?;
        let sum = |get: fn(&StorageIo) -> Option<u64>| -> Result<u64, usize> {
            each.iter()
                .map(|(a, s)| get(s).ok_or(*a))
                .sum::<Result<u64, usize>>()
        };
        let mut out = StorageIo {
            source: first.source.clone(),
            ..StorageIo::default()
        };
        let asked: Asked = match (
            sum(|s| s.kvmeter_write_bytes),
            sum(|s| s.kvmeter_read_bytes),
        ) {
            (Ok(w), Ok(r)) => Ok((w, r)),
            (Err(a), _) | (_, Err(a)) => Err(format!("agent {a} has no count of its own bytes")),
        };
        if shared {
            let seen = each.iter().find(|(_, s)| s.write_bytes.is_some());
            let (agent, kernel) = seen.copied().unwrap_or((first_agent, first));
            out.source = kernel.source.clone();
            out.write_bytes = kernel.write_bytes;
            out.read_bytes = kernel.read_bytes;
            out.cancelled_write_bytes = kernel.cancelled_write_bytes;
            out.unavailable = kernel.unavailable.clone();
            out.on_disk_bytes = kernel.on_disk_bytes;
            out.reserved_bytes = kernel.reserved_bytes;
            out.merged_from = Some(format!(
                "agent {agent}'s view of the server every agent drives, over the bytes of all {} agents",
                each.len()
            ));
        } else {
            match (sum(|s| s.write_bytes), sum(|s| s.read_bytes)) {
                (Ok(w), Ok(r)) => (out.write_bytes, out.read_bytes) = (Some(w), Some(r)),
                (Err(a), _) | (_, Err(a)) => {
                    let why = each
                        .iter()
                        .find(|(x, _)| *x == a)
                        .and_then(|(_, s)| s.unavailable.clone());
                    out.unavailable = Some(format!(
                        "unavailable: agent {a}: {}",
                        why.unwrap_or_else(|| "no figure".into())
                            .trim_start_matches("unavailable: ")
                    ));
                }
            }
            out.cancelled_write_bytes = sum(|s| s.cancelled_write_bytes).ok();
            out.on_disk_bytes = sum(|s| s.on_disk_bytes).ok();
            out.reserved_bytes = sum(|s| s.reserved_bytes).ok();
            out.merged_from = Some(format!("the sum of {} agents' own stores", each.len()));
        }
        out.derive(stats, &asked);
        let loaded = match each.iter().find(|(_, s)| s.space_amplification.is_none()) {
            None => Ok(()),
            Some((a, s)) => Err(format!(
                "agent {a}: {}",
                s.space_amplification_source
                    .trim_start_matches("unavailable: ")
            )),
        };
        if shared {
            out.space(Err(
                "a server's size on disk over every agent's load is not one store's load".into(),
            ));
        } else {
            out.space(loaded);
        }
        Some(out)
    }

    /// Space amplification of a phase that `loaded` into an empty store (or why it cannot be
    /// known): the size on disk over the bytes the load inserted.
    pub fn space(&mut self, loaded: Result<(), String>) {
        (self.space_amplification, self.space_amplification_source) =
            match (loaded, self.on_disk_bytes, self.kvmeter_write_bytes) {
                (Err(why), _, _) => (None, format!("unavailable: {why}")),
                (Ok(()), None, _) => (
                    None,
                    "unavailable: the data directory's size on disk is not known".into(),
                ),
                (Ok(()), Some(_), None) => (
                    None,
                    "unavailable: kvmeter's own counts leave out the load's warm-up".into(),
                ),
                (Ok(()), Some(_), Some(0)) => (None, "none: the load inserted nothing".into()),
                (Ok(()), Some(0), Some(_)) => (
                    None,
                    "unavailable: nothing was on disk when the load ended (the store had not written its data yet: a Redis snapshot comes later)".into(),
                ),
                (Ok(()), Some(d), Some(w)) => (
                    Some(d as f64 / w as f64),
                    "size on disk at the phase's end / the values with field names this load inserted into an empty store (keys not counted)".into(),
                ),
            };
    }

    /// The terminal's line.
    pub fn line(&self) -> String {
        let mut parts = vec![];
        match (&self.unavailable, self.write_bytes, self.read_bytes) {
            (Some(why), _, _) => parts.push(format!("kernel's storage bytes {why}")),
            (None, Some(w), Some(r)) => {
                let gone = match self.cancelled_write_bytes {
                    Some(c) if c > 0 => format!(", {} of it deleted before writeback", mb(c)),
                    _ => String::new(),
                };
                parts.push(format!("wrote {}{gone}, read {} (kernel)", mb(w), mb(r)))
            }
            _ => {}
        }
        // Each ratio names its denominator; where the store's own user bytes are one, the
        // ratio over kvmeter's bytes (the base every store shares) follows it.
        let amp = |what: &str, r: Option<f64>, source: &str, kvm: Option<f64>| {
            let r = r?;
            Some(if source.contains("kvmeter's bytes") {
                format!("{what} amplification {r:.2} (kernel over kvmeter's bytes)")
            } else {
                let also = kvm.map_or(String::new(), |k| format!(", {k:.2} over kvmeter's bytes"));
                format!("{what} amplification {r:.2} (kernel over the store's user bytes{also})")
            })
        };
        parts.extend(amp(
            "write",
            self.write_amplification,
            &self.write_amplification_source,
            self.kvmeter_write_amplification,
        ));
        parts.extend(amp(
            "read",
            self.read_amplification,
            &self.read_amplification_source,
            self.kvmeter_read_amplification,
        ));
        if let Some(k) = self.kernel_over_store {
            parts.push(format!("kernel/store's counters {k:.2}"));
        }
        if let Some(d) = self.on_disk_bytes {
            let reserved = self
                .reserved_bytes
                .filter(|&r| r >= 1_000_000)
                .map(|r| format!(" (and {} reserved, not yet written)", mb(r)))
                .unwrap_or_default();
            parts.push(format!("on disk at the end {}{reserved}", mb(d)));
        }
        if let Some(s) = self.space_amplification {
            parts.push(format!("space amplification {s:.2} (keys not counted)"));
        }
        format!("  storage  {}\n", parts.join("; "))
    }
}

/// `num / den` with its source (`den_is` names the denominator, or says why it is unknown);
/// unavailable when either is unknown, none when nothing was asked of the store.
fn ratio(
    num: Option<u64>,
    den: Option<u64>,
    verb: &str,
    den_is: &str,
    why: Option<&str>,
) -> (Option<f64>, String) {
    match (num, den) {
        (Some(n), Some(d)) if d > 0 => (
            Some(n as f64 / d as f64),
            match verb {
                "written" => format!(
                    "kernel's storage bytes written, less those deleted before writeback / {den_is}"
                ),
                _ => format!("kernel's storage bytes {verb} / {den_is}"),
            },
        ),
        (Some(_), Some(_)) => (None, format!("none: no user bytes {verb} in the phase")),
        (None, _) => (
            None,
            why.unwrap_or("unavailable: the kernel's figure is missing")
                .to_string(),
        ),
        (_, None) => (None, den_is.to_string()),
    }
}

/// What kvmeter's own counts of a phase's bytes are (the denominators of a store that keeps
/// none): written are the values (with their field names) of its inserts and updates, read
/// those its reads and scans returned; keys and the store's own record framing are not.
pub const ASKED: &str =
    "values with their field names, of inserts and updates sent and of reads and scans returned; keys not counted";

/// kvmeter's own byte counts of a phase: (written, read), or why they cannot stand beside the
/// kernel's figures.
pub type Asked = Result<(u64, u64), String>;

/// kvmeter's bytes of the phase from its op table (`mb_per_s` of a metric's name, over the
/// measured window of `seconds`). They cover only the measured window, so a phase with a
/// warm-up (whose operations the kernel counted too) has none.
pub fn asked(mb_per_s: impl Fn(&str) -> Option<f64>, seconds: f64, warmup_seconds: f64) -> Asked {
    if warmup_seconds > 0.0 {
        return Err("kvmeter's own counts leave out the warm-up the kernel's include".into());
    }
    let bytes = |names: &[&str]| -> u64 {
        names
            .iter()
            .filter_map(|n| mb_per_s(n))
            .map(|m| (m * 1e6 * seconds).round() as u64)
            .sum()
    };
    Ok((bytes(&["INSERT", "UPDATE"]), bytes(&["READ", "SCAN"])))
}

fn mb(b: u64) -> String {
    format!("{:.1} MB", b as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::store_stats::StatFigure;
    use crate::store::stats::StatKind;

    fn stats(figs: &[(&str, &str, u64)]) -> StoreStats {
        let mut s = StoreStats::default();
        for (name, role, inc) in figs {
            s.stats.insert(
                name.to_string(),
                StatFigure {
                    kind: StatKind::Counter,
                    unit: "bytes".into(),
                    role: Some(role.to_string()),
                    increase: Some(*inc),
                    end: None,
                    max: None,
                },
            );
        }
        s
    }

    #[test]
    fn ratios_come_from_the_kernel_over_the_stores_user_bytes() {
        let mut io = StorageIo {
            write_bytes: Some(3_000),
            read_bytes: Some(50),
            ..Default::default()
        };
        let s = stats(&[
            ("wal", "storage_write", 1_000),
            ("flush", "storage_write", 1_500),
            ("user", "user_write", 1_000),
            ("got", "user_read", 200),
        ]);
        io.derive(Some(&s), &Ok((7, 7)));
        assert_eq!(io.write_amplification, Some(3.0));
        assert_eq!(io.read_amplification, Some(0.25));
        assert_eq!(io.store_write_bytes, Some(2_500));
        assert_eq!(io.kernel_over_store, Some(1.2));
        assert_eq!(io.kvmeter_write_amplification, Some(3_000.0 / 7.0));
        assert!(
            io.line().contains(
                "write amplification 3.00 (kernel over the store's user bytes, 428.57 over kvmeter's bytes)"
            ),
            "{}",
            io.line()
        );
        // What a delete cancelled before writeback never reached the device: not amplified.
        io.cancelled_write_bytes = Some(1_000);
        io.derive(Some(&s), &Ok((7, 7)));
        assert_eq!(io.write_amplification, Some(2.0));
        assert_eq!(io.kernel_over_store, Some(1.2));
        // More cancelled than written (a log of the phase before deleted in this one): unknown.
        io.cancelled_write_bytes = Some(3_001);
        io.derive(Some(&s), &Ok((7, 7)));
        assert_eq!(io.write_amplification, None);
        assert!(io
            .write_amplification_source
            .contains("cancelled more bytes than it wrote"));
        assert_eq!(io.kvmeter_write_amplification, None);
    }

    #[test]
    fn what_is_not_known_says_why() {
        let mut io = StorageIo {
            unavailable: Some("unavailable: the data directory is on tmpfs".into()),
            ..Default::default()
        };
        io.derive(None, &Err("x".into()));
        assert_eq!(io.write_amplification, None);
        assert_eq!(
            io.write_amplification_source,
            "unavailable: the data directory is on tmpfs"
        );
        let mut io = StorageIo {
            write_bytes: Some(10),
            read_bytes: Some(0),
            ..Default::default()
        };
        io.derive(
            Some(&stats(&[("user", "user_write", 0)])),
            &Err("its counts leave out the warm-up".into()),
        );
        assert_eq!(io.write_amplification, None);
        assert_eq!(
            io.write_amplification_source,
            "none: no user bytes written in the phase"
        );
        assert_eq!(
            io.read_amplification_source,
            "unavailable: the store counts no user bytes read and its counts leave out the warm-up"
        );
        // A store without user-byte counters is measured against kvmeter's own bytes.
        let mut io = StorageIo {
            write_bytes: Some(4_000),
            read_bytes: Some(500),
            ..Default::default()
        };
        io.derive(None, &Ok((1_000, 2_000)));
        assert_eq!(io.write_amplification, Some(4.0));
        assert_eq!(io.read_amplification, Some(0.25));
        assert_eq!(io.user_write_bytes, Some(1_000));
        assert_eq!(io.kvmeter_write_bytes, Some(1_000));
        assert!(
            io.write_amplification_source
                .starts_with("kernel's storage bytes written, less those deleted before writeback / kvmeter's bytes written ("),
            "{}",
            io.write_amplification_source
        );
    }

    #[test]
    fn kvmeters_bytes_are_its_writes_and_reads_over_the_window() {
        use crate::measure::{new_histogram, OpStats, STATUS_SLOTS};
        use crate::report::OpSummary;
        // An op table as the phase's fill makes it: MB/s over a 4 s window.
        let op = |mb_per_s: f64| {
            let o = OpStats {
                ok: new_histogram(),
                failed: None,
                missed: None,
                intended: None,
                statuses: [0; STATUS_SLOTS],
                bytes: (mb_per_s * 4e6) as u64,
            };
            OpSummary::from_stats(&o, 4.0)
        };
        let ops: std::collections::BTreeMap<String, OpSummary> = [
            ("INSERT", 1.0),
            ("UPDATE", 0.5),
            ("READ-MODIFY-WRITE", 9.0),
            ("READ", 2.0),
            ("SCAN", 0.25),
        ]
        .into_iter()
        .map(|(n, m)| (n.to_string(), op(m)))
        .collect();
        // 1.5 MB/s written and 2.25 MB/s read for 4 s; a read-modify-write's bytes are its
        // read's and its update's.
        let mb = |n: &str| ops.get(n).map(|o| o.mb_per_s);
        assert_eq!(asked(mb, 4.0, 0.0), Ok((6_000_000, 9_000_000)));
        assert!(asked(mb, 4.0, 1.0).unwrap_err().contains("warm-up"));
    }

    #[test]
    fn space_amplification_is_known_after_a_load_into_an_empty_store_only() {
        let mut io = StorageIo {
            on_disk_bytes: Some(3_000),
            kvmeter_write_bytes: Some(1_000),
            ..Default::default()
        };
        io.space(Ok(()));
        assert_eq!(io.space_amplification, Some(3.0));
        assert!(io
            .line()
            .contains("space amplification 3.00 (keys not counted)"));
        io.space(Err("the data directory held data before this run".into()));
        assert_eq!(io.space_amplification, None);
        assert_eq!(
            io.space_amplification_source,
            "unavailable: the data directory held data before this run"
        );
        io.kvmeter_write_bytes = None;
        io.space(Ok(()));
        assert!(io.space_amplification_source.contains("warm-up"));
    }
}
