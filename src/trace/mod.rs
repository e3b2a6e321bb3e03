//! Production traces, read as they are (issue 32, docs/replay.md): Twitter's cache traces
//! (twemcache CSV), RocksDB's human-readable trace (trace_analyzer's output), CacheLib
//! cachebench's CSV and Redis MONITOR output — each a stream of `TraceRecord`s, read line by
//! line into one reused record (a trace larger than memory replays in bounded memory; nothing
//! is allocated per record once the buffers have grown to the longest line).
//!
//! Everything from the file is bounded before it is used: a line is at most `MAX_LINE` bytes,
//! a key at most `MAX_KEY`, a value size at most `MAX_VALUE`. A line that breaks its format is a
//! `TraceError` naming file:line (`kvmeter replay` stops on the first, exit 2, unless
//! `--skip-bad` counts it and goes on). `.zst` files are decompressed as they are read.
//!
//! Layer: beside `workload` (imports only `error` and `values`); `driver` replays what it reads,
//! `cli` serves `kvmeter trace stats`.

pub mod formats;

use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The longest line a trace may have (a Twitter line is ~100 bytes; a MONITOR line carries a
/// value, so it is allowed one value's worth).
pub const MAX_LINE: usize = 4 << 20;
/// The longest key kvmeter replays (memcached's limit is 250, Redis's 512 MB; traces' keys are
/// anonymized hashes of tens of bytes).
pub const MAX_KEY: usize = 64 * 1024;
/// The largest value size a record may ask for (memcached's default item limit is 1 MiB;
/// Twitter's traces top out below it).
pub const MAX_VALUE: u64 = 64 << 20;

/// Which trace format a file is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Twitter's cache traces (twitter/cache-trace): `timestamp,anonymized key,key size,value
    /// size,client id,operation,TTL`; timestamps in whole seconds.
    Twitter,
    /// RocksDB's human-readable trace (`trace_analyzer -convert_to_human_readable_trace`):
    /// `type_id cf_id value_size time_us key` (key in hex).
    Rocksdb,
    /// CacheLib cachebench's CSV: `op_time,key,key_size,op,op_count,size,...` with a header.
    Cachebench,
    /// Redis `MONITOR` output: `1700000000.123456 [0 127.0.0.1:6379] "SET" "key" "value"`.
    Monitor,
}

impl Format {
    pub const ALL: [(&'static str, Format); 4] = [
        ("twitter", Format::Twitter),
        ("rocksdb", Format::Rocksdb),
        ("cachebench", Format::Cachebench),
        ("monitor", Format::Monitor),
    ];

    pub fn name(self) -> &'static str {
        Format::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("?", |(n, _)| n)
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.iter().find(|(n, _)| *n == s).map(|(_, f)| *f)
    }
}

/// What a record asks of a store, as kvmeter replays it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A read of the key (get, gets, GET, HGETALL, ...).
    Read,
    /// A write of a value of `value_size` bytes (set, add, replace, cas, PUT, SET, ...).
    Write,
    /// A delete of the key.
    Delete,
    /// A scan of `scan_len` records from the key (RocksDB's iterator seeks).
    Scan,
    /// An operation kvmeter does not replay (incr, append, touch, a MERGE, ...): counted by
    /// its name, never sent.
    Unreplayable,
}

/// One trace record. Reused: `TraceReader::next_into` overwrites it.
#[derive(Clone, Debug, Default)]
pub struct TraceRecord {
    /// Its line in the file (1-based).
    pub line: u64,
    /// The recorded time, µs on the trace's own clock (not rebased: replay takes the first
    /// record's time as its zero).
    pub time_us: u64,
    /// The recorded time has whole-second resolution (Twitter): replay spreads the records
    /// of one second evenly within it (declared in the run directory).
    pub whole_second: bool,
    pub key: Vec<u8>,
    /// The value size the record writes (or read, where the trace says), 0 when none.
    pub value_size: u64,
    pub kind: Option<Kind>,
    /// The trace's own name of the operation (get, set, gets, 1, SET, ...), for counts.
    pub op: String,
    /// A scan's length (records); 0 otherwise.
    pub scan_len: u32,
    /// The client (Twitter's client id; 0 when the trace has none).
    pub client: u64,
}

