//! The store contract (design.md "The store contract") and the registry of adapters.
//!
//! A store is opened once per phase and hands each worker its own `Session` (thread-local
//! state). Operations follow YCSB's `DB` interface and return a `Status`; an adapter contains
//! store code only — all timing and counting happens in the driver (`driver/call.rs`, for
//! worker threads and the event-driven engine alike), so no adapter ever times itself (style.md, after YCSB's `DBWrapper`). The adapters are listed
//! once, in `registry.rs`.

pub mod cluster;
pub mod etcd;
pub mod kv;
#[cfg(feature = "leveldb")]
pub mod leveldb;
#[cfg(feature = "lmdb")]
pub mod lmdb;
pub mod managed;
pub mod memcached;
pub mod net;
pub mod null;
mod options;
pub mod plugin;
pub mod redis;
pub mod registry;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
#[cfg(feature = "rocksdb")]
mod rocksdb_log;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod stats;
pub mod udp_frame;
pub mod wait;
pub mod wire;
#[cfg(feature = "wiredtiger")]
pub mod wiredtiger;

pub use options::{OptSpec, StoreOptions};
// The record types live in the leaf `crate::record` (the workload builds records too, and
// sits beside store, not above it); re-exported so adapters and tests keep `store::` paths.
pub use crate::record::{self, Fields, Record, RecordView};
pub use registry::{built_in, names, not_built};

use crate::error::UsageError;
use std::path::Path;

/// The store `--store` names: a built-in adapter, or a plug-in (`plugin:PATH`, loaded the
/// first time it is named; `plugin::kind` gives the reason when it cannot be).
pub fn find(name: &str) -> Option<&'static StoreKind> {
    if plugin::is_plugin(name) {
        return plugin::kind(name).ok();
    }
    registry::find_built_in(name)
}

/// The store's version for the manifest and `kvmeter stores`: a plug-in's from its library.
pub fn version_of(kind: &StoreKind) -> String {
    match plugin::loaded(kind.name) {
        Some(p) => p.describe(),
        None => (kind.version)(),
    }
}

/// Error kinds counted separately in results. Each maps to a YCSB status name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Input/output failure inside the store (disk full, EIO).
    Io,
    /// The store answered too late.
    Timeout,
    /// The store was busy or asked to retry.
    Busy,
    /// Stored data failed a check (store corruption or an undecodable record).
    Corruption,
    /// The store does not implement the operation.
    NotImplemented,
    /// A read returned data that differs from what was written (data-integrity mode).
    UnexpectedState,
    /// Anything else.
    Other,
    /// A write the primary applied but fewer replicas than `wait_replicas` confirmed in time:
    /// not acknowledged as durable, so the durability check counts it as indeterminate.
    Unconfirmed,
    /// The server's reply broke its protocol: garbage, a negative or oversized length, a
    /// reply larger than `max_reply` (the connection is dropped and opened again).
    Protocol,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 9] = [
        ErrorKind::Io,
        ErrorKind::Timeout,
        ErrorKind::Busy,
        ErrorKind::Corruption,
        ErrorKind::NotImplemented,
        ErrorKind::UnexpectedState,
        ErrorKind::Other,
        ErrorKind::Unconfirmed,
        ErrorKind::Protocol,
    ];
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Io => "io",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Busy => "busy",
            ErrorKind::Corruption => "corruption",
            ErrorKind::NotImplemented => "not_implemented",
            ErrorKind::UnexpectedState => "unexpected_state",
            ErrorKind::Other => "error",
            ErrorKind::Unconfirmed => "unconfirmed",
            ErrorKind::Protocol => "protocol",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    NotFound,
    /// `fatal`: the store cannot go on (it ends the phase with results so far).
    Error {
        kind: ErrorKind,
        fatal: bool,
    },
}

impl Status {
    #[inline]
    pub fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }
    pub fn error(kind: ErrorKind) -> Status {
        Status::Error { kind, fatal: false }
    }
}

