//! Operations that are more than one request on their connection (`conn::Chain`): YCSB's
//! read-modify-write (a read, then an update) and, where the store keeps a record as one value
//! (memcached, Redis strings), an update of part of the record (read it, merge the new fields
//! over it, write it whole) — as the blocking sessions do (`store::kv::KvSession::update`),
//! so both clients send the same requests. Each follow-up is sent on the same connection when
//! the previous reply arrives, in the slot that reply freed; the operation is timed from its
//! first request's send, and its intended start is the first request's.

use super::conn::Chain;
use super::Loop;
use crate::measure::Metric;
use crate::record::RecordView;
use crate::store::wire::Sent;
use crate::store::{Fields, Queued, Status};

impl Loop<'_, '_> {
    /// Before a merge-read's slot is freed: the stored record (from its reply) with the update's
    /// fields over it, into `self.merged`.
    pub(super) fn merge_from_reply(&mut self, ci: usize, status: Status, view_base: usize) {
        if !status.is_ok() {
            return;
        }
        let c = &self.conns[ci];
        let Some(s) = c.oldest() else { return };
        let bytes = match self.codec.decoded() {
            Some(d) => d,
            None => &c.unparsed()[view_base..],
        };
        let view = RecordView::new(bytes, &self.spans);
        self.stored.clear();
        for (n, v) in view.iter() {
            self.stored.push(n, v);
        }
        self.merged.merge_from(&self.stored, &s.values);
    }

    /// The reply to a chained request in slot `i` (just freed) of connection `ci`: records what
    /// it ends and sends what follows.
    pub(super) fn chained(&mut self, ci: usize, i: usize, status: Status, now: u64, bytes: u64) {
        let s = &self.conns[ci].slots[i];
        let (chain, intended, at_send, written) = (s.chain, s.intended, s.at_send, s.written);
        let shard = s.shard;
        self.class = self.class_of(shard);
        let (update_start, rmw_start) = (s.update_start, s.rmw_start);
        let sent_at = if at_send == 0 { intended } else { at_send };
        match chain {
            Chain::None | Chain::Asking => {}
            Chain::RmwRead => {
                self.complete(Metric::Read, status, intended, at_send, now, bytes, None);
                // The update runs even if the read failed, as upstream.
                let next = if self.merge_updates {
                    Chain::MergeRead
                } else {
                    Chain::Write
                };
                self.follow(ci, i, next, now, sent_at);
            }
            Chain::MergeRead if status.is_ok() => {
                let start = if update_start == 0 {
                    sent_at
                } else {
                    update_start
                };
                self.conns[ci].slots[i].update_start = start;
                self.follow(ci, i, Chain::Write, start, rmw_start);
            }
            Chain::MergeRead | Chain::Write => {
                // A merge-read that found nothing (or failed) ends the update with its status.
                let start = if update_start == 0 {
                    sent_at
                } else {
                    update_start
                };
                let bytes = if status.is_ok() { written } else { 0 };
                self.complete(Metric::Update, status, intended, start, now, bytes, None);
                if rmw_start != 0 {
                    let from_intended = now.saturating_sub(intended);
                    let service = now.saturating_sub(rmw_start);
                    self.rec
                        .record(Metric::ReadModifyWrite, status, service, from_intended, 0);
                }
            }
        }
    }

    /// Sends the next request of the chain whose previous request was in (freed) slot `old`.
    /// `update_start`: when the update began (its first request's send, or when its read-modify-
    /// write's read completed); `rmw_start`: the read-modify-write's start (0: none).
    fn follow(&mut self, ci: usize, old: usize, next: Chain, update_start: u64, rmw_start: u64) {
        let c = &mut self.conns[ci];
        let new = c.next_index();
        if new != old {
            // Move the key and values over (buffers swapped: nothing is allocated).
            let (a, b) = if old < new {
                let (l, r) = c.slots.split_at_mut(new);
                (&mut l[old], &mut r[0])
            } else {
                let (l, r) = c.slots.split_at_mut(old);
                (&mut r[0], &mut l[new])
            };
            std::mem::swap(&mut a.key, &mut b.key);
            std::mem::swap(&mut a.values, &mut b.values);
            b.metric = a.metric;
            b.shard = a.shard;
            b.intended = a.intended;
            b.written = a.written;
        }
        let s = &mut c.slots[new];
        let queued = match next {
            Chain::MergeRead => Queued::Read(&s.key, Fields::All),
            Chain::Write if self.merge_updates => Queued::Update(&s.key, &self.merged),
            _ => Queued::Update(&s.key, &s.values),
        };
        let sent = Sent::of(&queued);
        self.codec.encode(queued, &mut c.wbuf);
        s.sent = sent;
        s.chain = next;
        s.metric = Metric::Update;
        s.at_send = 0;
        s.ack = None;
        s.field.clear();
        s.update_start = if next == Chain::MergeRead {
            0
        } else {
            update_start
        };
        s.rmw_start = rmw_start;
        s.redirected = false;
        s.first_send = 0;
        c.push();
        if let Some(r) = self.routes.as_mut() {
            r.count_sent(ci);
        }
        self.mark_dirty(ci);
    }
}
