//! Redis string mode on worker threads (`encoding=string`): each record is its serialized
//! bytes under its key, read with GET and written with SET — what redis-benchmark and memtier
//! send — through `KvSession`, so field filtering and update as read-merge-write are the
//! embedded stores' own (the event-driven engine sends the same requests: `codec.rs`). No key
//! index is kept, so there are no scans.

use super::resp::{command, malformed, redis_error, reply, Reply};
use super::server::{connect, Settings};
use crate::store::kv::{RawError, RawKv, ScanError, ScanSink};
use crate::store::net::Conn;
use crate::store::ErrorKind;
use std::net::SocketAddr;

pub(super) struct RedisStrings {
    pub(super) conns: Vec<Conn>,
    pub(super) next: usize,
    pub(super) s: Settings,
    pub(super) addr: SocketAddr,
}

impl RedisStrings {
    /// The next connection in turn, opened again if an error broke it.
    fn conn(&mut self) -> Result<usize, RawError> {
        let i = self.next;
        self.next = (i + 1) % self.conns.len();
        if self.conns[i].broken {
            self.conns[i] = connect(&self.s, self.addr)?;
        }
        self.conns[i].begin();
        Ok(i)
    }

    /// One command whose reply is +OK or an integer.
    fn simple(&mut self, args: &[&[u8]]) -> Result<(), RawError> {
        let i = self.conn()?;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, args);
        c.send()?;
        match reply(c)? {
            Reply::Simple(_) | Reply::Int(_) => Ok(()),
            Reply::Error(r) => Err(redis_error(c.bytes(r))),
            _ => Err(malformed(c)),
        }
    }
}

impl RawKv for RedisStrings {
    fn get(&mut self, key: &[u8]) -> Result<Option<&[u8]>, RawError> {
        let i = self.conn()?;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, &[b"GET", key]);
        c.send()?;
        match reply(c)? {
            Reply::Bulk(None) => Ok(None),
            Reply::Bulk(Some(r)) => Ok(Some(self.conns[i].bytes(r))),
            Reply::Error(r) => Err(redis_error(c.bytes(r))),
            _ => Err(malformed(c)),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), RawError> {
        self.simple(&[b"SET", key, value])
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), RawError> {
        self.simple(&[b"DEL", key])
    }

    fn scan(&mut self, _: &[u8], _: usize, _: &mut ScanSink<'_>) -> Result<(), ScanError> {
        Err(ScanError::Store(RawError::new(
            ErrorKind::NotImplemented,
            false,
            "Redis string mode keeps no key index: no scans",
        )))
    }
}
