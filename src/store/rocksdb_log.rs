//! RocksDB's own log on the run's clock (issue 43, events on the timeline): the LOG file of
//! each database, read as RocksDB appends to it. Its `EVENT_LOG_v1` lines (JSON with
//! `time_micros`, `job` and `event`: RocksDB's `EventLogger`, what db_bench's users and
//! RocksDB's own tools/parse_log read) give each flush's and compaction's start and end; its
//! `Stalling writes` and `Stopping writes` warnings (column_family.cc) give the moments writes
//! were slowed down or stopped. The file is local but read as hostile input all the same:
//! at most `READ_PER_POLL` bytes a poll, a line at most `MAX_LINE` bytes (a longer one is
//! skipped), at most `MAX_EVENTS_PER_POLL` events.

use super::stats::{event_detail, StoreEvent, MAX_EVENTS_PER_POLL};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Mutex;

const READ_PER_POLL: u64 = 8 << 20;
const MAX_LINE: usize = 64 << 10;

/// Where one database's LOG has been read to.
struct Tail {
    path: PathBuf,
    /// Bytes of the file consumed (whole lines), and the start of a line not yet ended.
    offset: u64,
    partial: Vec<u8>,
    /// A line longer than `MAX_LINE` is being skipped to its end.
    skipping: bool,
}

/// The LOG files of a store's databases (`db0/LOG`, ...), each read from where the last poll
/// stopped. RocksDB starts a fresh LOG at every open (the old one becomes LOG.old.*), so a
/// store opened for a phase reads only its own.
pub struct Logs {
    tails: Mutex<Vec<Tail>>,
}

impl Logs {
    pub fn new(dirs: &[PathBuf]) -> Logs {
        let tails = dirs
            .iter()
            .map(|d| Tail {
                path: d.join("LOG"),
                offset: 0,
                partial: Vec::new(),
                skipping: false,
            })
            .collect();
        Logs {
            tails: Mutex::new(tails),
        }
    }

    /// Appends the events logged since the last poll; with several databases, each event's
    /// detail names its database. `Err` also when events were left out (more than
    /// `MAX_EVENTS_PER_POLL` at once): those appended are good.
    pub fn poll(&self, out: &mut Vec<StoreEvent>) -> Result<(), String> {
        let mut tails = self.tails.lock().unwrap_or_else(|p| p.into_inner());
        let several = tails.len() > 1;
        let mut left_out = 0;
        for (i, t) in tails.iter_mut().enumerate() {
            let db = several.then(|| format!("db{i}: "));
            left_out += t
                .poll(db.as_deref().unwrap_or(""), out)
                .map_err(|e| format!("{}: {e}", t.path.display()))?;
        }
        match left_out {
            0 => Ok(()),
            n => Err(format!(
                "{n} events left out: more than {MAX_EVENTS_PER_POLL} in one interval"
            )),
        }
    }
}

impl Tail {
    /// Reads on from the last poll; returns how many events did not fit.
    fn poll(&mut self, db: &str, out: &mut Vec<StoreEvent>) -> std::io::Result<u64> {
        let mut f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        if len < self.offset {
            // A new file under the name (RocksDB rolled it): from its start.
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut chunk = Vec::new();
        f.take(READ_PER_POLL).read_to_end(&mut chunk)?;
        self.offset += chunk.len() as u64;
        let mut rest = &chunk[..];
        let mut left_out = 0;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (piece, after) = rest.split_at(nl);
            rest = &after[1..];
            if std::mem::take(&mut self.skipping) {
                self.partial.clear();
                continue;
            }
            self.partial.extend_from_slice(piece);
            if let Some(e) = event(&self.partial, db) {
                if out.len() < MAX_EVENTS_PER_POLL {
                    out.push(e);
                } else {
                    left_out += 1;
                }
            }
            self.partial.clear();
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_LINE {
                self.partial.clear();
                self.skipping = true;
            }
        }
        Ok(left_out)
    }
}

/// The event a LOG line records, if it records one kvmeter keeps.
fn event(line: &[u8], db: &str) -> Option<StoreEvent> {
    let line = std::str::from_utf8(line).ok()?;
    if let Some((_, json)) = line.split_once("EVENT_LOG_v1 ") {
        return logged_event(json, db);
    }
    for (words, name) in [
        ("Stalling writes because ", "write_slowdown"),
        ("Stopping writes because ", "write_stop"),
    ] {
        if let Some((_, why)) = line.split_once(words) {
            return Some(StoreEvent {
                unix_us: line_time_us(line)?,
                event: name,
                job: None,
                bytes: None,
                duration_us: None,
                detail: event_detail(&format!("{db}{why}")),
            });
        }
    }
    None
}

