//! memcached's binary protocol for the event-driven engine (`store::wire`): GETK of the record,
//! SET of the encoded record, DELETE — the blocking binary session's requests, each reply
//! framed and checked by `binary.rs` (the one reader of binary replies). One `Codec` serves
//! every connection of an event-loop thread and keeps nothing per request (a request's
//! opaque is its key's hash). No SASL: the blocking binary session does not authenticate
//! either.

use super::binary::{bin_status, frame, request, KEY_ENOENT, OP_DELETE, OP_GETK, OP_SET};
use crate::record::{self, Span};
use crate::store::wire::{self, Codec, EventTarget, Parsed, Sent};
use crate::store::{ErrorKind, Fields, Queued, Status};
use std::net::SocketAddr;
use std::time::Duration;

pub(super) struct BinTarget {
    pub(super) addr: SocketAddr,
    pub(super) timeout: Duration,
    pub(super) max_reply: usize,
    pub(super) wait: crate::store::wait::Wait,
}

impl EventTarget for BinTarget {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn wait(&self) -> crate::store::wait::Wait {
        self.wait
    }
    fn connect(&self) -> Result<wire::Link, String> {
        wire::connect_tcp(self.addr, self.timeout)
            .map(wire::Link::Tcp)
            .map_err(|e| format!("memcached: {e}"))
    }
    fn codec(&self) -> Box<dyn Codec> {
        Box::new(BinCodec {
            encoded: Vec::new(),
            max_reply: self.max_reply,
            last_error: None,
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

pub(super) struct BinCodec {
    encoded: Vec<u8>,
    max_reply: usize,
    last_error: Option<String>,
}

impl BinCodec {
    #[cold]
    fn server_error(&mut self, what: &str, status: u16, body: &[u8]) -> Status {
        let e = bin_status(what, status, body);
        self.last_error = Some(e.message);
        Status::error(e.kind)
    }

    /// A GETK hit's value: its record indexed into `spans`.
    fn value(&mut self, all: bool, field: &[u8], value: &[u8], spans: &mut Vec<Span>) -> Status {
        let want = if all { Fields::All } else { Fields::One(field) };
        match record::index_encoded(value, |nm| want.wants(nm), spans) {
            Ok(()) => Status::Ok,
            Err(e) => {
                self.last_error = Some(format!("stored record cannot be decoded: {}", e.0));
                Status::error(ErrorKind::Corruption)
            }
        }
    }
}

impl Codec for BinCodec {
    fn encode(&mut self, op: Queued<'_>, out: &mut Vec<u8>) -> bool {
        match op {
            Queued::Read(key, _) => {
                request(out, OP_GETK, key, 0, 0);
                out.extend_from_slice(key);
            }
            // A whole record (plan refuses a partial update here: memcached keeps the record
            // as one value, so a partial one is a read-merge-write).
            Queued::Insert(key, values) | Queued::Update(key, values) => {
                self.encoded.clear();
                values.encode_into(&mut self.encoded);
                request(out, OP_SET, key, 8, self.encoded.len());
                out.extend_from_slice(&[0; 8]); // flags, expiration
                out.extend_from_slice(key);
                out.extend_from_slice(&self.encoded);
            }
            Queued::Delete(key) => {
                request(out, OP_DELETE, key, 0, 0);
                out.extend_from_slice(key);
            }
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
        let op = match sent {
            Sent::Read { .. } => OP_GETK,
            Sent::Insert | Sent::Update => OP_SET,
            Sent::Delete => OP_DELETE,
        };
        let (h, used) = match frame(buf, op, key, self.max_reply) {
            Ok(Some(x)) => x,
            Ok(None) => return Parsed::More,
            Err(why) => return Parsed::Broken(why),
        };
        let value_at = h.value_at();
        let reply = |status, bytes, view_base| Parsed::Reply {
            status,
            used,
            bytes,
            view_base,
        };
        match (sent, h.status) {
            (Sent::Read { all }, 0) => {
                let st = self.value(all, field, &buf[value_at..used], spans);
                let bytes = match st {
                    Status::Ok => spans.iter().map(|s| s.data_len()).sum(),
                    _ => 0,
                };
                reply(st, bytes, value_at)
            }
            (Sent::Read { .. }, KEY_ENOENT) => reply(Status::NotFound, 0, 0),
            (Sent::Insert | Sent::Update, 0) => reply(Status::Ok, 0, 0),
            (Sent::Delete, 0 | KEY_ENOENT) => reply(Status::Ok, 0, 0),
            (_, status) => {
                let what = match sent {
                    Sent::Read { .. } => "get",
                    Sent::Insert | Sent::Update => "set",
                    Sent::Delete => "delete",
                };
                let st = self.server_error(what, status, &buf[value_at..used]);
                reply(st, 0, 0)
            }
        }
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }
}

#[cfg(test)]
mod tests {
    use super::super::binary::opaque;
    use super::*;

    fn codec() -> BinCodec {
        BinCodec {
            encoded: Vec::new(),
            max_reply: 1 << 20,
            last_error: None,
        }
    }

    fn rec() -> crate::record::Record {
        let mut r = crate::record::Record::new();
        r.push(b"field0", b"abc");
        r.push(b"field1", b"defg");
        r
    }

    /// A reply written out by hand from protocol_binary.h: magic 0x81, opcode, key length,
    /// extras length, data type 0, status, total body length, opaque, cas, then the body.
    fn reply(op: u8, status: u16, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut r = vec![0x81, op];
        r.extend_from_slice(&(key.len() as u16).to_be_bytes());
        r.push(extras.len() as u8);
        r.push(0);
        r.extend_from_slice(&status.to_be_bytes());
        let total = (extras.len() + key.len() + value.len()) as u32;
        r.extend_from_slice(&total.to_be_bytes());
        r.extend_from_slice(&opaque.to_be_bytes());
        r.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // cas
        r.extend_from_slice(extras);
        r.extend_from_slice(key);
        r.extend_from_slice(value);
        r
    }

    /// FNV's own 32-bit FNV-1a test vectors.
    #[test]
    fn the_opaque_is_fnv1a_of_the_key() {
        assert_eq!(opaque(b""), 0x811c_9dc5);
        assert_eq!(opaque(b"a"), 0xe40c_292c);
        assert_eq!(opaque(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn every_prefix_of_a_getk_reply_is_more_and_the_whole_is_its_record() {
        let mut c = codec();
        let mut enc = Vec::new();
        rec().encode_into(&mut enc);
        let mut r = reply(OP_GETK, 0, opaque(b"user1"), &[0; 4], b"user1", &enc);
        let whole = r.len();
        r.extend_from_slice(&[0x81, 0x0c]); // the start of the next reply
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        for cut in 0..whole {
            assert_eq!(
                c.decode(read, b"user1", b"", &r[..cut], &mut spans),
                Parsed::More,
                "{cut}"
            );
        }
        let Parsed::Reply {
            status,
            used,
            bytes,
            view_base,
        } = c.decode(read, b"user1", b"", &r, &mut spans)
        else {
            panic!()
        };
        assert_eq!((status, used, bytes), (Status::Ok, whole, 19));
        assert_eq!(view_base, 24 + 4 + 5);
        let view = crate::record::RecordView::new(&r[view_base..], &spans);
        assert_eq!(view.get(b"field0"), Some(&b"abc"[..]));
        assert_eq!(view.get(b"field1"), Some(&b"defg"[..]));
        // One field asked: only it is indexed (its name and value: 6 + 4 bytes).
        let one = Sent::Read { all: false };
        let p = c.decode(one, b"user1", b"field1", &r, &mut spans);
        assert!(matches!(p, Parsed::Reply { bytes: 10, .. }), "{p:?}");
        assert_eq!(spans.len(), 1);
    }

    #[test]
    fn every_prefix_of_a_miss_a_set_and_a_delete_reply_is_more() {
        let mut c = codec();
        let mut spans = vec![];
        let o = opaque(b"k");
        for (sent, r, want) in [
            (
                Sent::Read { all: true },
                reply(OP_GETK, 1, o, &[], b"k", b""),
                Status::NotFound,
            ),
            (
                Sent::Read { all: true },
                reply(OP_GETK, 1, o, &[], b"", b"Not found"),
                Status::NotFound,
            ),
            (Sent::Update, reply(OP_SET, 0, o, &[], b"", b""), Status::Ok),
            (
                Sent::Delete,
                reply(OP_DELETE, 0, o, &[], b"", b""),
                Status::Ok,
            ),
            (
                Sent::Delete,
                reply(OP_DELETE, 1, o, &[], b"", b"Not found"),
                Status::Ok,
            ),
        ] {
            for cut in 0..r.len() {
                assert_eq!(
                    c.decode(sent, b"k", b"", &r[..cut], &mut spans),
                    Parsed::More
                );
            }
            let p = c.decode(sent, b"k", b"", &r, &mut spans);
            assert_eq!(
                p,
                Parsed::Reply {
                    status: want,
                    used: r.len(),
                    bytes: 0,
                    view_base: 0
                },
                "{sent:?}"
            );
        }
    }

    #[test]
    fn replies_out_of_step_or_too_long_are_broken_from_the_header_alone() {
        let mut c = codec();
        c.max_reply = 1000;
        let mut spans = vec![];
        let read = Sent::Read { all: true };
        let o = opaque(b"user1");
        let broken = |c: &mut BinCodec, sent: Sent, r: &[u8], why: &str| {
            let mut spans = vec![];
            match c.decode(sent, b"user1", b"", r, &mut spans) {
                Parsed::Broken(w) => assert!(w.contains(why), "{w}"),
                p => panic!("{p:?} for {why}"),
            }
        };
        let good = reply(OP_GETK, 0, o, &[0; 4], b"user1", b"x");
        // Each check on the 24 header bytes alone: nothing is waited for.
        let mut magic = good.clone();
        magic[0] = 0x80;
        broken(&mut c, read, &magic[..24], "magic");
        broken(&mut c, Sent::Update, &good[..24], "opcode");
        let other = reply(OP_GETK, 0, opaque(b"user2"), &[0; 4], b"user1", b"x");
        broken(&mut c, read, &other[..24], "opaque");
        let long = reply(OP_GETK, 0, o, &[0; 4], b"user1", &[b'v'; 1001]);
        broken(&mut c, read, &long[..24], "max_reply");
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        broken(&mut c, read, &huge[..24], "max_reply");
        let mut short = good.clone();
        short[8..12].copy_from_slice(&8u32.to_be_bytes()); // extras 4 + key 5 > 8
        broken(&mut c, read, &short[..24], "disagree");
        let mut extras = good.clone();
        extras[4] = 200;
        broken(&mut c, read, &extras[..24], "disagree");
        let keylen = reply(OP_GETK, 0, o, &[0; 4], b"user12", b"x");
        broken(&mut c, read, &keylen[..24], "another key");
        // The same length, another key: seen once the body is there.
        let swapped = reply(OP_GETK, 0, o, &[0; 4], b"user2", b"x");
        assert_eq!(
            c.decode(read, b"user1", b"", &swapped[..30], &mut spans),
            Parsed::More
        );
        broken(&mut c, read, &swapped, "another key");
        // max_reply itself is allowed.
        let most = reply(OP_GETK, 0, o, &[0; 4], b"user1", &[b'v'; 1000]);
        let p = c.decode(read, b"user1", b"", &most, &mut spans);
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Error {
                        kind: ErrorKind::Corruption,
                        ..
                    },
                    ..
                }
            ),
            "{p:?}"
        );
    }

    #[test]
    fn server_errors_keep_the_connection_and_say_why() {
        let mut c = codec();
        let mut spans = vec![];
        let o = opaque(b"k");
        let oom = reply(OP_SET, 0x82, o, &[], b"", b"Out of memory");
        let p = c.decode(Sent::Insert, b"k", b"", &oom, &mut spans);
        assert_eq!(
            p,
            Parsed::Reply {
                status: Status::error(ErrorKind::Busy),
                used: oom.len(),
                bytes: 0,
                view_base: 0
            }
        );
        let e = c.last_error().unwrap();
        assert!(e.contains("0x0082") && e.contains("Out of memory"), "{e}");
        assert_eq!(c.last_error(), None);
        let big = reply(OP_SET, 0x03, o, &[], b"", b"Too large.");
        let p = c.decode(Sent::Update, b"k", b"", &big, &mut spans);
        assert!(
            matches!(
                p,
                Parsed::Reply {
                    status: Status::Error {
                        kind: ErrorKind::Other,
                        fatal: false
                    },
                    ..
                }
            ),
            "{p:?}"
        );
        assert!(c.last_error().unwrap().contains("Too large"));
    }

    #[test]
    fn requests_are_protocol_binary_with_the_keys_opaque() {
        let mut c = codec();
        let mut out = Vec::new();
        c.encode(Queued::Read(b"user1", Fields::All), &mut out);
        // memcached's protocol_binary.h request header, written out by hand.
        let mut want = vec![0x80, 0x0c, 0, 5, 0, 0, 0, 0, 0, 0, 0, 5];
        want.extend_from_slice(&opaque(b"user1").to_be_bytes());
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(b"user1");
        assert_eq!(out, want);
        out.clear();
        c.encode(Queued::Insert(b"k2", &rec()), &mut out);
        let mut enc = Vec::new();
        rec().encode_into(&mut enc);
        let mut want = vec![0x80, 0x01, 0, 2, 8, 0, 0, 0];
        want.extend_from_slice(&((8 + 2 + enc.len()) as u32).to_be_bytes());
        want.extend_from_slice(&opaque(b"k2").to_be_bytes());
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(&[0; 8]);
        want.extend_from_slice(b"k2");
        want.extend_from_slice(&enc);
        assert_eq!(out, want);
        out.clear();
        c.encode(Queued::Delete(b"k3"), &mut out);
        assert_eq!(&out[..4], &[0x80, 0x04, 0, 2]);
        assert_eq!(&out[8..16], &[0, 0, 0, 2, 0x96, 0x3d, 0x7d, 0x9b]);
        assert_eq!(&out[24..], b"k3");
    }
}