/// Records a scan returns; buffers are reused across scans.
#[derive(Default)]
pub struct ScanOut {
    keys: Vec<Vec<u8>>,
    records: Vec<Record>,
    len: usize,
}

impl ScanOut {
    pub fn clear(&mut self) {
        self.len = 0;
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// A slot for the next record: its key buffer and record, both cleared.
    pub fn next_slot(&mut self) -> (&mut Vec<u8>, &mut Record) {
        if self.len == self.records.len() {
            self.keys.push(Vec::new());
            self.records.push(Record::new());
        }
        let i = self.len;
        self.len += 1;
        self.keys[i].clear();
        self.records[i].clear();
        (&mut self.keys[i], &mut self.records[i])
    }
    /// Slot `i` (below `len`), for filling records after their keys.
    pub fn slot_mut(&mut self, i: usize) -> (&mut Vec<u8>, &mut Record) {
        (&mut self.keys[i], &mut self.records[i])
    }
    /// Drops the last slot taken (a record the store filtered out after all).
    pub fn pop(&mut self) {
        self.len -= 1;
    }
    pub fn get(&self, i: usize) -> (&[u8], &Record) {
        (&self.keys[i], &self.records[i])
    }
    pub fn data_bytes(&self) -> u64 {
        (0..self.len).map(|i| self.records[i].data_bytes()).sum()
    }
}

/// An operation for a pipelined batch (`Session::queue`).
#[derive(Clone, Copy)]
pub enum Queued<'a> {
    Read(&'a [u8], Fields<'a>),
    Update(&'a [u8], &'a Record),
    Insert(&'a [u8], &'a Record),
    Delete(&'a [u8]),
}

/// One worker's connection to the store.
pub trait Session: Send {
    /// Reads the asked fields; the view borrows the session until its next call.
    fn read(&mut self, table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>);
    fn scan(
        &mut self,
        table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status;
    fn update(&mut self, table: &str, key: &[u8], values: &Record) -> Status;
    fn insert(&mut self, table: &str, key: &[u8], values: &Record) -> Status;
    fn delete(&mut self, table: &str, key: &[u8]) -> Status;
    /// The text of the latest error status, if the adapter kept it.
    fn last_error(&mut self) -> Option<String> {
        None
    }
    /// Operations this session sends per round trip (`--store-opt pipeline=N`); 1: none, and
    /// then `queue` and `flush` are never called.
    fn pipeline_depth(&self) -> usize {
        1
    }
    /// Queues an operation for the next `flush`: its request is written into the session's
    /// send buffer now, so the caller's key and values may change right after. `false`: this
    /// kind of operation is not pipelined here; the caller flushes and runs it alone.
    fn queue(&mut self, _op: Queued<'_>) -> bool {
        false
    }
    /// Sends every queued request in one write and reads the replies in order, calling
    /// `done(status, bytes returned)` as each reply is parsed (the caller reads its clock
    /// there: a reply's latency runs from the batch's send to its own arrival).
    fn flush(&mut self, _done: &mut dyn FnMut(Status, u64)) {}
    /// The shard (a Redis Cluster master's slot range, by creation order) the latest
    /// operation's key belongs to; `None` where the store does not shard. The recovery
    /// timeline uses it to tell operations on a faulted shard from the rest.
    fn shard(&self) -> Option<u16> {
        None
    }
    /// Requests this session sent, by server address (a cluster's members; empty where there
    /// is one server or none): which member served the clients, e.g. the etcd leader they
    /// followed. Asked once, before `close`.
    fn sent_to(&self) -> Vec<(std::net::SocketAddr, u64)> {
        vec![]
    }
    /// Ends the session (YCSB's `cleanup`).
    fn close(self: Box<Self>) -> Status {
        Status::Ok
    }
}

/// An open store.
pub trait Store: Send + Sync {
    fn session(&self) -> anyhow::Result<Box<dyn Session>>;
    /// Where the event-driven engine (`--connections`) connects and how it talks there; `None`
    /// for stores the engine does not serve (embedded stores and plug-ins keep worker threads).
    fn event_target(&self) -> Option<Box<dyn wire::EventTarget>> {
        None
    }
    /// The statistics the store reports about itself (`stats.rs`), in the order
    /// `sample_stats` writes them; empty: none.
    fn stats(&self) -> &'static [stats::StatSpec] {
        &[]
    }
    /// The current value of each declared statistic into `out` (as long as `stats()`);
    /// `None`: not available at this moment. Called off the measured path, once per interval.
    /// `Err(why)`: no value could be read this time (a server that did not answer, or
    /// answered beyond its protocol or bounds); the run goes on.
    fn sample_stats(&self, _out: &mut [Option<u64>]) -> Result<(), String> {
        Ok(())
    }
    /// The events the store logged since the last call, in order, appended to `out` (at most
    /// `stats::MAX_EVENTS_PER_POLL`); called with the statistics, off the measured path. A
    /// store that logs none appends none. `Err(why)`: its log could not be read this time.
    fn poll_events(&self, _out: &mut Vec<stats::StoreEvent>) -> Result<(), String> {
        Ok(())
    }
    /// Flushes and closes; after it returns the data is durable where the store promises it.
    fn close(self: Box<Self>) -> anyhow::Result<()>;
}

/// What an adapter can do, so unsupported operations show as N/A rather than vanishing.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Capabilities {
    pub scan: bool,
    /// Keeps data across close and reopen.
    pub persistent: bool,
    /// Returns what was written (false for `null`).
    pub stores_data: bool,
}

