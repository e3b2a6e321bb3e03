//! `--give-up-after`: a phase whose store has stopped answering ends instead of waiting out
//! every operation's deadline. Each network call already has one (`timeout_ms`), but a phase
//! of N operations against a server that accepts connections and never replies (hung, stopped
//! with SIGSTOP, a peer that swallows requests) ran N × `timeout_ms` — 83 minutes for a
//! 1,000-record load at Redis's 5 s default — and then reported every call as a timeout.
//!
//! The rule reads only the rows the interval loop writes (no cost on the hot path): the phase
//! gives up at the first row that holds timeouts when no call has had any other outcome (a
//! value, a miss, a refusal such as `busy`: each is an answer) since at least the limit before
//! that row's end. Rows with no completions at all (every worker inside one call) neither
//! answer nor time out; the silence they span counts once a timeout ends it. So a store that
//! answers anything, however slowly or rarely, is never given up on, and a hung one is
//! given up on within the limit plus one `timeout_ms`.
//!
//! Off where faults are scheduled (`--fault`): stopping a server is then the experiment, and
//! the fault schedule and `--duration` bound the phase.

use crate::measure::Stats;
use crate::store::ErrorKind;
use std::time::Duration;

/// The silence so far in one phase.
pub(super) struct Silence {
    /// `None`: never give up.
    limit: Option<Duration>,
    /// The end of the last row with an answer (phase-relative), or the phase's start.
    since: Duration,
    /// Timeouts since then.
    timeouts: u64,
}

impl Silence {
    pub(super) fn new(limit: Option<Duration>) -> Self {
        Silence {
            limit: limit.filter(|l| !l.is_zero()),
            since: Duration::ZERO,
            timeouts: 0,
        }
    }

    /// Takes the row that ends `end` after the phase's start; the reason to give up, once the
    /// store has answered nothing for the limit and calls are timing out.
    pub(super) fn row(&mut self, stats: &Stats, end: Duration) -> Option<String> {
        let limit = self.limit?;
        let (calls, timeouts) = stats.calls_with(ErrorKind::Timeout);
        if calls > timeouts {
            self.since = end;
            self.timeouts = 0;
            return None;
        }
        self.timeouts += timeouts;
        let silent = end.saturating_sub(self.since);
        if timeouts == 0 || silent < limit {
            return None;
        }
        // Once: the phase stops here.
        self.limit = None;
        Some(format!(
            "gave up: the store answered nothing for {:.1} s ({} call{} timed out and none had any other outcome; --give-up-after {})",
            silent.as_secs_f64(),
            self.timeouts,
            if self.timeouts == 1 { "" } else { "s" },
            humantime::format_duration(limit)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Metric;
    use crate::store::Status;

    fn row(ok: u64, timeouts: u64) -> Stats {
        let mut s = Stats::new(&[Metric::Read], false);
        for _ in 0..ok {
            s.record(Metric::Read, Status::Ok, 1, 1, 0);
        }
        for _ in 0..timeouts {
            s.record(Metric::Read, Status::error(ErrorKind::Timeout), 1, 1, 0);
        }
        s
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn gives_up_at_the_first_timeout_row_past_the_limit() {
        let mut g = Silence::new(Some(secs(30)));
        assert_eq!(g.row(&row(5, 0), secs(1)), None);
        // Rows 2..=30: only timeouts, 29 s of silence after row 1's answers.
        for t in 2..=30 {
            assert_eq!(g.row(&row(0, 2), secs(t)), None, "row {t}");
        }
        let why = g.row(&row(0, 2), secs(31)).expect("30 s of silence");
        assert!(why.contains("answered nothing for 30.0 s"), "{why}");
        assert!(why.contains("60 calls timed out"), "{why}");
        assert!(why.contains("--give-up-after 30s"), "{why}");
        // Said once.
        assert_eq!(g.row(&row(0, 2), secs(32)), None);
    }

    #[test]
    fn any_answer_restarts_the_silence() {
        let mut g = Silence::new(Some(secs(10)));
        for t in 1..=9 {
            assert_eq!(g.row(&row(0, 1), secs(t)), None);
        }
        // One answer among timeouts: the store is slow, not silent.
        assert_eq!(g.row(&row(1, 50), secs(10)), None);
        for t in 11..=19 {
            assert_eq!(g.row(&row(0, 1), secs(t)), None, "row {t}");
        }
        assert!(g.row(&row(0, 1), secs(20)).is_some());
    }

    #[test]
    fn empty_rows_count_as_silence_only_once_a_timeout_ends_them() {
        let mut g = Silence::new(Some(secs(5)));
        // Every worker sat in one call for 60 s (timeout_ms=60000): 59 empty rows...
        for t in 1..60 {
            assert_eq!(g.row(&row(0, 0), secs(t)), None);
        }
        // ...then the timeouts.
        let why = g.row(&row(0, 4), secs(60)).expect("60 s of silence");
        assert!(why.contains("for 60.0 s (4 calls timed out"), "{why}");
    }

    #[test]
    fn errors_that_are_answers_are_not_silence() {
        let mut g = Silence::new(Some(secs(1)));
        let mut busy = row(0, 3);
        busy.record(Metric::Read, Status::error(ErrorKind::Busy), 1, 1, 0);
        for t in 1..10 {
            assert_eq!(g.row(&busy, secs(t)), None);
        }
    }

    #[test]
    fn zero_or_none_never_gives_up() {
        for limit in [None, Some(Duration::ZERO)] {
            let mut g = Silence::new(limit);
            for t in 1..100 {
                assert_eq!(g.row(&row(0, 9), secs(t)), None);
            }
        }
    }
}
