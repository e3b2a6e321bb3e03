//! memcached's text protocol for the event-driven engine (`store::wire`): `get`, `set` of the
//! encoded record, `delete`; every reply read by `text.rs` (the one reader of text replies)
//! and checked against the request it answers (a `VALUE` line must name the key that was
//! asked for, or the connection is out of step).

use super::text::{self, Answer, Got};
use crate::record::{self, Span};
use crate::store::net::push_num;
use crate::store::wire::{self, Codec, EventTarget, Parsed, Sent};
use crate::store::{ErrorKind, Fields, Queued, Status};
use std::net::SocketAddr;
use std::time::Duration;

pub(super) struct McTarget {
    pub(super) addr: SocketAddr,
    pub(super) timeout: Duration,
    pub(super) max_reply: usize,
    pub(super) wait: crate::store::wait::Wait,
    /// `udp=true`: every request over UDP, one datagram each (`wire::Link::Udp`).
    pub(super) udp: bool,
}

impl EventTarget for McTarget {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn wait(&self) -> crate::store::wait::Wait {
        self.wait
    }
    fn connect(&self) -> Result<wire::Link, String> {
        if self.udp {
            let any = if self.addr.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            let s = std::net::UdpSocket::bind(any)
                .and_then(|s| s.connect(self.addr).map(|_| s))
                .map_err(|e| format!("memcached: UDP to {}: {e}", self.addr))?;
            return Ok(wire::Link::Udp(s));
        }
        wire::connect_tcp(self.addr, self.timeout)
            .map(wire::Link::Tcp)
            .map_err(|e| format!("memcached: {e}"))
    }
    fn codec(&self) -> Box<dyn Codec> {
        Box::new(McCodec {
            encoded: Vec::new(),
            max_reply: self.max_reply,
            last_error: None,
            udp: self.udp,
        })
    }
    fn whole_record_writes(&self) -> bool {
        true
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    fn max_reply(&self) -> usize {
        self.max_reply
    }
}

pub(super) struct McCodec {
    encoded: Vec<u8>,
    max_reply: usize,
    last_error: Option<String>,
    udp: bool,
}

impl McCodec {
    #[cold]
    fn server_error(&mut self, what: &str, l: &[u8]) -> Status {
        let e = super::text::server_error(what, l);
        self.last_error = Some(e.message);
        Status::error(e.kind)
    }

