//! The data directory the store writes to, and proof that kvmeter created it.
//!
//! kvmeter only deletes what it created: a directory it makes (or adopts while empty) gets a
//! marker file; store data lives in its `store/` subdirectory; "clear" removes only that
//! subdirectory, and only under a marker. A directory holding anything else is refused.

use crate::error::UsageError;
use std::fs;
use std::path::{Path, PathBuf};

pub const MARKER: &str = ".kvmeter-data";

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
        if path.exists() {
            if !path.is_dir() {
                return Err(bad(
                    "is not a directory; give a new or empty directory".into()
                ));
            }
            if path.join(MARKER).is_file() {
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
        } else {
            fs::create_dir_all(path).map_err(|e| bad(format!("cannot create it: {e}")))?;
            write_marker(path)?;
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

    /// Whether the store directory holds anything (data from an earlier load).
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

fn write_marker(dir: &Path) -> Result<(), UsageError> {
    let text = format!(
        "Created by kvmeter {} on {}. kvmeter deletes only the store/ directory next to this file.\n",
        env!("CARGO_PKG_VERSION"),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    );
    fs::write(dir.join(MARKER), text).map_err(|e| {
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

    #[test]
    fn temporary_is_removed_on_drop() {
        let d = DataDir::prepare(None).unwrap();
        let p = d.root().to_path_buf();
        assert!(p.join(MARKER).is_file());
        drop(d);
        assert!(!p.exists());
    }
}