/// An `EVENT_LOG_v1` object: flushes and compactions, at RocksDB's `time_micros`.
fn logged_event(json: &str, db: &str) -> Option<StoreEvent> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let text = |k: &str| v.get(k).and_then(serde_json::Value::as_str).unwrap_or("");
    let (event, bytes, detail) = match text("event") {
        "flush_started" => (
            "flush_started",
            num("total_data_size"),
            text("flush_reason").to_string(),
        ),
        "flush_finished" => ("flush_finished", None, lsm_state(&v)),
        "compaction_started" => (
            "compaction_started",
            num("input_data_size"),
            text("compaction_reason").to_string(),
        ),
        "compaction_finished" => (
            "compaction_finished",
            num("total_output_size"),
            format!(
                "to level {}, {} files; {}",
                num("output_level")?,
                num("num_output_files").unwrap_or(0),
                lsm_state(&v)
            ),
        ),
        _ => return None,
    };
    Some(StoreEvent {
        unix_us: num("time_micros")?,
        event,
        job: num("job"),
        bytes,
        duration_us: None,
        detail: event_detail(&format!("{db}{detail}")),
    })
}

/// `lsm_state [4, 1, 0]`: files per level after the job.
fn lsm_state(v: &serde_json::Value) -> String {
    match v.get("lsm_state").and_then(serde_json::Value::as_array) {
        Some(levels) => {
            let n: Vec<String> = levels.iter().take(16).map(|l| l.to_string()).collect();
            format!("files per level [{}]", n.join(" "))
        }
        None => String::new(),
    }
}

/// A LOG line's own time, `2026/11/27-11:58:09.123456` in the local time zone (RocksDB's
/// logger writes localtime_r), in Unix microseconds.
fn line_time_us(line: &str) -> Option<u64> {
    let b = line.as_bytes();
    if b.len() < 26 || b[4] != b'/' || b[7] != b'/' || b[10] != b'-' || b[19] != b'.' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| line.get(r)?.parse::<i32>().ok();
    // SAFETY: a zeroed `tm` is valid; mktime reads and normalises it, using the local zone.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = n(0..4)? - 1900;
    tm.tm_mon = n(5..7)? - 1;
    tm.tm_mday = n(8..10)?;
    tm.tm_hour = n(11..13)?;
    tm.tm_min = n(14..16)?;
    tm.tm_sec = n(17..19)?;
    tm.tm_isdst = -1;
    let secs = unsafe { libc::mktime(&mut tm) };
    let micros = n(20..26)?;
    (secs >= 0).then(|| secs as u64 * 1_000_000 + micros as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_compactions_and_stalls_are_read_from_their_lines() {
        let e = event(br#"2026/11/27-10:00:00.000001 7f EVENT_LOG_v1 {"time_micros": 1795779391363835, "job": 4, "event": "compaction_finished", "output_level": 1, "num_output_files": 2, "total_output_size": 4100000, "lsm_state": [0, 2, 0]}"#, "").unwrap();
        assert_eq!(
            e,
            StoreEvent {
                unix_us: 1795779391363835,
                event: "compaction_finished",
                job: Some(4),
                bytes: Some(4100000),
                duration_us: None,
                detail: "to level 1, 2 files; files per level [0 2 0]".into(),
            }
        );
        let e = event(b"2026/11/27-10:00:00.000001 7f [WARN] [db/column_family.cc:991] [default] Stopping writes because we have 4 level-0 files", "db1: ").unwrap();
        assert_eq!(e.event, "write_stop");
        assert_eq!(e.detail, "db1: we have 4 level-0 files");
        assert_eq!(e.unix_us % 1_000_000, 1);
        assert!(event(b"2026/11/27-10:00:00.000001 7f EVENT_LOG_v1 {\"event\": \"table_file_creation\", \"time_micros\": 1}", "").is_none());
        assert!(event(b"2026/11/27-10:00:00.000001 7f EVENT_LOG_v1 {not json", "").is_none());
    }

    #[test]
    fn a_line_split_across_polls_and_an_overlong_line_are_handled() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("LOG");
        let ev = r#"x EVENT_LOG_v1 {"time_micros": 5, "job": 1, "event": "flush_finished"}"#;
        std::fs::write(&log, &ev[..20]).unwrap();
        let logs = Logs::new(&[dir.path().to_path_buf()]);
        let mut out = vec![];
        logs.poll(&mut out).unwrap();
        assert!(out.is_empty());
        let long = "y".repeat(MAX_LINE + 10);
        std::fs::write(&log, format!("{ev}\n{long}\n{ev}\n")).unwrap();
        logs.poll(&mut out).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].unix_us, 5);
    }

    #[test]
    fn more_events_than_a_poll_holds_are_said_to_be_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let ev = r#"x EVENT_LOG_v1 {"time_micros": 5, "job": 1, "event": "flush_finished"}"#;
        let n = MAX_EVENTS_PER_POLL + 5;
        std::fs::write(dir.path().join("LOG"), format!("{ev}\n").repeat(n)).unwrap();
        let mut out = vec![];
        let e = Logs::new(&[dir.path().to_path_buf()])
            .poll(&mut out)
            .unwrap_err();
        assert_eq!(out.len(), MAX_EVENTS_PER_POLL);
        assert!(e.starts_with("5 events left out"), "{e}");
    }
}
