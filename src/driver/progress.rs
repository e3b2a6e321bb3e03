//! Progress on stderr: a live line on a terminal (indicatif), plain periodic lines otherwise
//! (`--status-interval`, default 10 s). No colour is used, so `NO_COLOR` has nothing to remove.

use crate::measure::{percentile, Metric, Stats};
use crate::plan::PhasePlan;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Store calls in `stats`, as the table counts them: CLEANUP and VERIFY are bookkeeping, and
/// an RMW is its read and its update (issue 40 item 11).
pub fn store_calls(stats: &Stats) -> u64 {
    stats
        .metrics()
        .filter(|(m, _)| crate::report::is_store_call(*m))
        .map(|(_, o)| o.count())
        .sum()
}

pub struct Progress {
    bar: Option<ProgressBar>,
    every: Duration,
    last_plain: Option<Instant>,
}

impl Progress {
    pub fn new(every: Duration) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(ProgressStyle::with_template("{msg}").expect("valid template"));
            b
        });
        Progress {
            bar,
            every,
            last_plain: None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn interval(
        &mut self,
        index: usize,
        phases: usize,
        phase: &PhasePlan,
        stats: &Stats,
        secs: f64,
        done: u64,
        elapsed: Duration,
    ) {
        let ops = store_calls(stats);
        let rate = if secs > 0.0 { ops as f64 / secs } else { 0.0 };
        // p99 of the busiest metric, the one a reader watches; blank when none of its calls
        // succeeded (a latency with no samples is not 0).
        let p99 = Metric::ALL
            .iter()
            .filter(|m| **m != Metric::Cleanup)
            .filter_map(|m| stats.get(*m))
            .max_by_key(|o| o.count())
            .filter(|o| !o.ok.is_empty())
            .map(|o| {
                format!(
                    "{:>9.1} µs",
                    percentile::value_at(&o.ok, 99.0) as f64 / 1000.0
                )
            })
            .unwrap_or_else(|| format!("{:>12}", "-"));
        // Failures other than misses (status slot 1, not_found), which would otherwise hide
        // behind the rate.
        let failed: u64 = stats
            .metrics()
            .filter(|(m, _)| crate::report::is_store_call(*m))
            .map(|(_, o)| o.errors() - o.statuses[1])
            .sum();
        let failed = if failed > 0 {
            format!("  {failed} failed")
        } else {
            String::new()
        };
        // No rate yet: no honest estimate of the end of an operation count.
        let eta = match (phase.operations, phase.duration) {
            (n, _) if n > 0 && rate > 0.0 => {
                // try_: a huge count at a slow rate is more seconds than a Duration holds.
                let by_ops = Duration::try_from_secs_f64(n.saturating_sub(done) as f64 / rate)
                    .unwrap_or(Duration::MAX);
                Some(match phase.duration {
                    Some(d) => by_ops.min(d.saturating_sub(elapsed)),
                    None => by_ops,
                })
            }
            (_, Some(d)) => Some(d.saturating_sub(elapsed)),
            (n, None) if n > 0 => None,
            _ => Some(Duration::ZERO),
        };
        let eta = eta.map_or_else(|| "?".to_string(), |e| format!("{}s", e.as_secs()));
        let line = format!(
            "[{}/{}] {:<7} {:>7.1}s  {:>10} ops  {:>10.0} ops/s  p99 {}{failed}  ETA {eta}",
            index + 1,
            phases,
            phase.name,
            elapsed.as_secs_f64(),
            done,
            rate,
            p99,
        );
        match &self.bar {
            Some(b) => b.set_message(line),
            None => {
                let due = self
                    .last_plain
                    .map(|t| t.elapsed() >= self.every)
                    .unwrap_or(true);
                if due {
                    errln!("{line}");
                    self.last_plain = Some(Instant::now());
                }
            }
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
