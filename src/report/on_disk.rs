//! What a data directory holds on disk at a phase's end: the bytes that hold data, and apart
//! from them the space a store reserved and has not written yet. Space amplification divides
//! the first by the data loaded (issue 43); the second is real disk use an operator plans for,
//! but it is not data. A RocksDB write-ahead log reserves a memtable's worth past its end
//! (`fallocate` keeping the size); etcd's WAL makes each 64 MB segment that long at once and
//! creates the next one ahead, so a 2 MB etcd load showed 130.8 MB on disk and a space
//! amplification of 61.69. Reserved space inside a file's length is found as the kernel
//! reports it: an allocated extent never written reads as a hole to `lseek(SEEK_HOLE)` (ext4 and
//! XFS); a filesystem without that support reports the whole file as data, as before. Space
//! past a file's end may also be the filesystem's own (XFS preallocates speculatively behind a
//! file being appended), so the figure says "reserved", not by whom.
//!
//! Looking inside a file means opening it, and closing any descriptor of a file releases every
//! POSIX lock the process holds on it (fcntl's rule): RocksDB's and LevelDB's `LOCK`, LMDB's
//! `lock.mdb`, SQLite's database. So the files of a store inside kvmeter's own process are
//! only `stat`ed (`look_inside` false): the space past their end is still told apart, and
//! space reserved within their length counts as data. A server's files are another process's,
//! whose locks a descriptor of ours cannot release.

use std::os::fd::AsRawFd;

/// The walk's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct OnDisk {
    /// Bytes allocated that hold data: each file's data extents, at most its allocated blocks
    /// (each hard link once).
    pub data: u64,
    /// Bytes allocated that hold none: reserved past a file's end or within it and not
    /// written yet.
    pub reserved: u64,
    /// Entries left out because they could not be read.
    pub unread: u64,
}

/// A bound on the walk: a data directory with more entries than this is not a store's.
const MAX_ENTRIES: u32 = 1_000_000;
/// A bound on one file's extents: past it, the rest of the file counts as data.
const MAX_EXTENTS: u32 = 4096;

/// The files under `dir`, walked without following links; `look_inside`: find the space
/// reserved within each file's length too (never for a store in kvmeter's own process).
pub fn on_disk(dir: &std::path::Path, look_inside: bool) -> OnDisk {
    use std::os::unix::fs::MetadataExt;
    let mut out = OnDisk::default();
    let block = allocation_unit(dir);
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut left = MAX_ENTRIES;
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            out.unread += 1;
            continue;
        };
        for e in rd {
            left = left.saturating_sub(1);
            if left == 0 {
                out.unread += 1;
                return out;
            }
            let Ok(e) = e else {
                out.unread += 1;
                continue;
            };
            let Ok(m) = e.path().symlink_metadata() else {
                out.unread += 1;
                continue;
            };
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() && seen.insert((m.dev(), m.ino())) {
                let allocated = m.blocks() * 512;
                let inside = look_inside
                    .then(|| data_bytes(&e.path(), m.len()))
                    .flatten();
                // A sparse file's length past its blocks is holes, not data.
                let data = inside.unwrap_or(m.len()).min(allocated);
                out.data += data;
                // The rest of the last block a file's data ends in is not a reservation.
                out.reserved += allocated.saturating_sub(data.div_ceil(block) * block);
            }
        }
    }
    out
}

/// The filesystem's allocation unit under `dir` (statvfs's fragment size), 4 KiB if unknown.
fn allocation_unit(dir: &std::path::Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 4096;
    };
    // SAFETY: statvfs fills the zeroed struct it is given from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    match unsafe { libc::statvfs(path.as_ptr(), &mut st) } {
        0 if st.f_frsize > 0 => st.f_frsize as u64,
        _ => 4096,
    }
}

