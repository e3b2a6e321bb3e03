//! The run directory, written as the run goes so that a crash of the store or of kvmeter leaves
//! every completed interval readable: `intervals.csv` and the HDR logs are appended and flushed
//! at every interval; `manifest.json` and `summary.json` are replaced atomically (write, fsync,
//! rename), so they are always whole.
//!
//! Safe in a shared place (review F8): the directory is made by this process (`mkdir`, which
//! fails on anything already there), or is an empty one this user owns and no one else may
//! write; a default name that exists gets a suffix, never reused. Every file inside is created
//! new (`O_CREAT|O_EXCL`) and opened with `O_NOFOLLOW`, and `write_atomic`'s temporary has a
//! random name, so a symbolic link planted inside is never followed: the open fails instead.

use super::atomic::random_suffix;
pub use super::atomic::{create_new, write_atomic};
use crate::measure::{percentile, Stats};
use anyhow::Context;
use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub const INTERVALS_HEADER: &str = "phase,interval,start_s,end_s,warmup,metric,count,errors,ops_per_s,mb_per_s,avg_us,p50_us,p90_us,p99_us,p99_9_us,max_us,intended_p50_us,intended_p99_us,intended_max_us,offered_ops_per_s,send_lag_p99_us,send_lag_max_us,behind_ms";

/// The schedule's side of an interval (paced and open-loop phases): the offered rate and, in
/// open loop, how far the schedule was behind at the interval's end.
#[derive(Clone, Copy, Debug)]
pub struct ScheduleFigures {
    pub offered_ops_per_s: f64,
    pub behind_ms: Option<f64>,
}

pub struct RunDir {
    root: PathBuf,
    intervals: BufWriter<File>,
    hlogs: HashMap<String, BufWriter<File>>,
    serializer: V2DeflateSerializer,
    scratch: Vec<u8>,
    /// A distributed run's merged directory: how many agents the next interval merges (the
    /// `agents` column of intervals.csv); `None` for one process's run.
    agents: Option<usize>,
}

fn epoch_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Makes `root` a new, empty results directory (a run's, or an experiment's holding many runs)
/// and returns it. A name kvmeter chose itself (`plan::default_out`) is always created new,
/// with `-2`, `-3`, … (then a random suffix) when it exists. A given `--out` that exists is
/// accepted only empty, owned by this user and writable by no one else, since kvmeter never
/// overwrites results nor writes where another user can plant links.
pub fn claim(root: &Path) -> Result<PathBuf, crate::error::UsageError> {
    let bad =
        |why: String| crate::error::UsageError::new(format!("--out {}: {why}", root.display()));
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)
            .map_err(|e| bad(format!("cannot create it: {e}; choose a writable --out")))?;
        warn_if_shared(parent);
    }
    if crate::plan::is_default_out(root) {
        return claim_new(root).map_err(bad);
    }
    match mkdir(root) {
        Ok(()) => return Ok(root.to_path_buf()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(bad(format!(
                "cannot create it: {e}; choose a writable --out"
            )))
        }
    }
    let meta = fs::symlink_metadata(root).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(bad(
            "exists and is not a directory (a symbolic link?); kvmeter creates its results directory itself: choose a new --out".into(),
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(bad(format!(
            "exists and is owned by uid {}, not by this user (uid {me}); its owner could redirect kvmeter's files: choose a new --out",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(bad(format!(
            "exists and other users may write in it (mode {:o}); they could redirect kvmeter's files: choose a new --out or 'chmod go-w' it",
            meta.mode() & 0o7777
        )));
    }
    let mut entries = fs::read_dir(root)
        .map_err(|e| bad(format!("cannot read it: {e}; choose another --out")))?;
    if entries.next().is_some() {
        return Err(bad(
            "exists and is not empty; kvmeter never overwrites results: choose a new --out".into(),
        ));
    }
    Ok(root.to_path_buf())
}

/// Makes the reserve (report::current::RESERVE): blocks allocated, not a sparse file, so
/// that freeing it frees space.
fn reserve(root: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let path = root.join(super::current::RESERVE);
    let mut f = create_new(&path)?;
    let len = super::current::RESERVE_BYTES;
    // SAFETY: a valid open descriptor; posix_fallocate only allocates its blocks.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    let done = match rc {
        0 => Ok(()),
        // A filesystem without fallocate: written out instead.
        libc::EOPNOTSUPP | libc::EINVAL => {
            f.write_all(&vec![0u8; len]).and_then(|()| f.sync_data())
        }
        e => Err(std::io::Error::from_raw_os_error(e)),
    };
    done.inspect_err(|_| {
        let _ = fs::remove_file(&path);
    })
}

/// Whether an error is a full disk or an exhausted quota.
fn is_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|n| n == libc::ENOSPC || n == libc::EDQUOT)
    })
}

