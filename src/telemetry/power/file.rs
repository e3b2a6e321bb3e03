//! A CSV of `timestamp,watts` rows written by an external meter while the run goes.

use super::*;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::SystemTime;

/// `timestamp,watts` rows (Unix seconds, fractions allowed) appended by an external meter,
/// read incrementally and integrated as a step function, aligned to the run by wall time.
pub struct CsvFile {
    pub(super) info: PowerInfo,
    pub(super) path: PathBuf,
    pub(super) offset: u64,
    pub(super) partial: String,
    pub(super) start: f64,
    pub(super) joules: f64,
    pub(super) last: Option<(f64, f64)>,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl CsvFile {
    pub fn open(path: PathBuf) -> Result<Self, String> {
        std::fs::File::open(&path).map_err(|e| permission_hint(&path, &e))?;
        Ok(CsvFile {
            info: PowerInfo {
                source: "file".into(),
                scope: "as the external meter measures".into(),
                estimate: false,
                detail: path.display().to_string(),
            },
            path,
            offset: 0,
            partial: String::new(),
            start: unix_now(),
            joules: 0.0,
            last: None,
        })
    }

    fn add(&mut self, t: f64, w: f64) {
        if let Some((pt, pw)) = self.last {
            let (a, b) = (pt.max(self.start), t.max(self.start));
            if b > a {
                self.joules += pw * (b - a);
            }
        }
        self.last = Some((t, w));
    }

    /// Joules from the meter's start up to `now` (Unix seconds).
    pub fn joules_at(&mut self, now: f64) -> Result<f64, String> {
        let mut f = std::fs::File::open(&self.path).map_err(|e| permission_hint(&self.path, &e))?;
        f.seek(SeekFrom::Start(self.offset))
            .map_err(|e| e.to_string())?;
        let mut r = std::io::BufReader::new(f);
        let mut line = String::new();
        loop {
            line.clear();
            let n = r.read_line(&mut line).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            self.offset += n as u64;
            if !line.ends_with('\n') {
                self.partial.push_str(&line);
                break;
            }
            let full = std::mem::take(&mut self.partial) + line.trim_end();
            let mut it = full.split(',');
            if let (Some(t), Some(w)) = (it.next(), it.next()) {
                if let (Ok(t), Ok(w)) = (t.trim().parse::<f64>(), w.trim().parse::<f64>()) {
                    self.add(t, w);
                }
            }
        }
        match self.last {
            Some((t, w)) if now - t < 10.0 => {
                Ok(self.joules + w * (now - t.max(self.start)).max(0.0))
            }
            Some(_) => Err(format!(
                "{}: no reading in the last 10 s",
                self.path.display()
            )),
            None => Err(format!(
                "{}: no 'timestamp,watts' rows yet",
                self.path.display()
            )),
        }
    }
}

impl Meter for CsvFile {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        self.joules_at(unix_now())
    }
    fn reading(&mut self) -> Result<(f64, std::time::Instant), String> {
        // The meter's clock is the wall clock its CSV is stamped with: integrate up to the
        // same instant that is returned.
        let (wall, at) = (unix_now(), std::time::Instant::now());
        self.joules_at(wall).map(|j| (j, at))
    }
}

// ----------------------------------------------------------------------- the estimate