/// The bytes of a file's data extents below `len` (`SEEK_DATA`/`SEEK_HOLE`); `None` when the
/// file cannot be opened.
fn data_bytes(path: &std::path::Path, len: u64) -> Option<u64> {
    let f = std::fs::File::open(path).ok()?;
    let fd = f.as_raw_fd();
    let (mut at, mut data) = (0u64, 0u64);
    for _ in 0..MAX_EXTENTS {
        if at >= len {
            return Some(data);
        }
        // SAFETY: lseek on a descriptor this function owns; it only moves its offset.
        let start = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if start < 0 {
            // ENXIO: no data past `at`; anything else (no support): the rest counts as data.
            let enxio = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
            return Some(if enxio { data } else { data + (len - at) });
        }
        let start = (start as u64).min(len);
        // SAFETY: as above.
        let end = unsafe { libc::lseek(fd, start as libc::off_t, libc::SEEK_HOLE) };
        let end = if end < 0 { len } else { (end as u64).min(len) };
        data += end - start;
        at = end.max(start + 1);
    }
    Some(data + len.saturating_sub(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn fallocate(f: &std::fs::File, mode: i32, len: i64) -> bool {
        // SAFETY: fallocate on a file this test created.
        unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, len) == 0 }
    }

    #[test]
    fn data_blocks_count_once_per_file() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        std::fs::write(t.path().join("sub/a"), vec![1u8; 10_000]).unwrap();
        std::fs::hard_link(t.path().join("sub/a"), t.path().join("b")).unwrap();
        std::fs::File::open(t.path().join("b"))
            .unwrap()
            .sync_all()
            .unwrap();
        for look_inside in [true, false] {
            let d = on_disk(t.path(), look_inside);
            // The blocks hold 10,000 bytes in 12,288: the tail of the last block is not a
            // reservation a store made.
            assert_eq!(
                d,
                OnDisk {
                    data: 10_000,
                    reserved: 0,
                    unread: 0
                }
            );
        }
    }

    #[test]
    fn reserved_space_is_apart_from_data_past_and_within_a_files_end() {
        let t = tempfile::tempdir().unwrap();
        // RocksDB's WAL: 4 KiB written, 8 MiB reserved past its end.
        let wal = std::fs::File::create(t.path().join("wal")).unwrap();
        (&wal).write_all(&[2u8; 4096]).unwrap();
        let past = fallocate(&wal, libc::FALLOC_FL_KEEP_SIZE, 8 << 20);
        // etcd's WAL segment: 64 MiB long at once, 8 KiB of it written.
        let seg = std::fs::File::create(t.path().join("0.wal")).unwrap();
        let within = fallocate(&seg, 0, 64 << 20);
        seg.write_all_at(&[4u8; 8192], 0).unwrap();
        // LMDB's map: 1 GiB long, 4 KiB written.
        let map = std::fs::File::create(t.path().join("map")).unwrap();
        map.set_len(1 << 30).unwrap();
        map.write_all_at(&[3u8; 4096], 0).unwrap();
        if !(past && within) || allocation_unit(t.path()) != 4096 {
            eprintln!("skipped: this filesystem does not fallocate, or allocates other than 4 KiB");
            return;
        }
        for f in [&wal, &seg, &map] {
            f.sync_all().unwrap();
        }
        let d = on_disk(t.path(), true);
        assert_eq!(d.data, 4096 + 8192 + 4096, "{d:?}");
        assert_eq!(d.reserved, (8 << 20) - 4096 + (64 << 20) - 8192, "{d:?}");
        // Without opening the files (a store in kvmeter's own process holds locks on them):
        // the reservation past the WAL's end is still apart; the segment counts as data.
        let d = on_disk(t.path(), false);
        assert_eq!(d.data, 4096 + (64 << 20) + 4096, "{d:?}");
        assert_eq!(d.reserved, (8 << 20) - 4096, "{d:?}");
    }

    #[test]
    fn a_posix_lock_of_this_process_outlives_the_walk_that_does_not_look_inside() {
        // What look_inside=false protects: a lock like RocksDB's LOCK file's.
        let t = tempfile::tempdir().unwrap();
        let lock = std::fs::File::create(t.path().join("LOCK")).unwrap();
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as _;
        fl.l_whence = libc::SEEK_SET as _;
        // SAFETY: fcntl on a descriptor this test owns, with a filled flock.
        assert_eq!(
            unsafe { libc::fcntl(lock.as_raw_fd(), libc::F_SETLK, &fl) },
            0
        );
        use std::os::unix::fs::MetadataExt;
        let ino = lock.metadata().unwrap().ino();
        let pid = std::process::id();
        // /proc/locks: "1: POSIX  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF".
        let held = || {
            let locks = std::fs::read_to_string("/proc/locks").unwrap();
            locks.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&"POSIX")
                    && f.get(4) == Some(&pid.to_string().as_str())
                    && f.get(5).is_some_and(|d| d.ends_with(&format!(":{ino}")))
            })
        };
        assert!(held());
        on_disk(t.path(), false);
        assert!(held(), "the walk released the lock");
        on_disk(t.path(), true);
        assert!(
            !held(),
            "fcntl's rule: closing any descriptor of the file releases it"
        );
    }

    #[test]
    fn a_directory_that_cannot_be_read_is_counted_unread() {
        let d = on_disk(std::path::Path::new("/nonexistent/kvmeter-on-disk"), true);
        assert_eq!(
            d,
            OnDisk {
                unread: 1,
                ..OnDisk::default()
            }
        );
    }
}
