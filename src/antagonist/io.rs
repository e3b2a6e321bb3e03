//! The I/O antagonist, with the behaviour of papers/004's `access_time3`: each instance runs a
//! closed loop of read()/write() calls of one block size on its own large file opened with
//! O_DIRECT|O_DSYNC (no page cache), a share `random_ratio` of them at random aligned offsets
//! and the rest sequential, a share `write_ratio` of them writes.
//!
//! Safety: files live in a directory this module creates (`kvmeter-antagonist-*` under the
//! chosen parent) and removes when dropped — after success, errors and Ctrl-C. Free space is
//! checked before anything is written; only regular files are ever opened, never a device.

use crate::error::UsageError;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Largest block size an instance can issue.
pub const MAX_BLOCK: usize = 4 << 20;
const ALIGN: usize = 4096;

/// A heap buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

unsafe impl Send for Aligned {}

impl Aligned {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("valid layout");
        // SAFETY: non-zero size; freed in Drop with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for an I/O buffer");
        // Not all zeros, so compressing devices do real work.
        for i in (0..len).step_by(8) {
            unsafe { ptr.add(i).write((i as u8).wrapping_mul(31)) };
        }
        Aligned { ptr, len }
    }
    fn slice(&mut self, n: usize) -> &mut [u8] {
        // SAFETY: n ≤ len (checked by callers), memory owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, n.min(self.len)) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).unwrap();
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// What an instance is told to do, changed while it runs. Whether it is active, its block
/// size and its write ratio are one word (`Setting::pack`), so an instance reads them together:
/// with three atomics, an instance that had just seen "active" could issue one operation with
/// the block size or write ratio of the change that idled it.
#[derive(Default)]
struct Control {
    setting: AtomicU64,
    stop: AtomicBool,
    /// Set while an operation is under way (for `wait_idle`).
    busy: AtomicBool,
}

/// An instance's setting: active or idle, block size and write ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Setting {
    active: bool,
    block_size: usize,
    write_ratio: f32,
}

impl Setting {
    /// Bit 63: active; bits 32..63: block size (≤ MAX_BLOCK, 23 bits); bits 0..32: the write
    /// ratio as f32 (its precision is far finer than a ratio needs).
    fn pack(self) -> u64 {
        ((self.active as u64) << 63)
            | ((self.block_size as u64 & 0x7FFF_FFFF) << 32)
            | self.write_ratio.to_bits() as u64
    }
    fn unpack(w: u64) -> Setting {
        Setting {
            active: w >> 63 == 1,
            block_size: ((w >> 32) & 0x7FFF_FFFF) as usize,
            write_ratio: f32::from_bits(w as u32),
        }
    }
}

/// What an instance did.
#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    bytes: AtomicU64,
    latency_ns: AtomicU64,
    error: Mutex<Option<String>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Sample {
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub latency_ns: u64,
}

impl Sample {
    pub fn minus(&self, o: &Sample) -> Sample {
        Sample {
            reads: self.reads - o.reads,
            writes: self.writes - o.writes,
            bytes: self.bytes - o.bytes,
            latency_ns: self.latency_ns - o.latency_ns,
        }
    }
    pub fn ops(&self) -> u64 {
        self.reads + self.writes
    }

    /// The I/O of instances `range` between two samplings of all instances.
    pub fn delta(after: &[Sample], before: &[Sample], range: std::ops::Range<usize>) -> Sample {
        let mut d = Sample::default();
        for i in range {
            if let (Some(x), Some(y)) = (after.get(i), before.get(i)) {
                d += x.minus(y);
            }
        }
        d
    }

    /// Mean latency of an operation, µs (0 without operations).
    pub fn avg_latency_us(&self) -> f64 {
        if self.ops() > 0 {
            self.latency_ns as f64 / self.ops() as f64 / 1000.0
        } else {
            0.0
        }
    }
}

impl std::ops::AddAssign for Sample {
    fn add_assign(&mut self, o: Sample) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes += o.bytes;
        self.latency_ns += o.latency_ns;
    }
}

struct Instance {
    ctl: Arc<Control>,
    counters: Arc<Counters>,
    handle: Option<std::thread::JoinHandle<()>>,
}

pub struct IoAntagonists {
    instances: Vec<Instance>,
    pub dir: PathBuf,
    pub file_size: u64,
    pub random_ratio: f64,
    _guard: tempfile::TempDir,
}

