//! Reading replies under a memory budget (security review F8). A connection's receive buffer
//! starts at 4 KiB and doubles while a reply does not fit; a server that answers with large or
//! unfinished replies on every connection made each hold up to 4 MiB for the rest of the run.
//! The loop now counts what its buffers hold above their initial size (`kept`): within its
//! share of `GROWTH_BUDGET` any buffer may grow; past it only one connection at a time (`priority`),
//! so one reply always completes and nothing waits for ever, while the others stop reading
//! with their bytes left in the kernel and are resumed in turn (`paused`). A buffer emptied
//! while the loop holds more than half the budget returns to its initial size, so honest large
//! replies on a few connections keep their buffers (no allocation per reply) and many do not.
//! Bound: `GROWTH_BUDGET` (at least 8 MiB a loop) + one connection's 2 × (`max_reply` + 64 KiB)
//! a loop + 4 KiB a connection.

use super::conn::GROWTH_BUDGET;
use super::Loop;
use crate::store::ErrorKind;

impl Loop<'_, '_> {
    /// Reads what connection `ci`'s socket has and completes the replies in it.
    pub(super) fn on_readable(&mut self, ci: usize) {
        let limit = self.max_reply.saturating_add(1 << 16);
        loop {
            let may_grow = self.kept < self.budget() || self.grant(ci);
            let before = self.conns[ci].grown();
            let read = self.conns[ci].read(limit, may_grow);
            self.kept = (self.kept + self.conns[ci].grown()).saturating_sub(before);
            let open = match read {
                Ok(open) => open,
                Err(e) => {
                    let kind = if e.kind() == std::io::ErrorKind::Other {
                        ErrorKind::Protocol
                    } else {
                        ErrorKind::Io
                    };
                    self.broken_owned(ci, kind, format!("read: {e}"));
                    self.release(ci);
                    return;
                }
            };
            let unparsed = self.conns[ci].unparsed().len();
            self.parse(ci);
            let c = &mut self.conns[ci];
            if c.held && c.sock.is_some() {
                c.held = false;
                if c.unparsed().len() < unparsed {
                    continue; // replies completed made room: read on
                }
                if !self.paused.contains(&ci) {
                    self.paused.push_back(ci);
                }
                return;
            }
            if c.rstart == c.rend {
                self.release(ci);
            }
            if !open && self.conns[ci].sock.is_some() {
                self.broken(ci, ErrorKind::Io, "the server closed the connection");
                self.release(ci);
            }
            return;
        }
    }

    /// This loop's share of `GROWTH_BUDGET` (the phase's loops share it; 8 MiB at least).
    #[inline]
    fn budget(&self) -> usize {
        (GROWTH_BUDGET / self.main_loops.max(1)).max(8 << 20)
    }

    /// Whether `ci` may grow past the budget: it holds the priority, or takes it when free.
    #[cold]
    fn grant(&mut self, ci: usize) -> bool {
        match self.priority {
            Some(p) => p == ci,
            None => {
                self.priority = Some(ci);
                true
            }
        }
    }

    /// Connection `ci` holds no unfinished reply (or was broken): it gives the priority back
    /// and, while the loop holds more than half the budget, its grown buffer.
    #[inline]
    fn release(&mut self, ci: usize) {
        if self.priority == Some(ci) {
            self.priority = None;
        }
        if self.kept > self.budget() / 2 {
            self.kept -= self.conns[ci].shrink();
        }
    }

    /// Reads on the connections that stopped for want of room, oldest first, while there is
    /// room (or for the one holding the priority).
    pub(super) fn resume_paused(&mut self) {
        if self.paused.is_empty() {
            return;
        }
        if let Some(p) = self.priority {
            if self.conns[p].sock.is_none() {
                self.priority = None;
            }
        }
        for _ in 0..self.paused.len() {
            let Some(ci) = self.paused.pop_front() else {
                break;
            };
            if self.conns[ci].sock.is_none() {
                continue;
            }
            let room = self.kept < self.budget();
            if !room && self.priority.is_some_and(|p| p != ci) {
                self.paused.push_back(ci);
                continue;
            }
            self.on_readable(ci);
        }
    }
}