    /// The request in the text protocol.
    fn encode_text(&mut self, op: Queued<'_>, out: &mut Vec<u8>) {
        match op {
            Queued::Read(key, _) => {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
            // A whole record (plan refuses a partial update here: memcached keeps the record
            // as one value, so a partial one is a read-merge-write).
            Queued::Insert(key, values) | Queued::Update(key, values) => {
                self.encoded.clear();
                values.encode_into(&mut self.encoded);
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" 0 0 ");
                push_num(out, self.encoded.len());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.encoded);
                out.extend_from_slice(b"\r\n");
            }
            Queued::Delete(key) => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

impl Codec for McCodec {
    fn encode(&mut self, op: Queued<'_>, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        if self.udp {
            out.extend_from_slice(&[0; wire::UDP_FRAMED]);
        }
        self.encode_text(op, out);
        if self.udp {
            let len = (out.len() - start - wire::UDP_FRAMED) as u32;
            out[start..start + wire::UDP_FRAMED].copy_from_slice(&len.to_le_bytes());
        }
        true
    }

    fn decode(
        &mut self,
        sent: Sent,
        key: &[u8],
        field: &[u8],
        buf: &[u8],
        spans: &mut Vec<Span>,
    ) -> Parsed {
        let reply = |status, used, bytes, view_base| Parsed::Reply {
            status,
            used,
            bytes,
            view_base,
        };
        let line = |what: &str, judge: fn(&[u8]) -> Answer, this: &mut Self| {
            let (l, used) = match wire::line(buf) {
                Ok(Some(x)) => x,
                Ok(None) => return Parsed::More,
                Err(why) => return Parsed::Broken(why),
            };
            match judge(l) {
                Answer::Done => reply(Status::Ok, used, 0, 0),
                Answer::Refused => reply(this.server_error(what, l), used, 0, 0),
                Answer::Garbage(why) => Parsed::Broken(why),
            }
        };
        match sent {
            Sent::Read { all } => {
                let (got, used) = match text::get_reply(buf, key, self.max_reply) {
                    Ok(Some(x)) => x,
                    Ok(None) => return Parsed::More,
                    Err(why) => return Parsed::Broken(why),
                };
                let data = match got {
                    Got::Missing => return reply(Status::NotFound, used, 0, 0),
                    Got::Refused(r) => return reply(self.server_error("get", &buf[r]), used, 0, 0),
                    Got::Value(data) => data,
                };
                let want = if all { Fields::All } else { Fields::One(field) };
                match record::index_encoded(&buf[data.clone()], |nm| want.wants(nm), spans) {
                    Ok(()) => {
                        let bytes = spans.iter().map(|s| s.data_len()).sum();
                        reply(Status::Ok, used, bytes, data.start)
                    }
                    Err(e) => {
                        self.last_error = Some(format!("stored record cannot be decoded: {}", e.0));
                        reply(Status::error(ErrorKind::Corruption), used, 0, data.start)
                    }
                }
            }
            Sent::Insert | Sent::Update => line("set", text::stored, self),
            Sent::Delete => line("delete", text::deleted, self),
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> McCodec {
        McCodec {
            encoded: Vec::new(),
            max_reply: 1 << 20,
            last_error: None,
            udp: false,
        }
    }

    fn rec() -> crate::record::Record {
        let mut r = crate::record::Record::new();
        r.push(b"field0", b"abc");
        r
    }

    #[test]
    fn a_get_reply_is_whole_only_with_its_end() {
        let mut c = codec();
        let mut enc = Vec::new();
        rec().encode_into(&mut enc);
        let mut reply = format!("VALUE user1 0 {}\r\n", enc.len()).into_bytes();
        reply.extend_from_slice(&enc);
        reply.extend_from_slice(b"\r\nEND\r\nVALUE");
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        for cut in 0..reply.len() - 5 {
            assert_eq!(
                c.decode(read, b"user1", b"", &reply[..cut], &mut spans),
                Parsed::More,
                "{cut}"
            );
        }
        let Parsed::Reply {
            status,
            used,
            bytes,
            view_base,
        } = c.decode(read, b"user1", b"", &reply, &mut spans)
        else {
            panic!()
        };
        assert_eq!((status, used, bytes), (Status::Ok, reply.len() - 5, 9));
        let view = crate::record::RecordView::new(&reply[view_base..], &spans);
        assert_eq!(view.get(b"field0"), Some(&b"abc"[..]));
        // Another key's value: out of step.
        assert!(matches!(
            c.decode(read, b"user2", b"", &reply, &mut spans),
            Parsed::Broken(_)
        ));
        assert!(matches!(
            c.decode(read, b"user", b"", &reply, &mut spans),
            Parsed::Broken(_)
        ));
        assert!(matches!(
            c.decode(read, b"k", b"", b"END\r\n", &mut spans),
            Parsed::Reply {
                status: Status::NotFound,
                used: 5,
                ..
            }
        ));
    }

    #[test]
    fn hostile_replies_are_broken_not_waited_for() {
        let mut c = codec();
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        let huge = b"VALUE k 0 99999999999\r\n";
        assert!(matches!(
            c.decode(read, b"k", b"", huge, &mut spans),
            Parsed::Broken(_)
        ));
        assert!(matches!(
            c.decode(read, b"k", b"", &[b'a'; 1100], &mut spans),
            Parsed::Broken(_)
        ));
        assert!(matches!(
            c.decode(Sent::Insert, b"k", b"", b"WHAT\r\n", &mut spans),
            Parsed::Broken(_)
        ));
        let st = c.decode(
            Sent::Insert,
            b"k",
            b"",
            b"SERVER_ERROR out of memory storing object\r\n",
            &mut spans,
        );
        assert!(
            matches!(
                st,
                Parsed::Reply {
                    status: Status::Error {
                        kind: ErrorKind::Busy,
                        fatal: false
                    },
                    ..
                }
            ),
            "{st:?}"
        );
        assert!(c.last_error().unwrap().contains("out of memory"));
    }

    #[test]
    fn requests_are_memcached_text() {
        let mut c = codec();
        let mut out = Vec::new();
        c.encode(Queued::Read(b"user1", Fields::All), &mut out);
        c.encode(Queued::Insert(b"user2", &rec()), &mut out);
        c.encode(Queued::Delete(b"user3"), &mut out);
        let mut want = b"get user1\r\nset user2 0 0 15\r\n".to_vec();
        rec().encode_into(&mut want);
        want.extend_from_slice(b"\r\ndelete user3\r\n");
        assert_eq!(out, want);
    }
}
