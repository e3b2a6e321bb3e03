//! Redis Cluster on the engine: each of a loop's connections is a *client* with one socket per
//! node (memtier's cluster mode), so a request goes straight to the node that owns its key's
//! slot and the per-socket reply order stays first-in first-out. The client's stream and its
//! `--depth` are the client's: at most `depth` requests are in flight over all its sockets.
//!
//! The slot map (CLUSTER SLOTS) is each loop's own copy, asked again — blocking, at most every
//! 100 ms — after a MOVED, ASK or CLUSTERDOWN reply, or when a key's node has no socket. A
//! MOVED or ASK reply is counted as an error, as the worker threads' session counts it, and the
//! requests that follow go where the new map says. A node's socket that breaks is opened again
//! only when a key is routed to it; until then the client's operation for it is *held* (its
//! intended start kept, so the wait is in its from-intended latency), and with no `--fault`
//! scheduled a node that will not take a connection ends the phase.
//!
//! Connections are laid out client by client: client k's socket to node n is
//! `at[k * max_nodes + n]`; the socket to the first node (made at the start) holds the client's
//! stream. Nodes the map names later (a promoted replica) get sockets when first routed to,
//! up to `max_nodes`.

use super::conn::Conn;
use super::{Loop, Metric, RETRY_NS};
use crate::store::wire::{AfterError, ClusterMap, Sent};
use crate::store::{Fields, Queued};
use crate::workload::{Op, Rng};
use mio::{Interest, Token};
use std::net::SocketAddr;

const NONE: u32 = u32::MAX;
/// Operations a client may fail in a row for want of a socket before it waits (`unroutable`).
const MAX_FAILS: u32 = 64;
/// How often one loop may ask for the slot map.
const REFRESH_NS: u64 = 100_000_000;

/// Request slots on one socket: `depth`, and for a cluster client's socket twice that: every
/// one of the client's `depth` operations (`can_issue` counts them over all its sockets) may
/// be an ASK redirected to the same node, each behind its own ASKING. With one spare slot, a
/// second ASK to a node while the first's pair was in flight found no room and its error
/// stood (seen once in a fresh-clone CI's reshard test at depth 2).
pub(super) fn ring_len(depth: usize, cluster: bool) -> usize {
    if cluster {
        2 * depth
    } else {
        depth
    }
}

pub(super) struct Routes {
    map: ClusterMap,
    max_nodes: usize,
    at: Vec<u32>,
    /// Each connection's client and node.
    client: Vec<u32>,
    node: Vec<u16>,
    /// Each client's first connection (its stream), and an operation drawn and not yet sent.
    home: Vec<u32>,
    held: Vec<Option<(Op, u64)>>,
    /// Requests sent to each node.
    sent: Vec<u64>,
    next_refresh: u64,
    /// The shard of the key `route` routed last.
    pub(super) last_shard: u16,
    /// Each client's operations failed in a row because their node had no socket.
    fails: Vec<u32>,
}

impl Routes {
    /// Routes for `clients` clients whose sockets to the map's nodes are the loop's first
    /// `clients * map.nodes.len()` connections, client by client.
    pub(super) fn new(map: ClusterMap, clients: usize) -> Routes {
        let m = map.nodes.len();
        let max_nodes = (m * 3).clamp(m + 8, 1000).max(m);
        let mut at = vec![NONE; clients * max_nodes];
        let (mut client, mut node) = (Vec::new(), Vec::new());
        for k in 0..clients {
            for n in 0..m {
                at[k * max_nodes + n] = (k * m + n) as u32;
                client.push(k as u32);
                node.push(n as u16);
            }
        }
        Routes {
            max_nodes,
            at,
            client,
            node,
            home: (0..clients).map(|k| (k * m) as u32).collect(),
            held: vec![None; clients],
            sent: vec![0; max_nodes],
            next_refresh: 0,
            last_shard: 0,
            fails: vec![0; clients],
            map,
        }
    }

    /// The stream connection of the client that connection `ci` belongs to.
    #[inline]
    pub(super) fn home_of(&self, ci: usize) -> usize {
        self.home[self.client[ci] as usize] as usize
    }

    #[inline]
    pub(super) fn count_sent(&mut self, ci: usize) {
        self.sent[self.node[ci] as usize] += 1;
    }

    pub(super) fn node_addr(&self, ci: usize) -> SocketAddr {
        self.map.nodes[self.node[ci] as usize]
    }

