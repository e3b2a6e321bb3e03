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
pub mod stats;

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

    /// The format a file's first lines show, if any (`formats::sniff`).
    pub fn sniff(first_lines: &[&[u8]]) -> Option<Format> {
        formats::sniff(first_lines)
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

/// A `.zst` trace may decompress to at most this many times its size (plus 64 MiB): real
/// traces compress 5-20 times; a small file that inflates to gigabytes (10,000 times) would
/// cost minutes of CPU in the pre-scan alone (security review, minor findings).
pub const MAX_ZSTD_RATIO: u64 = 1000;

/// A reader that fails once more than `left` bytes came out of it.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: std::io::Read> std::io::Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::other(format!(
                "it decompresses to more than {MAX_ZSTD_RATIO} times its size (a zstd bomb?); decompress it yourself and replay the plain file"
            ))
        })?;
        Ok(n)
    }
}

/// A trace file opened for reading, record by record.
pub struct TraceReader {
    path: PathBuf,
    format: Format,
    input: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
    state: formats::State,
    /// The record a repeating line (cachebench's `op_count`) hands out again, and how many
    /// times more.
    last: TraceRecord,
    pending: u64,
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
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            let d = zstd::stream::read::Decoder::new(f)
                .map_err(|e| bad(format!("not a zstd stream: {e}")))?;
            let bound = size.saturating_mul(MAX_ZSTD_RATIO).saturating_add(64 << 20);
            Box::new(std::io::BufReader::with_capacity(
                1 << 16,
                Bounded {
                    inner: d,
                    left: bound,
                },
            ))
        } else {
            Box::new(std::io::BufReader::with_capacity(1 << 16, f))
        };
        Ok(TraceReader {
            path: path.to_path_buf(),
            format,
            input,
            line: 0,
            buf: Vec::new(),
            state: formats::State::default(),
            last: TraceRecord::default(),
            pending: 0,
            bytes: 0,
        })
    }

    /// Opens `path` in `format`, or in the format its first lines show (`Format::sniff`)
    /// when `format` is None; a file whose format cannot be told is a usage error asking for
    /// `--format`.
    pub fn open_guess(
        path: &Path,
        format: Option<Format>,
    ) -> Result<TraceReader, crate::error::UsageError> {
        if let Some(f) = format {
            return TraceReader::open(path, f);
        }
        let mut probe = TraceReader::open(path, Format::Twitter)?;
        let mut lines: Vec<Vec<u8>> = Vec::new();
        while lines.len() < 3 {
            probe.buf.clear();
            match read_line_bounded(&mut probe.input, &mut probe.buf, MAX_LINE) {
                Ok(0) | Err(_) => break,
                Ok(_) => lines.push(trim_eol(&probe.buf).to_vec()),
            }
        }
        let refs: Vec<&[u8]> = lines.iter().map(|l| l.as_slice()).collect();
        match formats::sniff(&refs) {
            Some(f) => TraceReader::open(path, f),
            None => Err(crate::error::UsageError::new(format!(
                "trace {}: cannot tell its format from its first lines; say --format twitter, rocksdb, cachebench or monitor",
                path.display()
            ))),
        }
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
        if self.pending > 0 {
            self.pending -= 1;
            rec.clone_from(&self.last);
            return Ok(true);
        }
        loop {
            self.buf.clear();
            let n = match read_line_bounded(&mut self.input, &mut self.buf, MAX_LINE) {
                Ok(n) => n,
                Err((too_long, msg)) => {
                    // A line too long is skipped to its end (bounded: nothing kept), so
                    // `--skip-bad` can go on; a read error names the line it was reading.
                    if !too_long {
                        // Not counted as read: the same error again stops `--skip-bad`.
                        let mut e = self.error(msg);
                        e.line += 1;
                        return Err(e);
                    }
                    discard_line(&mut self.input);
                    self.line += 1;
                    return Err(self.error(msg));
                }
            };
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
            match formats::parse(self.format, line, rec, &mut self.state) {
                Ok(true) => {
                    if self.state.repeat > 1 {
                        self.pending = self.state.repeat - 1;
                        self.last.clone_from(rec);
                    }
                    return Ok(true);
                }
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

/// One line into `buf` (its `\n` kept), at most `max` bytes: a longer line is an error
/// (`(true, what)`), read no further than `max` (a file of one endless line is not held in
/// memory); a read error is `(false, what)`.
fn read_line_bounded(
    input: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> Result<usize, (bool, String)> {
    loop {
        let avail = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err((false, format!("cannot read: {e}"))),
        };
        if avail.is_empty() {
            return Ok(buf.len());
        }
        let (take, done) = match avail.iter().position(|&c| c == b'\n') {
            Some(p) => (p + 1, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > max {
            return Err((true, format!("a line longer than {max} bytes")));
        }
        buf.extend_from_slice(&avail[..take]);
        input.consume(take);
        if done {
            return Ok(buf.len());
        }
    }
}

/// Consumes input up to and including the next `\n` (or the end), keeping nothing.
fn discard_line(input: &mut dyn BufRead) {
    loop {
        let (take, done) = match input.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(b) => match b.iter().position(|&c| c == b'\n') {
                Some(p) => (p + 1, true),
                None => (b.len(), false),
            },
        };
        input.consume(take);
        if done {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zstd file that inflates more than `MAX_ZSTD_RATIO` times is refused by line, after
    /// reading no more than its bound; one that stays within reads to the end.
    #[test]
    fn a_zstd_bomb_is_refused_not_read_to_its_end() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, mb: usize| {
            let p = d.path().join(name);
            let mut e =
                zstd::stream::write::Encoder::new(std::fs::File::create(&p).unwrap(), 3).unwrap();
            let line = b"1,key1,4,10,1,get,0\n".repeat(1 << 20 >> 5);
            for _ in 0..mb {
                std::io::Write::write_all(&mut e, &line).unwrap();
            }
            e.finish().unwrap();
            p
        };
        let bomb = write("bomb.csv.zst", 200);
        let mut r = TraceReader::open(&bomb, Format::Twitter).unwrap();
        let mut rec = TraceRecord::default();
        let err = loop {
            match r.next_into(&mut rec) {
                Ok(true) => {}
                Ok(false) => panic!("a bomb of 200 MB read to its end"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(err.contains("more than 1000 times its size"), "{err}");
        assert!(r.bytes < 100 << 20, "read {} bytes", r.bytes);
        let fine = write("fine.csv.zst", 1);
        let mut r = TraceReader::open(&fine, Format::Twitter).unwrap();
        let mut n = 0;
        while r.next_into(&mut rec).unwrap() {
            n += 1;
        }
        assert_eq!(n, 32_768);
    }

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

    #[test]
    fn a_long_line_is_skipped_to_its_end_and_repeats_are_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        let long = "x".repeat(MAX_LINE + 10);
        let text = format!(
            "op_time,key,key_size,op,op_count,size\n{long}\n5,k,1,GET,3,0\n6,j,1,SET,1,4\n"
        );
        std::fs::write(&p, text).unwrap();
        let mut r = TraceReader::open(&p, Format::Cachebench).unwrap();
        let mut rec = TraceRecord::default();
        let e = r.next_into(&mut rec).unwrap_err();
        assert_eq!(e.line, 2);
        let mut got = vec![];
        while r.next_into(&mut rec).unwrap() {
            got.push((rec.line, rec.key.clone(), rec.time_us));
        }
        let k = |l, key: &[u8], t| (l, key.to_vec(), t);
        assert_eq!(
            got,
            [
                k(3, b"k", 5000),
                k(3, b"k", 5000),
                k(3, b"k", 5000),
                k(4, b"j", 6000)
            ]
        );
    }
}
