//! Files of a run directory written so a reader never sees half of one and a link planted
//! under a result's name is never written through (security review F8): new files are created
//! exclusively without following links, and a rewrite goes through a fresh temporary and a
//! rename. Its own file so the run directory's writers (`rundir.rs`) and the status files'
//! lock (`current.rs`) share it without importing each other.

use anyhow::Context;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Eight hex digits nobody can predict (the kernel's random numbers).
pub(super) fn random_suffix() -> String {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No getrandom: the clock and the process id still differ between attempts.
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        b = (t ^ std::process::id().rotate_left(16)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Opens a new file in a run directory: created new (`O_EXCL`) and never through a link.
pub fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Replaces `path` with `bytes` atomically (write, fsync, rename), so it is always whole. The
/// temporary has a random name and is created new, so a link planted in its place is never
/// written through; the rename replaces a link at `path` rather than following it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut attempt = 0;
    let (tmp, file) = loop {
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", random_suffix()));
        match create_new(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
            Err(e) => return Err(e).with_context(|| format!("cannot write {}", path.display())),
        }
    };
    let mut file = file;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_data())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        // A full disk must not leave a half-written temporary next to the last good file.
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}