    /// Requests sent to each node, by address (the phase's `sent_to`).
    pub(super) fn sent_to(&self) -> Vec<(SocketAddr, u64)> {
        self.map
            .nodes
            .iter()
            .zip(&self.sent)
            .filter(|(_, n)| **n > 0)
            .map(|(a, n)| (*a, *n))
            .collect()
    }

    /// The node that serves `key`.
    fn node_of_key(&self, key: &[u8]) -> usize {
        let slot = (self.map.slot_of)(key);
        self.map.slots.get(slot).copied().unwrap_or(0) as usize
    }

    /// The client's sockets.
    fn sockets(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        self.at[k * self.max_nodes..(k + 1) * self.max_nodes]
            .iter()
            .filter(|&&c| c != NONE)
            .map(|&c| c as usize)
    }
}

impl Loop<'_, '_> {
    /// The recovery timeline's class of a request on shard `shard`: with a fault on one
    /// shard, the rest are apart.
    #[inline]
    pub(super) fn class_of(&self, shard: u16) -> usize {
        match (self.sh.affected_shard, &self.routes) {
            (Some(v), Some(_)) if shard != v => crate::measure::timeline::REST,
            _ => crate::measure::timeline::AFFECTED,
        }
    }

    /// Whether stream connection `ci` may start an operation: a free slot on the connection,
    /// or for a cluster client fewer than `depth` requests in flight over its sockets and none
    /// held.
    #[inline]
    pub(super) fn can_issue(&self, ci: usize) -> bool {
        let Some(r) = &self.routes else {
            return self.conns[ci].free();
        };
        let k = r.client[ci] as usize;
        r.held[k].is_none()
            && r.sockets(k)
                .map(|c| self.conns[c].in_flight())
                .sum::<usize>()
                < self.cfg.depth
    }

    /// The stream connection behind connection `ci` (itself, but for a cluster client's other
    /// sockets).
    #[inline]
    pub(super) fn home(&self, ci: usize) -> usize {
        match &self.routes {
            Some(r) => r.home_of(ci),
            None => ci,
        }
    }

    /// The socket of `ci`'s client to the node of the key its stream drew; `None` when that
    /// node has no open socket (one is tried now, at most every 100 ms).
    pub(super) fn route(&mut self, ci: usize) -> Option<usize> {
        let now = self.clock.now();
        let r = self.routes.as_ref()?;
        let slot = (r.map.slot_of)(&self.conns[ci].bufs.key);
        let n = r.map.slots.get(slot).copied().unwrap_or(0) as usize;
        let shard = (r.map.shard_of)(slot, r.map.masters);
        self.routes.as_mut().expect("cluster").last_shard = shard;
        let r = self.routes.as_ref().expect("cluster");
        let k = r.client[ci] as usize;
        let at = r.at[k * r.max_nodes + n];
        if at != NONE && self.conns[at as usize].sock.is_some() {
            self.routes.as_mut().expect("cluster").fails[k] = 0;
            return Some(at as usize);
        }
        if at != NONE && now < self.conns[at as usize].retry_at {
            return None;
        }
        let addr = r.map.nodes[n];
        self.open_socket(k, n, addr, at, now)
    }

