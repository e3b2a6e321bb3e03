//! The YCSB record semantics shared by the stores that keep a record as one value under its
//! key (LMDB, LevelDB, WiredTiger, SQLite, and the memcached and etcd clients), written once so each adapter holds only
//! its store's calls (design.md "The store contract"; RocksDB keeps its own copy because it
//! also merges several databases).
//!
//! An adapter implements `RawKv` (get with a borrowed value, put, delete, ordered scan);
//! `KvSession` turns that into a `Session`: encoding (`record.rs`), field filtering over a
//! zero-copy view, and update as read-merge-write, the way YCSB's RocksDB binding does it.

use super::record::{self, Record, RecordView};
use super::{ErrorKind, Fields, ScanOut, Session, Status};

/// A store error: its kind, whether the store can go on, and the store's own words.
#[derive(Debug)]
pub struct RawError {
    pub kind: ErrorKind,
    pub fatal: bool,
    pub message: String,
}

impl RawError {
    #[cold]
    pub fn new(kind: ErrorKind, fatal: bool, message: impl Into<String>) -> Self {
        RawError {
            kind,
            fatal,
            message: message.into(),
        }
    }
}

/// What `scan` hands each entry to; an error stops the scan.
pub type ScanSink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), record::DecodeError> + 'a;

/// One session's raw access to an ordered key-value store.
pub trait RawKv: Send {
    /// The value under `key`; it borrows the session until the next call.
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError>;
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError>;
    /// Removes `key`; a missing key is not an error (YCSB's delete returns OK).
    fn delete(&mut self, key: &[u8]) -> Result<(), RawError>;
    /// Calls `sink` for up to `count` entries with keys ≥ `start`, in key order.
    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        sink: &mut ScanSink<'_>,
    ) -> Result<(), ScanError>;
    /// Releases what the session holds; called once, at the end.
    fn close(&mut self) -> Result<(), RawError> {
        Ok(())
    }
    /// Pipelining, as `Session::pipeline_depth`, `queue` and `flush`; `flush` returns the
    /// message of the batch's last error, if any.
    fn pipeline_depth(&self) -> usize {
        1
    }
    fn queue(&mut self, _op: super::Queued<'_>) -> bool {
        false
    }
    fn flush(&mut self, _done: &mut dyn FnMut(Status, u64)) -> Option<String> {
        None
    }
    /// As `Session::sent_to`.
    fn sent_to(&self) -> Vec<(std::net::SocketAddr, u64)> {
        vec![]
    }
}

/// A scan ends on a store error or on an undecodable record.
pub enum ScanError {
    Store(RawError),
    Decode(record::DecodeError),
}

impl From<RawError> for ScanError {
    fn from(e: RawError) -> Self {
        ScanError::Store(e)
    }
}

pub struct KvSession<R: RawKv> {
    raw: R,
    spans: Vec<record::Span>,
    merge: record::Merge,
    encoded: Vec<u8>,
    last_error: Option<String>,
}

impl<R: RawKv> KvSession<R> {
    pub fn new(raw: R) -> Self {
        KvSession {
            raw,
            spans: Vec::new(),
            merge: record::Merge::default(),
            encoded: Vec::new(),
            last_error: None,
        }
    }
}

#[cold]
pub(super) fn fail(last: &mut Option<String>, e: RawError) -> Status {
    *last = Some(e.message);
    Status::Error {
        kind: e.kind,
        fatal: e.fatal,
    }
}

#[cold]
pub(super) fn undecodable(last: &mut Option<String>, e: record::DecodeError) -> Status {
    *last = Some(format!("stored record cannot be decoded: {}", e.0));
    Status::error(ErrorKind::Corruption)
}

/// A C library's (pointer, length) as a slice; length 0 gives an empty slice whatever the
/// pointer (which may then be null).
///
/// # Safety
/// For a non-zero `len`, `ptr` must be valid for reads of `len` bytes for all of `'a`.
#[cfg(any(feature = "leveldb", feature = "wiredtiger"))]
pub(super) unsafe fn raw_slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

impl<R: RawKv> Session for KvSession<R> {
    fn read(&mut self, _table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        match self.raw.get(key) {
            Ok(Some(bytes)) => {
                match record::index_encoded(bytes, |n| fields.wants(n), &mut self.spans) {
                    Ok(()) => (Status::Ok, RecordView::new(bytes, &self.spans)),
                    Err(e) => (undecodable(&mut self.last_error, e), RecordView::EMPTY),
                }
            }
            Ok(None) => (Status::NotFound, RecordView::EMPTY),
            Err(e) => (fail(&mut self.last_error, e), RecordView::EMPTY),
        }
    }

    fn scan(
        &mut self,
        _table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        out.clear();
        let mut sink = |k: &[u8], v: &[u8]| {
            let (kb, r) = out.next_slot();
            kb.extend_from_slice(k);
            r.decode_from(v, |n| fields.wants(n))
        };
        match self.raw.scan(start, count, &mut sink) {
            Ok(()) => Status::Ok,
            Err(ScanError::Store(e)) => fail(&mut self.last_error, e),
            Err(ScanError::Decode(e)) => undecodable(&mut self.last_error, e),
        }
    }

    fn update(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let merged = match self.raw.get(key) {
            Ok(Some(v)) => self.merge.apply(v, values, &mut self.encoded),
            Ok(None) => return Status::NotFound,
            Err(e) => return fail(&mut self.last_error, e),
        };
        if let Err(e) = merged {
            return undecodable(&mut self.last_error, e);
        }
        match self.raw.put(key, &self.encoded) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn insert(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        self.encoded.clear();
        values.encode_into(&mut self.encoded);
        match self.raw.put(key, &self.encoded) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn delete(&mut self, _table: &str, key: &[u8]) -> Status {
        match self.raw.delete(key) {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    fn pipeline_depth(&self) -> usize {
        self.raw.pipeline_depth()
    }

    fn queue(&mut self, op: super::Queued<'_>) -> bool {
        self.raw.queue(op)
    }

    fn flush(&mut self, done: &mut dyn FnMut(Status, u64)) {
        if let Some(m) = self.raw.flush(done) {
            self.last_error = Some(m);
        }
    }

    fn sent_to(&self) -> Vec<(std::net::SocketAddr, u64)> {
        self.raw.sent_to()
    }

    fn close(mut self: Box<Self>) -> Status {
        match self.raw.close() {
            Ok(()) => Status::Ok,
            Err(e) => fail(&mut self.last_error, e),
        }
    }
}