/// An adapter as the registry knows it.
pub struct StoreKind {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [OptSpec],
    pub capabilities: Capabilities,
    pub version: fn() -> String,
    /// Whether it works on this machine, and why not.
    pub probe: fn() -> Result<(), String>,
    /// Validates option values before anything is created (bad values: exit 2).
    pub check: fn(&StoreOptions) -> Result<(), crate::error::UsageError>,
    /// Opens the store with its files under `dir` (created by the caller, owned by kvmeter).
    /// A server store connects to `addr` (filled in by the driver for a managed server).
    pub open: fn(dir: &Path, opts: &StoreOptions) -> anyhow::Result<Box<dyn Store>>,
    /// For server stores: how to start, check and empty the server.
    pub server: Option<&'static ServerSpec>,
    /// The event-driven engine's support (`--connections`), when it serves this store.
    pub engine: Option<&'static EngineSupport>,
    /// Why a workload with scans cannot run with these options, if it cannot (Redis with
    /// `encoding=string` keeps no key index).
    pub scans_refused: fn(&StoreOptions) -> Option<&'static str>,
    /// The statistics its stores report about themselves (`Store::stats`), for
    /// `kvmeter stores`; empty: none.
    pub stats: &'static [stats::StatSpec],
    /// Symbol prefixes of its code when it is compiled into kvmeter (`rocksdb::`), so a
    /// profile charges those frames to the store, not the harness (`--profile`); a store in a
    /// library of its own (a plug-in) is told apart by that library.
    pub profile_symbols: &'static [&'static str],
}

/// What the plan needs to know of a store the event-driven engine serves (plan/engine.rs reads
/// it; the codec itself comes from `Store::event_target`).
pub struct EngineSupport {
    /// Options the engine does not serve yet, said in one line naming the option.
    pub refusal: fn(&StoreOptions) -> Option<String>,
    /// The least connection limit (`max_clients`) a managed server gets under the engine.
    pub min_clients: u64,
    /// Sockets each engine connection opens (a Redis Cluster client: one per master).
    pub sockets_per_connection: fn(&StoreOptions) -> u64,
}

/// `scans_refused` of a store that scans whatever its options (or never does: the plan's
/// capability check says that).
pub fn scans_always_served(_: &StoreOptions) -> Option<&'static str> {
    None
}

/// `sockets_per_connection` of a store with one server per connection.
pub fn one_socket(_: &StoreOptions) -> u64 {
    1
}

