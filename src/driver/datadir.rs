//! The data directory the store writes to, and proof that kvmeter created it.
//!
//! kvmeter only deletes what it created: a directory it makes (or adopts while empty) gets a
//! marker file; store data lives in its `store/` subdirectory; "clear" removes only that
//! subdirectory, and only under a marker. A directory holding anything else is refused.
//!
//! In a shared place (review F8, F11) the directory must be ours: a given `--data-dir` that
//! exists must be owned by this user and writable by no one else, and its marker and `store`
//! entry, when present, must be a real file and directory of ours, never symbolic links
//! (another user could otherwise point the store's writes into a directory only we may write).
//! A temporary data directory is mode 0700: benchmark data is nobody else's to read.
//!
//! What a completed load put there (the store, and what names its keys) is kept beside the
//! marker, so that a run phase on a reused directory with another store or another key space
//! is warned: its reads would otherwise miss without a word.

use crate::error::UsageError;
use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const MARKER: &str = ".kvmeter-data";
/// The last completed load's description (`load_description`), beside the marker.
const LOADED: &str = ".kvmeter-loaded";

/// The store and the workload settings that name a load's keys, as one line.
pub fn load_description(store: &str, w: &crate::workload::WorkloadConfig) -> String {
    format!(
        "store={store} recordcount={} insertstart={} insertorder={} zeropadding={} table={}",
        w.recordcount, w.insertstart, w.insertorder, w.zeropadding, w.table
    )
}

pub struct DataDir {
    root: PathBuf,
    _temp: Option<tempfile::TempDir>,
    pub reused: bool,
    /// The write end of the guard's pipe (see `Guard`); dropped after `_temp`.
    _guard: Option<Guard>,
}