    /// Opens client `k`'s socket to node `n` (`at`: its connection, if it had one).
    #[cold]
    fn open_socket(
        &mut self,
        k: usize,
        n: usize,
        addr: SocketAddr,
        at: u32,
        now: u64,
    ) -> Option<usize> {
        let link = match self.target.connect_to(addr) {
            Ok(l) => l,
            Err(e) => {
                if at != NONE {
                    self.conns[at as usize].retry_at = now + RETRY_NS;
                }
                if !self.sh.tolerate_fatal {
                    self.sh.fail(format!(
                        "Redis Cluster node {addr} lost and not opened again: {e}"
                    ));
                }
                self.refresh_routes(now);
                return None;
            }
        };
        let mut sock = match super::link::Link::from_opened(link, self.cfg.depth, self.max_reply) {
            Ok(s) => s,
            Err(e) => {
                self.sh.fail(format!("event loop: {e}"));
                return None;
            }
        };
        let ci = if at == NONE {
            // A node the map named later: a connection of its own for this client.
            self.conns.push(Conn::new_idle(
                ring_len(self.cfg.depth, true),
                Rng::for_worker(0, 0),
            ));
            self.listed.push(false);
            let r = self.routes.as_mut().expect("cluster");
            let ci = self.conns.len() - 1;
            r.at[k * r.max_nodes + n] = ci as u32;
            r.client.push(k as u32);
            r.node.push(n as u16);
            ci
        } else {
            at as usize
        };
        if let Err(e) = self.poll.registry().register(
            &mut sock,
            Token(ci),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.sh.fail(format!("event loop: {e}"));
            return None;
        }
        if !self.probe {
            self.stats
                .reconnects
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.conns[ci].sock = Some(sock);
        Some(ci)
    }

    /// Client `ci`'s operation whose node has no socket: an `io` error at once, as the worker
    /// threads' session counts it, so the client goes on with keys on other nodes. After
    /// `MAX_FAILS` in a row (every node down) the operation is held instead until a check
    /// finds its node open (`retry_held`): no client spins on errors.
    #[cold]
    pub(super) fn unroutable(&mut self, ci: usize, op: Op, intended: u64) {
        let r = self.routes.as_mut().expect("cluster");
        let k = r.client[ci] as usize;
        if r.fails[k] >= MAX_FAILS {
            r.held[k] = Some((op, intended));
            return;
        }
        r.fails[k] += 1;
        let (shard, addr) = (
            r.last_shard,
            r.map.nodes[r.node_of_key(&self.conns[ci].bufs.key)],
        );
        self.class = self.class_of(shard);
        if self.ops_left != u64::MAX {
            self.ops_left -= 1;
        }
        self.broken_why = Some(format!("Redis Cluster node {addr}: no connection"));
        let metric = match op {
            Op::Update => super::Metric::Update,
            Op::Insert => super::Metric::Insert,
            _ => super::Metric::Read,
        };
        let now = self.clock.now();
        let ack = (op == Op::Insert && !self.sh.load).then_some(self.conns[ci].bufs.keynum);
        let st = crate::store::Status::error(crate::store::ErrorKind::Io);
        self.complete(metric, st, intended, 0, now, 0, ack);
        self.broken_why = None;
    }

    /// Places the held operations whose node has a socket now (every check, and after the map
    /// changed), then fills their clients again.
    pub(super) fn retry_held(&mut self, now: u64) {
        let Some(r) = &self.routes else { return };
        if r.held.iter().all(Option::is_none) {
            return;
        }
        let held: Vec<(usize, Op, u64)> = r
            .held
            .iter()
            .enumerate()
            .filter_map(|(k, h)| h.map(|(op, t)| (r.home[k] as usize, op, t)))
            .collect();
        for (ci, op, t) in held {
            if !self.go_on() {
                return;
            }
            let r = self.routes.as_mut().expect("cluster");
            let k = r.client[ci] as usize;
            r.held[k] = None;
            self.place(ci, op, t);
            self.refill(ci, now);
        }
    }

    /// The reply in (just freed) slot `i` of connection `ci` was an error: when it was a MOVED
    /// or ASK redirect of a request not redirected before, to a node the slot map names, the
    /// request is sent there now (after ASKING for an ASK) on its client's socket to that node,
    /// keeping its intended start and first send. `false`: not redirected; the error stands.
    /// Chained requests (a read-modify-write's parts) are not redirected: their error stands,
    /// as does the second command of a hash insert (DEL, HSET) that an ASK let only the first
    /// of through — as the worker threads' session counts them.
    #[cold]
    pub(super) fn redirect(&mut self, ci: usize, i: usize, now: u64, after: AfterError) -> bool {
        let Some((addr, ask)) = after.redirect else {
            return false;
        };
        let s = &self.conns[ci].slots[i];
        if s.redirected || s.chain != super::conn::Chain::None {
            return false;
        }
        if after.rerouted {
            self.refresh_routes(now);
        }
        let Some(t) = self.redirect_target(ci, addr, now) else {
            return false;
        };
        let need = 1 + usize::from(ask);
        let tc = &self.conns[t];
        if tc.slots.len() - tc.in_flight() < need {
            return false;
        }
        if ask && !self.codec.asking(&mut self.conns[t].wbuf) {
            return false;
        }
        let _ = self.codec.last_error();
        let old = &self.conns[ci].slots[i];
        let first_send = if old.first_send != 0 {
            old.first_send
        } else {
            old.at_send
        };
        let (metric, sent, intended, written, ack, shard) = (
            old.metric,
            old.sent,
            old.intended,
            old.written,
            old.ack,
            old.shard,
        );
        if ask {
            self.queue_asking(t, intended);
        }
        let new = self.conns[t].next_index();
        if (t, new) != (ci, i) {
            // The key, field and values move over (buffers swapped: nothing is allocated).
            let mut key = std::mem::take(&mut self.conns[t].slots[new].key);
            let mut field = std::mem::take(&mut self.conns[t].slots[new].field);
            let mut values = std::mem::take(&mut self.conns[t].slots[new].values);
            let o = &mut self.conns[ci].slots[i];
            std::mem::swap(&mut key, &mut o.key);
            std::mem::swap(&mut field, &mut o.field);
            std::mem::swap(&mut values, &mut o.values);
            let s = &mut self.conns[t].slots[new];
            (s.key, s.field, s.values) = (key, field, values);
        }
        let c = &mut self.conns[t];
        let s = &mut c.slots[new];
        let queued = match sent {
            Sent::Read { all: true } => Queued::Read(&s.key, Fields::All),
            Sent::Read { all: false } => Queued::Read(&s.key, Fields::One(&s.field)),
            Sent::Update => Queued::Update(&s.key, &s.values),
            Sent::Insert => Queued::Insert(&s.key, &s.values),
            Sent::Delete => Queued::Delete(&s.key),
        };
        self.codec.encode(queued, &mut c.wbuf);
        s.metric = metric;
        s.sent = sent;
        s.intended = intended;
        s.at_send = 0;
        s.written = written;
        s.ack = ack;
        s.chain = super::conn::Chain::None;
        s.update_start = 0;
        s.rmw_start = 0;
        s.shard = shard;
        s.redirected = true;
        s.first_send = first_send;
        c.push();
        let counter = if ask {
            &self.stats.asked
        } else {
            &self.stats.moved
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.routes.as_mut().expect("cluster").count_sent(t);
        self.mark_dirty(t);
        true
    }

    /// The connection of client `ci`'s socket to node `addr`, opened now if it has none;
    /// `None`: no such node in the map, or its socket failed and waits to be retried.
    #[cold]
    fn redirect_target(&mut self, ci: usize, addr: SocketAddr, now: u64) -> Option<usize> {
        let r = self.routes.as_ref().expect("cluster");
        let n = r.map.nodes.iter().position(|a| *a == addr)?;
        let k = r.client[ci] as usize;
        let at = r.at[k * r.max_nodes + n];
        if at != NONE && self.conns[at as usize].sock.is_some() {
            Some(at as usize)
        } else if at != NONE && now < self.conns[at as usize].retry_at {
            None
        } else {
            self.open_socket(k, n, addr, at, now)
        }
    }

    /// Queues ASKING on connection `t`: its reply answers for nothing (the redirected request
    /// behind it answers for itself).
    #[cold]
    fn queue_asking(&mut self, t: usize, intended: u64) {
        let c = &mut self.conns[t];
        let a = c.next_index();
        let s = &mut c.slots[a];
        s.chain = super::conn::Chain::Asking;
        s.metric = Metric::Update;
        s.sent = Sent::Update;
        s.intended = intended;
        s.at_send = 0;
        s.ack = None;
        s.redirected = true;
        s.first_send = 0;
        c.push();
    }

    /// Asks for the slot map again (at most every 100 ms): MOVED, ASK, CLUSTERDOWN, or a node
    /// without a socket. New nodes are added up to `max_nodes`; the indices of known ones stay.
    #[cold]
    pub(super) fn refresh_routes(&mut self, now: u64) {
        let Some(r) = self.routes.as_mut() else {
            return;
        };
        if now < r.next_refresh {
            return;
        }
        r.next_refresh = now + REFRESH_NS;
        let Some(Ok(map)) = self.target.cluster_map(&r.map.nodes) else {
            return;
        };
        if map.nodes.len() > r.max_nodes {
            return;
        }
        r.map = map;
    }
}

#[cfg(test)]
mod tests {
    use super::ring_len;

    #[test]
    fn a_cluster_socket_holds_every_operation_of_its_client_behind_an_asking() {
        for depth in [1, 2, 8, 64] {
            // All `depth` operations ASK-redirected to one node: an ASKING and the request each.
            assert_eq!(ring_len(depth, true), 2 * depth);
            assert_eq!(ring_len(depth, false), depth);
        }
    }
}