/// A server store's server: with `--store-opt addr` empty kvmeter starts it (managed.rs).
pub struct ServerSpec {
    /// The binary kvmeter starts, and the Debian package that has it.
    pub binary: &'static str,
    pub package: &'static str,
    /// Loopback ports the server needs (the first is the client port).
    pub ports: usize,
    /// Arguments for a server on `ports` with its files under `dir`.
    pub args: fn(opts: &StoreOptions, ports: &[u16], dir: &Path) -> Vec<String>,
    /// Connects to `addr` and asks for the server's version: the readiness check, and the
    /// clear error at start when a user's server is down.
    pub ping: fn(opts: &StoreOptions, addr: &str) -> Result<String, String>,
    /// Removes every record (the suite's clear phase).
    pub clear: fn(opts: &StoreOptions) -> anyhow::Result<()>,
    /// The members a managed server is made of for these options (a single server, an etcd
    /// group, a Redis primary with replicas, a Redis Cluster).
    pub topology: fn(opts: &StoreOptions) -> &'static dyn cluster::Topology,
    /// Options that only set up a server kvmeter starts (its memory, threads, CPUs, members):
    /// refused with `addr=` (the user's own server) and left out of that run's manifest.
    pub managed_only: &'static [&'static str],
}

/// The `--store-opt` items parsed and checked (`StoreKind::check`) before anything is created.
/// With `addr=` a server is the user's own, so an option that only sets up a server kvmeter
/// starts would configure nothing: given, it is refused by name; left at its default, it is
/// left out of what the run records (`StoreOptions::applied`), so that memcached's
/// `memory_mb=1024` is not read as the setting of a server started with `-m 64`.
pub fn checked_options(kind: &StoreKind, items: &[String]) -> Result<StoreOptions, UsageError> {
    let mut opts = StoreOptions::parse(kind.name, kind.options, items)?;
    (kind.check)(&opts)?;
    let Some(server) = kind.server.filter(|_| !opts.str("addr").is_empty()) else {
        return Ok(opts);
    };
    if let Some(k) = server.managed_only.iter().find(|k| opts.is_given(k)) {
        return Err(UsageError::new(format!(
            "--store-opt {k}={}: sets up a server kvmeter starts, but addr={} is your own; configure it there, or leave addr out and kvmeter starts one",
            opts.str(k),
            opts.str("addr")
        )));
    }
    opts.set_not_applied(server.managed_only);
    Ok(opts)
}

/// Counts one request sent to `addr` (a linear search over a cluster's few members; a new
/// member is pushed once).
#[inline]
pub fn count_sent(v: &mut Vec<(std::net::SocketAddr, u64)>, addr: std::net::SocketAddr) {
    match v.iter_mut().find(|(a, _)| *a == addr) {
        Some((_, n)) => *n += 1,
        None => v.push((addr, 1)),
    }
}

/// Server probe: usable when the binary is installed (managed mode); a user's own server
/// (`addr=`) works without it.
pub fn probe_server(spec: &ServerSpec) -> Result<(), String> {
    match managed::find_binary(spec.binary) {
        Some(_) => Ok(()),
        None => Err(format!(
            "'{}' not installed (Debian package {}); a server of your own works with --store-opt addr=host:port",
            spec.binary, spec.package
        )),
    }
}

#[cfg(test)]
mod tests {
    /// Each server's `managed_only` names an option it declares, one whose help says it is a
    /// managed server's: a misspelt name would turn off both the refusal and the omission.
    #[test]
    fn managed_only_options_are_declared_and_say_managed() {
        for kind in [
            &super::memcached::KIND,
            &super::redis::KIND,
            &super::etcd::KIND,
        ] {
            let server = kind.server.unwrap();
            assert!(!server.managed_only.is_empty(), "{}", kind.name);
            for name in server.managed_only {
                let spec = kind.options.iter().find(|o| o.name == *name);
                let spec = spec.unwrap_or_else(|| panic!("{}: {name} not declared", kind.name));
                assert!(spec.help.starts_with("managed"), "{}: {name}", kind.name);
            }
        }
    }
}
