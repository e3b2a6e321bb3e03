//! Open loop on the engine: each loop takes the phase's arrivals as they fall due and sends
//! each on a connection with a free slot, taking connections in turn (so requests spread over
//! them); an arrival that finds none full waits in the loop's backlog or is skipped
//! (`--when-full`), both counted.

use super::{Loop, MAX_BACKLOG};
use crate::driver::arrivals::NONE_HELD;
use crate::plan::engine::WhenFull;
use std::sync::atomic::Ordering;

impl Loop<'_, '_> {
    /// Open loop: sends every arrival that is due, on a connection with a free slot, or holds
    /// it back (`--when-full`).
    pub(super) fn arrivals_due(&mut self, now: u64) {
        let Some(a) = self.arrivals else { return };
        while let Some(t) = self.next_arrival {
            if t > now || !self.go_on() {
                break;
            }
            match self.take_free() {
                Some(ci) => {
                    self.rec.record_lag(now.saturating_sub(t));
                    if let Some(s) = self.sends {
                        s.count(now);
                    }
                    self.issue(ci, t);
                    self.list_free(ci);
                }
                // The probe always queues (its lateness is in its from-intended latency) and
                // is not counted with the load's arrivals.
                None if (self.probe || self.cfg.when_full == WhenFull::Queue)
                    && self.backlog.len() < MAX_BACKLOG =>
                {
                    self.backlog.push_back(t);
                    if self.backlog.len() == 1 {
                        self.publish_held();
                    }
                    if !self.probe {
                        self.stats.queued.fetch_add(1, Ordering::Relaxed);
                        self.stats
                            .max_backlog
                            .fetch_max(self.backlog.len() as u64, Ordering::Relaxed);
                    }
                }
                None => {
                    if !self.probe {
                        self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            self.next_arrival = a.take(&mut self.gaps);
        }
    }

    /// Publishes the backlog's oldest arrival, so the schedule's lateness
    /// (`Arrivals::behind_ns`, intervals.csv's `behind_ms`) counts what the loop holds.
    #[inline]
    pub(super) fn publish_held(&self) {
        if let Some(h) = &self.held {
            let oldest = self.backlog.front().copied().unwrap_or(NONE_HELD);
            h.store(oldest, Ordering::Relaxed);
        }
    }

    pub(super) fn take_free(&mut self) -> Option<usize> {
        while let Some(ci) = self.free.pop_front() {
            self.listed[ci] = false;
            if self.can_issue(ci) {
                return Some(ci);
            }
        }
        None
    }

    pub(super) fn list_free(&mut self, ci: usize) {
        let ci = self.home(ci);
        if !self.listed[ci] && self.can_issue(ci) {
            self.listed[ci] = true;
            self.free.push_back(ci);
        }
    }
}
