//! A request's start: the next operation is drawn from its connection's stream (a cluster
//! client's stream, `cluster.rs`), then placed on the connection that serves its key — the
//! same connection, or the client's socket to its key's node — as one request or the first of
//! a chain (`chain.rs`).

use super::conn::Chain;
use super::{Loop, Metric};
use crate::store::wire::Sent;
use crate::store::{ErrorKind, Fields, Queued, Status};
use crate::workload::Op;

impl Loop<'_, '_> {
    /// Starts the next operation of connection `ci`'s stream.
    pub(super) fn issue(&mut self, ci: usize, intended: u64) {
        let wl = self.sh.workload;
        let c = &mut self.conns[ci];
        let op = if self.sh.load {
            wl.next_load(&mut c.rng, &mut c.bufs);
            Op::Insert
        } else {
            wl.next_op(&mut c.rng, &mut c.bufs)
        };
        if op == Op::Scan {
            // Refused by plan::engine; counted, never sent, should a workload reach here.
            self.ops_left = self.ops_left.saturating_sub(1);
            let st = Status::error(ErrorKind::NotImplemented);
            self.complete(Metric::Scan, st, intended, intended, intended, 0, None);
            return;
        }
        self.place(ci, op, intended);
    }

    /// Sends operation `op`, drawn from connection `ci`'s stream (its buffers hold the key and
    /// values), on the connection that serves its key; with a cluster whose node for it has no
    /// connection now, the operation is held (`cluster.rs`) and placed when one is open.
    pub(super) fn place(&mut self, ci: usize, op: Op, intended: u64) {
        let t = match self.routes.is_some() {
            false => ci,
            true => match self.route(ci) {
                Some(t) => t,
                None => {
                    self.unroutable(ci, op, intended);
                    return;
                }
            },
        };
        // The stream's buffers move aside (a swap: nothing allocated) while the request is
        // written into connection `t`, which may be another than `ci`.
        std::mem::swap(&mut self.conns[ci].bufs, &mut self.drawn);
        let load = self.sh.load;
        let b = &self.drawn;
        let c = &mut self.conns[t];
        let fields = self.sh.workload.read_fields(b);
        let written = b.values.data_bytes();
        let mut chain = Chain::None;
        let (metric, queued, written, ack) = match op {
            Op::Read => (Metric::Read, Queued::Read(&b.key, fields), 0, None),
            // Part of a record kept as one value: read it, merge, write it whole (`chain.rs`).
            Op::Update if self.merge_updates => {
                chain = Chain::MergeRead;
                let q = Queued::Read(&b.key, Fields::All);
                (Metric::Update, q, written, None)
            }
            Op::ReadModifyWrite => {
                chain = Chain::RmwRead;
                (Metric::Read, Queued::Read(&b.key, fields), written, None)
            }
            Op::Update => (
                Metric::Update,
                Queued::Update(&b.key, &b.values),
                written,
                None,
            ),
            Op::Insert | Op::Scan => (
                Metric::Insert,
                Queued::Insert(&b.key, &b.values),
                written,
                (!load).then_some(b.keynum),
            ),
        };
        let sent = Sent::of(&queued);
        let encoded = self.codec.encode(queued, &mut c.wbuf);
        debug_assert!(
            encoded,
            "the engine's codecs encode every request plan lets through"
        );
        let i = c.next_index();
        let s = &mut c.slots[i];
        s.metric = metric;
        s.sent = sent;
        s.intended = intended;
        s.at_send = 0;
        s.written = written;
        s.ack = ack;
        s.key.clear();
        s.key.extend_from_slice(&b.key);
        s.field.clear();
        if let (Fields::One(f), Chain::None | Chain::RmwRead) = (fields, chain) {
            s.field.extend_from_slice(f);
        }
        s.chain = chain;
        s.update_start = 0;
        s.rmw_start = 0;
        s.shard = self.routes.as_ref().map_or(0, |r| r.last_shard);
        s.redirected = false;
        s.first_send = 0;
        // A chain writes its values after its read; a cluster's write may be sent again where
        // a MOVED or ASK reply says (`cluster.rs`): both keep them (a copy into a buffer
        // that grew once).
        if chain != Chain::None || (self.routes.is_some() && op != Op::Read) {
            s.values.clear();
            for (n, v) in b.values.iter() {
                s.values.push(n, v);
            }
        }
        c.push();
        std::mem::swap(&mut self.conns[ci].bufs, &mut self.drawn);
        if self.ops_left != u64::MAX {
            self.ops_left -= 1;
        }
        if let Some(r) = self.routes.as_mut() {
            r.count_sent(t);
        }
        self.mark_dirty(t);
    }
}
