//! Where an event loop waits: in epoll until a socket is ready, the next arrival is due, an
//! interval ends or a check is due (a timerfd for the nanosecond, `timer.rs`) — or, with
//! `reply_wait=spin` (`store::wait`, which says why, with the measurements), first polling
//! epoll without sleeping, yielding the CPU between polls, for up to its budget.

use super::{Loop, CHECK_NS, TIMER};
use std::time::Duration;

impl Loop<'_, '_> {
    /// Sleeps in epoll until a socket is ready, the next arrival is due, an interval ends, the
    /// deadline passes or the next check is due; then handles what woke it.
    pub(super) fn wait(&mut self, now: u64) {
        let mut wake = self
            .rec
            .next_end()
            .min(self.sh.deadline_ns)
            .min(self.next_check);
        if let Some(t) = self.next_arrival {
            // `--send-slack`: wake on the slack's grid, sending what fell due together.
            let s = self.cfg.send_slack_ns;
            let t = if s > 0 && !self.probe {
                t.div_ceil(s).saturating_mul(s)
            } else {
                t
            };
            wake = wake.min(t);
        }
        if wake <= now {
            self.poll_once(Some(Duration::ZERO));
        } else {
            // `reply_wait=spin` (store::wait): poll before sleeping, never past the next wake.
            if let Some(budget) = self.spin {
                if self.spin_poll(budget.min(Duration::from_nanos(wake - now))) {
                    return;
                }
            }
            self.timer.arm(wake, wake - now);
            self.poll_once(Some(Duration::from_millis(100)));
        }
    }

    /// Polls epoll without sleeping, yielding the CPU between polls, until something is ready
    /// (handled: true) or `budget` has passed (false).
    fn spin_poll(&mut self, budget: Duration) -> bool {
        let until = std::time::Instant::now() + budget;
        loop {
            match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
                Ok(()) if !self.events.is_empty() => {
                    self.handle_events();
                    return true;
                }
                Err(e) if e.kind() != std::io::ErrorKind::Interrupted => {
                    self.sh.fail(format!("event loop: epoll: {e}"));
                    return true;
                }
                _ => {}
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        }
    }

    pub(super) fn poll_once(&mut self, timeout: Option<Duration>) {
        if let Err(e) = self.poll.poll(&mut self.events, timeout) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                self.sh.fail(format!("event loop: epoll: {e}"));
            }
            return;
        }
        self.handle_events();
    }

    /// Handles what the last poll found, then the periodic checks and pending writes.
    fn handle_events(&mut self) {
        // Copied out first (handling an event needs `self`); the buffer is reused.
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.events.iter().map(|e| {
            (
                e.token(),
                e.is_readable(),
                e.is_writable(),
                e.is_read_closed() || e.is_error(),
            )
        }));
        for &(token, readable, writable, closed) in &ready {
            if token == TIMER {
                self.timer.clear();
                continue;
            }
            let ci = token.0;
            if ci >= self.conns.len() || self.conns[ci].sock.is_none() {
                continue;
            }
            if readable || closed {
                self.on_readable(ci);
            }
            if writable && self.conns[ci].blocked {
                self.conns[ci].blocked = false;
                self.mark_dirty(ci);
            }
        }
        self.ready = ready;
        self.resume_paused();
        let now = self.clock.now();
        if now >= self.next_check {
            self.next_check = now + CHECK_NS;
            self.check(now);
        }
        self.flush_writes();
    }
}