fn free_bytes(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-pointer.
    (unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0)
        .then(|| s.f_bavail as u64 * s.f_frsize as u64)
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl IoAntagonists {
    /// Creates `instances` files of `file_size` bytes under a new directory in `parent`,
    /// writes them in full (so reads reach the device), and starts idle instances.
    pub fn prepare(
        parent: &Path,
        instances: usize,
        file_size: u64,
        random_ratio: f64,
    ) -> Result<Self, UsageError> {
        let bad = |why: String| UsageError::new(format!("--io-dir {}: {why}", parent.display()));
        let meta = std::fs::metadata(parent).map_err(|e| bad(format!("cannot use it: {e}")))?;
        if !meta.is_dir() {
            return Err(bad("is not a directory (kvmeter only creates files in a directory; it never writes to a device)".into()));
        }
        if file_size < MAX_BLOCK as u64 || !file_size.is_multiple_of(MAX_BLOCK as u64) {
            return Err(UsageError::new(format!(
                "--io-file-size {file_size}: expected a multiple of 4 MiB, at least 4 MiB"
            )));
        }
        let need = instances as u64 * file_size + (1 << 30);
        match free_bytes(parent) {
            Some(free) if free < need => {
                return Err(bad(format!(
                    "not enough free space: {instances} antagonist files of {:.1} GiB need {:.1} GiB with a 1 GiB margin, {:.1} GiB are free; lower --io-file-size or choose another --io-dir",
                    gib(file_size), gib(need), gib(free)
                )))
            }
            _ => {}
        }
        // Mode 0700: the antagonist's files are nobody else's to read or replace.
        let guard = tempfile::Builder::new()
            .prefix("kvmeter-antagonist-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(parent)
            .map_err(|e| bad(format!("cannot create a directory in it: {e}")))?;
        let dir = guard.path().to_path_buf();
        let mut list = Vec::new();
        for i in 0..instances {
            let path = dir.join(format!("antagonist-{i}.dat"));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
                .open(&path)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) => bad("its filesystem does not support O_DIRECT (tmpfs?); choose a directory on the device under test".into()),
                    _ => bad(format!("cannot create {}: {e}", path.display())),
                })?;
            lay_out(&f, file_size)
                .map_err(|e| bad(format!("cannot write {}: {e}", path.display())))?;
            let ctl = Arc::new(Control::default());
            let counters = Arc::new(Counters::default());
            let (c, k) = (ctl.clone(), counters.clone());
            let handle = std::thread::Builder::new()
                .name(format!("kvm-io-{i}"))
                .spawn(move || run(f, file_size, random_ratio, &c, &k, i as u64))
                .map_err(|e| UsageError::new(format!("cannot start an antagonist thread: {e}")))?;
            list.push(Instance {
                ctl,
                counters,
                handle: Some(handle),
            });
        }
        Ok(IoAntagonists {
            instances: list,
            dir,
            file_size,
            random_ratio,
            _guard: guard,
        })
    }

    pub fn len(&self) -> usize {
        self.instances.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }

    /// Sets instance `i` running at `write_ratio` with `block_size`, or idle (None). An
    /// operation under way finishes with the setting it started with.
    pub fn set(&self, i: usize, write_ratio: Option<f64>, block_size: usize) {
        let setting = Setting {
            active: write_ratio.is_some(),
            block_size: block_size.clamp(512, MAX_BLOCK),
            write_ratio: write_ratio.unwrap_or(0.0).clamp(0.0, 1.0) as f32,
        };
        self.instances[i]
            .ctl
            .setting
            .store(setting.pack(), Ordering::SeqCst);
    }

    pub fn idle_all(&self) {
        for i in 0..self.instances.len() {
            self.set(i, None, 4096);
        }
    }

    /// Waits until no instance has an operation under way (each then sleeps while idle), up
    /// to `limit`; whether they all were. One O_DSYNC write can take a second on a disk busy
    /// writing back.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        let t = Instant::now();
        loop {
            let busy = self.instances.iter().any(|x| {
                x.ctl.busy.load(Ordering::SeqCst)
                    || Setting::unpack(x.ctl.setting.load(Ordering::SeqCst)).active
            });
            if !busy {
                return true;
            }
            if t.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn sample(&self) -> Vec<Sample> {
        self.instances
            .iter()
            .map(|x| {
                let k = &x.counters;
                Sample {
                    reads: k.reads.load(Ordering::Relaxed),
                    writes: k.writes.load(Ordering::Relaxed),
                    bytes: k.bytes.load(Ordering::Relaxed),
                    latency_ns: k.latency_ns.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// The first I/O error any instance met.
    pub fn error(&self) -> Option<String> {
        self.instances.iter().find_map(|x| {
            x.counters
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }
}

impl Drop for IoAntagonists {
    fn drop(&mut self) {
        for x in &self.instances {
            x.ctl.stop.store(true, Ordering::Relaxed);
        }
        for x in &mut self.instances {
            if let Some(h) = x.handle.take() {
                let _ = h.join();
            }
        }
        // The TempDir guard then removes the directory and its files.
    }
}

fn lay_out(f: &File, size: u64) -> std::io::Result<()> {
    let mut buf = Aligned::new(MAX_BLOCK);
    let mut off = 0;
    while off < size {
        f.write_all_at(buf.slice(MAX_BLOCK), off)?;
        off += MAX_BLOCK as u64;
    }
    Ok(())
}

fn run(f: File, size: u64, random_ratio: f64, ctl: &Control, k: &Counters, seed: u64) {
    let mut buf = Aligned::new(MAX_BLOCK);
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1);
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let unit = |r: u64| (r >> 11) as f64 / (1u64 << 53) as f64;
    let mut seq = 0u64;
    while !ctl.stop.load(Ordering::Relaxed) {
        // busy is raised before the setting is read: once `set` has idled the instance, either
        // this read sees it idle, or busy was already up when `wait_idle` looked.
        ctl.busy.store(true, Ordering::SeqCst);
        let setting = Setting::unpack(ctl.setting.load(Ordering::SeqCst));
        if !setting.active {
            ctl.busy.store(false, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        let (bs, wr) = (setting.block_size, setting.write_ratio as f64);
        let blocks = size / bs as u64;
        let off = if unit(rnd()) < random_ratio {
            (rnd() % blocks) * bs as u64
        } else {
            seq = (seq + 1) % blocks;
            seq * bs as u64
        };
        let write = unit(rnd()) < wr;
        let t = Instant::now();
        let r = if write {
            f.write_all_at(buf.slice(bs), off)
        } else {
            f.read_exact_at(buf.slice(bs), off)
        };
        let ns = t.elapsed().as_nanos() as u64;
        match r {
            Ok(()) => {
                if write {
                    k.writes.fetch_add(1, Ordering::Relaxed);
                } else {
                    k.reads.fetch_add(1, Ordering::Relaxed);
                }
                k.bytes.fetch_add(bs as u64, Ordering::Relaxed);
                k.latency_ns.fetch_add(ns, Ordering::Relaxed);
            }
            Err(e) => {
                *k.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                // Idle from now on, unless the schedule has set it again meanwhile.
                let idle = Setting {
                    active: false,
                    ..setting
                };
                let _ = ctl.setting.compare_exchange(
                    setting.pack(),
                    idle.pack(),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            }
        }
        ctl.busy.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_direct_io_of_the_block_size_and_stops_and_cleans_up() {
        let parent = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
        let a = match IoAntagonists::prepare(parent.path(), 2, 8 << 20, 0.5) {
            Ok(a) => a,
            Err(e) if e.0.contains("O_DIRECT") => {
                panic!("this test needs a filesystem with O_DIRECT: {e}")
            }
            Err(e) => panic!("{e}"),
        };
        let dir = a.dir.clone();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "the antagonist directory is private");
        assert!(dir.join("antagonist-0.dat").is_file());
        assert_eq!(
            std::fs::metadata(dir.join("antagonist-1.dat"))
                .unwrap()
                .len(),
            8 << 20
        );
        // Conditions with deadlines, not fixed sleeps: on a disk busy writing back (CI's, after
        // the build) one O_DSYNC write can take a second.
        let before = a.sample();
        a.set(0, Some(0.0), 16384);
        a.set(1, Some(1.0), 65536);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            let now = a.sample();
            if now[0].reads - before[0].reads > 10 && now[1].writes - before[1].writes > 5 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        a.idle_all();
        assert!(
            a.wait_idle(Duration::from_secs(60)),
            "an operation under way did not end in 60 s"
        );
        let mid = a.sample();
        std::thread::sleep(Duration::from_millis(100));
        let after = a.sample();
        assert_eq!(mid, after, "idle instances issue nothing");
        let r = mid[0].minus(&before[0]);
        let w = mid[1].minus(&before[1]);
        // Every operation is of the setting it started with: reads of 16 KiB on instance 0,
        // writes of 64 KiB on instance 1, also for one under way when they were idled.
        assert!(r.reads > 10 && r.writes == 0, "{r:?}");
        assert_eq!(r.bytes, r.reads * 16384);
        assert!(w.writes > 5 && w.reads == 0, "{w:?}");
        assert_eq!(w.bytes, w.writes * 65536);
        assert!(a.error().is_none());
        drop(a);
        assert!(!dir.exists(), "the antagonist directory is removed");
    }

    #[test]
    fn a_setting_is_one_word_and_unpacks_to_itself() {
        for (active, bs, wr) in [
            (true, 512, 0.0f32),
            (false, MAX_BLOCK, 1.0),
            (true, 65536, 0.3),
            (false, 4096, 0.0),
        ] {
            let s = Setting {
                active,
                block_size: bs,
                write_ratio: wr,
            };
            assert_eq!(Setting::unpack(s.pack()), s);
        }
        assert!(!Setting::unpack(0).active, "a new instance is idle");
    }

    #[test]
    fn refuses_what_it_cannot_do_safely() {
        let t = tempfile::tempdir().unwrap();
        let e = IoAntagonists::prepare(t.path(), 4, 1 << 60, 0.5)
            .err()
            .unwrap();
        assert!(e.0.contains("not enough free space"), "{e}");
        let f = t.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert!(IoAntagonists::prepare(&f, 1, 8 << 20, 0.5)
            .err()
            .unwrap()
            .0
            .contains("not a directory"));
        assert!(IoAntagonists::prepare(t.path(), 1, 1000, 0.5)
            .err()
            .unwrap()
            .0
            .contains("multiple of 4 MiB"));
        assert!(IoAntagonists::prepare(Path::new("/dev/null"), 1, 8 << 20, 0.5).is_err());
        // Nothing was left behind.
        let left: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name() != "file")
            .collect();
        assert!(left.is_empty());
    }
}