/// Removes a temporary data directory even when kvmeter is SIGKILLed: a small `sh` in its
/// own process group reads a pipe from kvmeter until end of file — which comes when kvmeter
/// exits, however it exits — then removes the directory if it is still there and still holds
/// kvmeter's marker. On a normal exit the directory is already gone and it just ends. (Rust
/// cannot run anything after SIGKILL; a watcher process is the one way to keep the promise
/// that nothing kvmeter created is left behind.)
struct Guard {
    child: std::process::Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // End of file for the watcher (the directory is gone by now), then reap it.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Guard {
    fn watch(dir: &Path) -> Option<Guard> {
        use std::os::unix::process::CommandExt;
        // Members of a killed cluster die by their parent-death signal at the same moment;
        // retry for a few seconds while they let go of their files.
        let script = format!(
            "cat >/dev/null; for i in 1 2 3 4 5 6 7 8 9 10; do [ -f \"$1/{MARKER}\" ] || exit 0; rm -rf -- \"$1\" 2>/dev/null; [ -e \"$1\" ] || exit 0; sleep 0.5; done"
        );
        let child = std::process::Command::new("/bin/sh")
            .args(["-c", &script, "kvmeter-guard"])
            .arg(dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .ok()?;
        Some(Guard { child })
    }
}

impl DataDir {
    /// `None`: a fresh temporary directory, removed when this value is dropped.
    pub fn prepare(given: Option<&Path>) -> Result<Self, UsageError> {
        let Some(path) = given else {
            let t = tempfile::Builder::new()
                .prefix("kvmeter-data-")
                .permissions(fs::Permissions::from_mode(0o700))
                .tempdir()
                .map_err(|e| {
                    UsageError::new(format!(
                        "cannot create a temporary data directory: {e}; set TMPDIR or give --data-dir"
                    ))
                })?;
            let root = t.path().to_path_buf();
            write_marker(&root)?;
            return Ok(DataDir {
                _guard: Guard::watch(&root),
                root,
                _temp: Some(t),
                reused: false,
            });
        };
        let bad = |why: String| UsageError::new(format!("--data-dir {}: {why}", path.display()));
        let mut reused = false;
        match top_level(path) {
            Ok(meta) => {
                ours(path, &meta, "directory").map_err(bad)?;
                if !meta.is_dir() {
                    return Err(bad(
                        "is not a directory; give a new or empty directory".into()
                    ));
                }
                if meta.mode() & 0o022 != 0 {
                    return Err(bad(format!(
                        "is writable by other users (mode {:o}): they could redirect the store's writes; 'chmod go-w' it or give a new directory",
                        meta.mode() & 0o7777
                    )));
                }
                if owned_entry(path, MARKER, false).map_err(bad)? {
                    owned_entry(path, "store", true).map_err(bad)?;
                    reused = true;
                } else {
                    let mut entries =
                        fs::read_dir(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
                    if entries.next().is_some() {
                        return Err(bad(
                            "holds files kvmeter did not create (no .kvmeter-data marker); kvmeter never writes over data it does not own: give a new or empty directory".into(),
                        ));
                    }
                    write_marker(path)?;
                }
            }
            Err(_) => {
                // The directories this call makes, so that a refusal leaves none behind.
                let made: Vec<&Path> = path
                    .ancestors()
                    .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
                    .collect();
                fs::create_dir_all(path).map_err(|e| bad(format!("cannot create it: {e}")))?;
                if let Err(e) = write_marker(path) {
                    for d in made {
                        let _ = fs::remove_dir(d);
                    }
                    return Err(e);
                }
            }
        }
        Ok(DataDir {
            root: path.to_path_buf(),
            _temp: None,
            reused,
            _guard: None,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn is_temporary(&self) -> bool {
        self._temp.is_some()
    }

    /// The store's directory (created if missing).
    pub fn store_dir(&self) -> std::io::Result<PathBuf> {
        let d = self.root.join("store");
        fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// After a load phase: what it loaded when it completed (`Some`), else nothing (a partial
    /// or failed load, or a clear, leaves no claim about the data).
    pub fn note_load(&self, description: Option<&str>) {
        let path = self.root.join(LOADED);
        match description {
            Some(d) => {
                let _ = crate::report::rundir::write_atomic(&path, format!("{d}\n").as_bytes());
            }
            None => {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// The last completed load's description, if this directory holds one (read bounded).
    pub fn last_load(&self) -> Option<String> {
        use std::io::Read;
        let mut text = String::new();
        fs::File::open(self.root.join(LOADED))
            .ok()?
            .take(4096)
            .read_to_string(&mut text)
            .ok()?;
        Some(text.trim().to_string()).filter(|t| !t.is_empty())
    }

    /// Whether the store directory holds anything (data from an earlier load).
    /// Whether any file under the store's directory holds a byte: a managed server makes its
    /// own empty directories, which hold no data (a bounded walk: a store's directory is not
    /// a tree of millions).
    pub fn holds_files(&self) -> bool {
        let mut stack = vec![self.root.join("store")];
        let mut left = 100_000u32;
        while let Some(d) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                left = left.saturating_sub(1);
                let Ok(m) = e.path().symlink_metadata() else {
                    continue;
                };
                if (m.is_file() && m.len() > 0) || left == 0 {
                    return true;
                }
                if m.is_dir() {
                    stack.push(e.path());
                }
            }
        }
        false
    }

    pub fn has_store_data(&self) -> bool {
        fs::read_dir(self.root.join("store"))
            .map(|mut e| e.next().is_some())
            .unwrap_or(false)
    }

    /// Deletes the store's data, and only that, under our marker.
    pub fn clear(&self) -> std::io::Result<()> {
        if !self.root.join(MARKER).is_file() {
            return Err(std::io::Error::other(format!(
                "{} lost its .kvmeter-data marker; refusing to delete anything",
                self.root.display()
            )));
        }
        let d = self.root.join("store");
        if d.exists() {
            fs::remove_dir_all(&d)?;
        }
        fs::create_dir_all(&d)
    }
}

/// The given directory's metadata. A symbolic link there is the user's own choice (a data
/// disk mounted elsewhere) when the link is theirs or root's: it is followed then; another
/// user's link is refused.
fn top_level(path: &Path) -> std::io::Result<fs::Metadata> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.file_type().is_symlink() {
        return Ok(meta);
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Ok(meta); // refused by `ours` as a link
    }
    fs::metadata(path)
}

/// Refuses an entry that is a symbolic link or belongs to another user.
fn ours(path: &Path, meta: &fs::Metadata, what: &str) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{} is a symbolic link; kvmeter does not follow links in its data directory: give a real {what}",
            path.display()
        ));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by this user (uid {me}): another user could redirect or read the store's data; give a {what} of your own",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// Whether `dir/name` exists; when it does, it must be ours, and a directory or a regular
/// file as `dir_expected` says.
fn owned_entry(dir: &Path, name: &str, dir_expected: bool) -> Result<bool, String> {
    let p = dir.join(name);
    let meta = match fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot read {}: {e}", p.display())),
    };
    let what = if dir_expected { "directory" } else { "file" };
    ours(&p, &meta, what)?;
    let right = if dir_expected {
        meta.is_dir()
    } else {
        meta.is_file()
    };
    if !right {
        return Err(format!("{} is not a {what}", p.display()));
    }
    Ok(true)
}

fn write_marker(dir: &Path) -> Result<(), UsageError> {
    let text = format!(
        "Created by kvmeter {} on {}. kvmeter deletes only the store/ directory next to this file.\n",
        env!("CARGO_PKG_VERSION"),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    );
    // A new file, never through a link planted under the marker's name; one that could not
    // be written whole (a full disk) is removed, so a refusal leaves nothing behind.
    let path = dir.join(MARKER);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| {
            std::io::Write::write_all(&mut f, text.as_bytes()).inspect_err(|_| {
                let _ = fs::remove_file(&path);
            })
        })
        .map_err(|e| {
            UsageError::new(format!(
                "--data-dir {}: cannot write in it: {e}",
                dir.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_foreign_directories_and_reuses_own() {
        let t = tempfile::tempdir().unwrap();
        let foreign = t.path().join("foreign");
        fs::create_dir(&foreign).unwrap();
        fs::write(foreign.join("precious.txt"), "keep me").unwrap();
        let e = DataDir::prepare(Some(&foreign)).err().unwrap();
        assert!(e.0.contains("did not create"), "{e}");
        assert_eq!(
            fs::read_to_string(foreign.join("precious.txt")).unwrap(),
            "keep me"
        );

        let mine = t.path().join("mine");
        let d = DataDir::prepare(Some(&mine)).unwrap();
        assert!(!d.reused);
        fs::write(d.store_dir().unwrap().join("x"), "1").unwrap();
        assert!(d.has_store_data());
        let again = DataDir::prepare(Some(&mine)).unwrap();
        assert!(again.reused);
        again.clear().unwrap();
        assert!(!again.has_store_data());
        assert!(mine.join(MARKER).is_file());

        let file = t.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(DataDir::prepare(Some(&file)).is_err());
    }

    /// Review F8: a planted marker or `store` link must not make kvmeter write elsewhere.
    #[test]
    fn refuses_links_and_shared_modes_in_a_data_directory() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::create_dir(&victim).unwrap();

        let planted = t.path().join("planted");
        fs::create_dir(&planted).unwrap();
        fs::write(planted.join(MARKER), "forged").unwrap();
        std::os::unix::fs::symlink(&victim, planted.join("store")).unwrap();
        let e = DataDir::prepare(Some(&planted)).err().unwrap();
        assert!(e.0.contains("store is a symbolic link"), "{e}");

        let marker_link = t.path().join("marker-link");
        fs::create_dir(&marker_link).unwrap();
        std::os::unix::fs::symlink(victim.join("m"), marker_link.join(MARKER)).unwrap();
        let e = DataDir::prepare(Some(&marker_link)).err().unwrap();
        assert!(e.0.contains(".kvmeter-data is a symbolic link"), "{e}");

        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
        let e = DataDir::prepare(Some(&open)).err().unwrap();
        assert!(e.0.contains("writable by other users"), "{e}");
        assert_eq!(
            fs::read_dir(&victim).unwrap().count(),
            0,
            "nothing written there"
        );
        assert_eq!(fs::read_dir(&open).unwrap().count(), 0);
    }

    #[test]
    fn temporary_is_private_and_removed_on_drop() {
        let d = DataDir::prepare(None).unwrap();
        let p = d.root().to_path_buf();
        assert!(p.join(MARKER).is_file());
        let mode = fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o700,
            "benchmark data is nobody else's to read"
        );
        drop(d);
        assert!(!p.exists());
    }
}