/// `mkdir`, which fails when anything (a directory, a file, a link) has the name.
fn mkdir(p: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().mode(0o755).create(p)
}

/// A directory kvmeter names itself: created new, with a suffix if the name is taken.
fn claim_new(root: &Path) -> Result<PathBuf, String> {
    let name = root.as_os_str().to_string_lossy().into_owned();
    let candidates = std::iter::once(name.clone())
        .chain((2..100).map(|n| format!("{name}-{n}")))
        .chain((0..16).map(|_| format!("{name}-{}", random_suffix())));
    let mut last = None;
    for c in candidates {
        match mkdir(Path::new(&c)) {
            Ok(()) => return Ok(PathBuf::from(c)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(format!("cannot create it: {e}; give --out")),
        }
    }
    Err(format!(
        "cannot create it or any name like it: {}; give --out",
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// A parent directory another user may write in (and not sticky, as /tmp is) lets that user
/// rename the run directory away and put their own in its place: said once, on stderr.
fn warn_if_shared(parent: &Path) {
    let Ok(m) = fs::metadata(parent) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let sticky = m.mode() & 0o1000 != 0;
    let others_write = m.mode() & 0o022 != 0 || (m.uid() != me && m.uid() != 0);
    if others_write && !sticky {
        errln!(
            "warning: {} is writable by other users (mode {:o}, uid {}): they could replace the results directory inside it; prefer a directory only you can write",
            parent.display(),
            m.mode() & 0o7777,
            m.uid()
        );
    }
}

/// Opens a file of a run directory for appending (events.csv, timeline.csv, pressure.csv,
/// which every phase extends), never through a link; returns whether it was just created (and
/// needs its header).
pub fn append(path: &Path) -> std::io::Result<(File, bool)> {
    match create_new(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map(|f| (f, false)),
        Err(e) => Err(e),
    }
}

/// The run directory is closed: its final files are written, so its reserve goes.
impl Drop for RunDir {
    fn drop(&mut self) {
        super::current::release_reserve(&self.root);
    }
}

impl RunDir {
    /// Creates the run directory; refuses one that exists with anything in it.
    pub fn create(root: &Path) -> Result<Self, crate::error::UsageError> {
        Self::create_with(root, false)
    }

    /// The merged run directory of a distributed run: intervals.csv has an `agents` column.
    pub fn create_merged(root: &Path) -> Result<Self, crate::error::UsageError> {
        Self::create_with(root, true)
    }

    /// How many agents the intervals appended next merge.
    pub fn set_agents(&mut self, n: usize) {
        self.agents = Some(n);
    }

    fn create_with(root: &Path, merged: bool) -> Result<Self, crate::error::UsageError> {
        let bad =
            |why: String| crate::error::UsageError::new(format!("--out {}: {why}", root.display()));
        let existed = fs::symlink_metadata(root).is_ok();
        let claimed = claim(root)?;
        // A refusal from here on leaves nothing kvmeter made: its files, and the directory
        // when it made it (a default name gets a new one; a given one that did not exist).
        let made = !existed || claimed != root;
        let unmake = |why: String| {
            let _ = fs::remove_file(claimed.join(super::current::RESERVE));
            let _ = fs::remove_file(claimed.join("intervals.csv"));
            let _ = fs::remove_dir(claimed.join("latency"));
            if made {
                let _ = fs::remove_dir(&claimed);
            }
            bad(why)
        };
        let root = &claimed;
        mkdir(&root.join("latency"))
            .map_err(|e| unmake(format!("cannot create latency/ in it: {e}")))?;
        let f = create_new(&root.join("intervals.csv"))
            .map_err(|e| unmake(format!("cannot write intervals.csv: {e}")))?;
        let mut intervals = BufWriter::new(f);
        let extra = if merged { ",agents" } else { "" };
        writeln!(intervals, "{INTERVALS_HEADER}{extra}")
            .and_then(|_| intervals.flush())
            .map_err(|e| unmake(format!("cannot write intervals.csv: {e}")))?;
        reserve(root).map_err(|e| {
            unmake(format!(
                "no room for the run's results: {e} (kvmeter keeps {} KiB for its final files); free some space or choose another --out",
                super::current::RESERVE_BYTES >> 10
            ))
        })?;
        super::current::set(root);
        Ok(RunDir {
            root: root.to_path_buf(),
            intervals,
            hlogs: HashMap::new(),
            serializer: V2DeflateSerializer::new(),
            scratch: Vec::new(),
            agents: merged.then_some(0),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Replaces `name` atomically with the pretty JSON of `value`.
    pub fn write_json<T: serde::Serialize>(&self, name: &str, value: &T) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(value)? + "\n";
        self.write_file(name, text.as_bytes())
    }

    pub fn write_file(&self, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
        // manifest.json and summary.json are written under the lock an exit at once takes.
        let _status = super::current::is_status_file(name).then(super::current::lock);
        let path = self.root.join(name);
        if let Some(dir) = path.parent() {
            // A subdirectory of ours (ycsb/): made new, or already a real directory.
            match mkdir(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if !fs::symlink_metadata(dir)?.is_dir() {
                        anyhow::bail!("{} is not a directory", dir.display());
                    }
                }
                r => r?,
            }
        }
        match write_atomic(&path, bytes) {
            // The disk filled: the reserve makes room for this write, once.
            Err(e) if is_full(&e) && super::current::release_reserve(&self.root) => {
                write_atomic(&path, bytes)
            }
            r => r,
        }
    }

    /// Appends one row per metric for a closed interval and flushes.
    #[allow(clippy::too_many_arguments)]
    pub fn append_interval(
        &mut self,
        phase: &str,
        index: usize,
        start_s: f64,
        end_s: f64,
        warmup: bool,
        stats: &Stats,
        schedule: Option<ScheduleFigures>,
    ) -> anyhow::Result<()> {
        let phase = super::csv::field(phase);
        let secs = (end_s - start_s).max(1e-9);
        let us = |ns: u64| ns as f64 / 1000.0;
        let sched = match schedule {
            Some(f) => {
                let (lp99, lmax) = match stats.lag.as_deref().filter(|h| !h.is_empty()) {
                    Some(h) => (
                        format!("{:.3}", us(percentile::value_at(h, 99.0))),
                        format!("{:.3}", us(percentile::max(h))),
                    ),
                    None => (String::new(), String::new()),
                };
                let behind = f.behind_ms.map(|b| format!("{b:.3}")).unwrap_or_default();
                format!("{:.1},{lp99},{lmax},{behind}", f.offered_ops_per_s)
            }
            None => ",,,".to_string(),
        };
        let sched = match self.agents {
            Some(n) => format!("{sched},{n}"),
            None => sched,
        };
        // Every interval has its rows: the phase's operations even when none completed.
        for (m, o) in stats.row_metrics() {
            let h = &o.ok;
            let (ip50, ip99, imax) = match o.intended.as_ref().filter(|i| !i.is_empty()) {
                Some(i) => (
                    format!("{:.3}", us(percentile::value_at(i, 50.0))),
                    format!("{:.3}", us(percentile::value_at(i, 99.0))),
                    format!("{:.3}", us(percentile::max(i))),
                ),
                None => (String::new(), String::new(), String::new()),
            };
            // No success in the interval: its latency cells are empty, never 0.
            let lat = if h.is_empty() {
                ",,,,,".to_string()
            } else {
                format!(
                    "{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}",
                    percentile::mean(h) / 1000.0,
                    us(percentile::value_at(h, 50.0)),
                    us(percentile::value_at(h, 90.0)),
                    us(percentile::value_at(h, 99.0)),
                    us(percentile::value_at(h, 99.9)),
                    us(percentile::max(h)),
                )
            };
            writeln!(
                self.intervals,
                "{phase},{index},{start_s:.3},{end_s:.3},{},{},{},{},{:.1},{:.3},{lat},{ip50},{ip99},{imax},{sched}",
                warmup as u8,
                m.name(),
                o.count(),
                o.errors(),
                o.count() as f64 / secs,
                o.bytes as f64 / secs / 1e6,
            )?;
        }
        // Open loop: one SCHEDULE row per interval, written even when nothing completed (a
        // stalled store), with the transactions completed and the backlog.
        if schedule.is_some_and(|f| f.behind_ms.is_some()) {
            let tx = stats.transactions();
            writeln!(
                self.intervals,
                "{phase},{index},{start_s:.3},{end_s:.3},{},SCHEDULE,{tx},,{:.1},,,,,,,,,,,{sched}",
                warmup as u8,
                tx as f64 / secs,
            )?;
        }
        self.intervals.flush()?;
        Ok(())
    }

    /// Appends this interval's histograms to the HDR logs (one file per phase and metric, the
    /// HdrHistogram interval log format 1.3, values in ns).
    pub fn log_histograms(
        &mut self,
        phase: &str,
        phase_start: SystemTime,
        start_s: f64,
        end_s: f64,
        stats: &Stats,
    ) -> anyhow::Result<()> {
        // One entry per interval in each metric's log (an empty histogram when nothing
        // completed), so the logs' intervals are intervals.csv's; failures only when any.
        for (m, o) in stats.row_metrics() {
            self.log_one(phase, m.name(), phase_start, start_s, end_s, &o.ok)?;
            if let Some(f) = &o.failed {
                if !f.is_empty() {
                    self.log_one(
                        phase,
                        &format!("{}-FAILED", m.name()),
                        phase_start,
                        start_s,
                        end_s,
                        f,
                    )?;
                }
            }
            if let Some(i) = o.intended.as_ref() {
                self.log_one(
                    phase,
                    &format!("Intended-{}", m.name()),
                    phase_start,
                    start_s,
                    end_s,
                    i,
                )?;
            }
        }
        Ok(())
    }

    fn log_one(
        &mut self,
        phase: &str,
        name: &str,
        phase_start: SystemTime,
        start_s: f64,
        end_s: f64,
        h: &Histogram<u64>,
    ) -> anyhow::Result<()> {
        let key = format!("{phase}.{name}");
        if !self.hlogs.contains_key(&key) {
            let path = self.root.join("latency").join(format!("{key}.hlog"));
            let mut w = BufWriter::new(
                create_new(&path).with_context(|| format!("cannot write {}", path.display()))?,
            );
            let start = epoch_secs(phase_start);
            writeln!(
                w,
                "#[Logging for: {name} (phase {phase}, values in nanoseconds)]"
            )?;
            writeln!(w, "#[Histogram log format version 1.3]")?;
            writeln!(
                w,
                "#[StartTime: {start:.3} (seconds since epoch), {}]",
                humantime::format_rfc3339_millis(phase_start)
            )?;
            writeln!(w, "#[BaseTime: {start:.3} (seconds since epoch)]")?;
            writeln!(
                w,
                "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
            )?;
            self.hlogs.insert(key.clone(), w);
        }
        self.scratch.clear();
        self.serializer
            .serialize(h, &mut self.scratch)
            .map_err(|e| anyhow::anyhow!("cannot encode histogram: {e:?}"))?;
        let w = self.hlogs.get_mut(&key).expect("inserted above");
        // Interval_Max is in milliseconds (max / 1e6), as Java's writer does for ns values.
        writeln!(
            w,
            "{start_s:.3},{:.3},{:.3},{}",
            end_s - start_s,
            percentile::max(h) as f64 / 1e6,
            base64::engine::general_purpose::STANDARD.encode(&self.scratch)
        )?;
        w.flush()?;
        Ok(())
    }

    /// Appends a phase's pressure-scale rows to `pressure.csv` (created with its header).
    pub fn append_pressure(
        &mut self,
        phase: &str,
        r: &super::PressureResult,
    ) -> anyhow::Result<()> {
        let phase = super::csv::field(phase);
        let (mut f, new) = append(&self.root.join("pressure.csv"))?;
        if new {
            writeln!(f, "phase,block_size_kib,step,start_s,seconds,write_ratios,ops_per_s,normalized_pressure,antagonist_read_iops,antagonist_write_iops,antagonist_mb_per_s,antagonist_avg_latency_us,store_write_mb_per_s,store_stall_s_per_s")?;
        }
        for s in &r.steps {
            let wr: Vec<String> = s
                .write_ratios
                .iter()
                .map(|w| w.map(|x| format!("{x}")).unwrap_or_else(|| "-".into()))
                .collect();
            // Blank where the store reports no such figure: never 0.
            let store = |g: fn(&super::PressureStore) -> Option<f64>| {
                s.store
                    .as_ref()
                    .and_then(g)
                    .map(|v| format!("{v:.4}"))
                    .unwrap_or_default()
            };
            writeln!(
                f,
                "{phase},{},{},{:.3},{:.3},{},{:.1},{:.4},{:.1},{:.1},{:.3},{:.1},{},{}",
                r.block_size_kib,
                s.step,
                s.start_s,
                s.seconds,
                wr.join("/"),
                s.ops_per_s,
                s.normalized_pressure,
                s.antagonist_read_iops,
                s.antagonist_write_iops,
                s.antagonist_mb_per_s,
                s.antagonist_avg_latency_us,
                store(|x| x.storage_write_mb_per_s),
                store(|x| x.stall_s_per_s)
            )?;
        }
        f.sync_data()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// Review F8: a link planted under a result's name is replaced, never written through.
    #[test]
    fn write_atomic_replaces_a_planted_link_without_following_it() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim.txt");
        fs::write(&victim, "ORIGINAL").unwrap();
        let dir = t.path().join("run");
        fs::create_dir(&dir).unwrap();
        for name in ["summary.json", "summary.tmp", "summary.json.tmp"] {
            symlink(&victim, dir.join(name)).unwrap();
        }
        write_atomic(&dir.join("summary.json"), b"{}\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "ORIGINAL");
        let m = fs::symlink_metadata(dir.join("summary.json")).unwrap();
        assert!(m.is_file(), "the link was replaced by the file");
        assert_eq!(
            fs::read_to_string(dir.join("summary.json")).unwrap(),
            "{}\n"
        );
        // No temporary is left behind.
        let left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // New files refuse a planted link outright.
        symlink(&victim, dir.join("x.hlog")).unwrap();
        assert!(create_new(&dir.join("x.hlog")).is_err());
        assert!(append(&dir.join("summary.tmp")).is_err());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "ORIGINAL");
    }

    #[test]
    fn claim_accepts_only_a_new_or_private_empty_directory() {
        let t = tempfile::tempdir().unwrap();
        let fresh = t.path().join("a/b/run");
        assert_eq!(claim(&fresh).unwrap(), fresh);
        assert!(fresh.is_dir());
        // An existing empty directory of ours, writable only by us: accepted.
        let mine = t.path().join("mine");
        fs::create_dir(&mine).unwrap();
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(claim(&mine).unwrap(), mine);
        // Writable by others, a link, not empty: refused.
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = claim(&open).unwrap_err().0;
        assert!(e.contains("other users may write in it (mode 777)"), "{e}");
        let link = t.path().join("link");
        symlink(&mine, &link).unwrap();
        let e = claim(&link).unwrap_err().0;
        assert!(e.contains("not a directory (a symbolic link?)"), "{e}");
        fs::write(mine.join("x"), "").unwrap();
        assert!(claim(&mine).unwrap_err().0.contains("not empty"));
        // Another user's empty directory (root can make one to test with).
        if unsafe { libc::geteuid() } == 0 {
            let theirs = t.path().join("theirs");
            fs::create_dir(&theirs).unwrap();
            fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)).unwrap();
            let e = claim(&theirs).unwrap_err().0;
            assert!(e.contains("owned by uid 12345"), "{e}");
        } else {
            errln!("note: not root; the test of another user's directory is skipped");
        }
    }

    #[test]
    fn a_name_kvmeter_chose_is_never_reused() {
        let t = tempfile::tempdir().unwrap();
        let name = t.path().join("2026-11-24T103615-run-null");
        fs::create_dir(&name).unwrap(); // pre-created by someone else
        let got = claim_new(&name).unwrap();
        assert_eq!(got, t.path().join("2026-11-24T103615-run-null-2"));
        let again = claim_new(&name).unwrap();
        assert_eq!(again, t.path().join("2026-11-24T103615-run-null-3"));
        for n in 4..100 {
            fs::create_dir(t.path().join(format!("2026-11-24T103615-run-null-{n}"))).unwrap();
        }
        let random = claim_new(&name).unwrap();
        let tail = random
            .to_string_lossy()
            .rsplit('-')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(tail.len(), 8, "{}", random.display());
    }
}