/// A line that breaks its format: `file:line: what`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub path: PathBuf,
    pub line: u64,
    pub msg: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.msg)
    }
}

impl std::error::Error for TraceError {}

/// A trace file opened for reading, record by record.
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    input: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
    /// Bytes read from the file so far (decompressed), for progress.
    pub bytes: u64,
}

impl TraceReader {
    /// Opens `path` in `format` (`.zst` decompressed on the fly). A file that cannot be opened
    /// is a usage error naming it.
    pub fn open(path: &Path, format: Format) -> Result<TraceReader, crate::error::UsageError> {
        let bad =
            |why: String| crate::error::UsageError::new(format!("trace {}: {why}", path.display()));
        let f = std::fs::File::open(path).map_err(|e| bad(format!("cannot open it: {e}")))?;
        let input: Box<dyn BufRead + Send> = if path.extension().is_some_and(|e| e == "zst") {
            let d = zstd::stream::read::Decoder::new(f)
                .map_err(|e| bad(format!("not a zstd stream: {e}")))?;
            Box::new(std::io::BufReader::with_capacity(1 << 16, d))
        } else {
            Box::new(std::io::BufReader::with_capacity(1 << 16, f))
        };
        Ok(TraceReader {
            path: path.to_path_buf(),
            format,
            input,
            line: 0,
            buf: Vec::new(),
            bytes: 0,
        })
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, msg: impl Into<String>) -> TraceError {
        TraceError {
            path: self.path.clone(),
            line: self.line,
            msg: msg.into(),
        }
    }

    /// Reads the next record into `rec`. `Ok(false)`: the end of the trace. A line that breaks
    /// the format is an `Err` naming file:line; the reader can go on after it (`--skip-bad`).
    /// Header and blank lines are skipped.
    pub fn next_into(&mut self, rec: &mut TraceRecord) -> Result<bool, TraceError> {
        loop {
            self.buf.clear();
            let n = read_line_bounded(&mut self.input, &mut self.buf, MAX_LINE)
                .map_err(|e| self.error(e))?;
            if n == 0 {
                return Ok(false);
            }
            self.line += 1;
            self.bytes += n as u64;
            let line = trim_eol(&self.buf);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            rec.line = self.line;
            match formats::parse(self.format, line, rec) {
                Ok(true) => return Ok(true),
                Ok(false) => continue, // a header or a line the format ignores
                Err(msg) => return Err(self.error(msg)),
            }
        }
    }
}

fn trim_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// One line into `buf` (its `\n` kept), at most `max` bytes: a longer line is an error, read
/// no further than `max` (a file of one endless line is not held in memory).
fn read_line_bounded(
    input: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<usize, String> {
    loop {
        let avail = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read: {e}")),
        };
        if avail.is_empty() {
            return Ok(buf.len());
        }
        let (take, done) = match avail.iter().position(|&c| c == b'\n') {
            Some(p) => (p + 1, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > max {
            return Err(format!("a line longer than {max} bytes"));
        }
        buf.extend_from_slice(&avail[..take]);
        input.consume(take);
        if done {
            return Ok(buf.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_longer_than_the_bound_is_an_error_not_memory() {
        let long = vec![b'x'; 100];
        let mut input: &[u8] = &long;
        let mut buf = Vec::new();
        assert!(read_line_bounded(&mut input, &mut buf, 50).is_err());
        assert!(buf.len() <= 50);
        let mut input: &[u8] = b"a,b\nc\n";
        buf.clear();
        assert_eq!(read_line_bounded(&mut input, &mut buf, 50), Ok(4));
        assert_eq!(buf, b"a,b\n");
    }
}
