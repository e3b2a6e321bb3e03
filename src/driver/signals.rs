//! SIGINT and SIGTERM: the first interruption sets the flag every phase, sweep and capacity
//! search watches (the phase stops, its results are written, exit 130); another one later
//! exits at once (130), first marking the run directory in progress `interrupted`.
//!
//! Signals that arrive together are one interruption (issue 40 item 2): `timeout -s INT` and a
//! Ctrl-C in a shell signal the whole process group, so kvmeter can receive SIGINT twice within
//! microseconds; only one after `SAME_INTERRUPTION` counts as the second. A thread of its own
//! reads the signals (signal_hook's iterator: the handler only writes to a pipe), so the exit
//! at once can rewrite files, which a signal handler cannot.

use crate::error::EXIT_INTERRUPTED;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Signals within this long of the first are the same interruption.
pub const SAME_INTERRUPTION: Duration = Duration::from_secs(1);

/// Set by SIGINT/SIGTERM. Installed once per process: `kvmeter sweep` and `capacity` run many
/// plans, and a Ctrl-C ends them all.
pub fn install() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
            Ok(mut signals) => {
                let f = flag.clone();
                let spawned = std::thread::Builder::new()
                    .name("signals".into())
                    .spawn(move || {
                        let mut first: Option<Instant> = None;
                        for _ in signals.forever() {
                            if second(&mut first, Instant::now()) {
                                exit_at_once();
                            }
                            f.store(true, Ordering::Relaxed);
                        }
                    });
                if let Err(e) = spawned {
                    errln!(
                        "warning: Ctrl-C will end kvmeter without results: no signal thread ({e})"
                    );
                }
            }
            Err(e) => {
                errln!(
                    "warning: Ctrl-C will end kvmeter without results: signals not installed ({e})"
                )
            }
        }
        flag
    })
    .clone()
}

/// Whether a signal at `now` is a second interruption: more than `SAME_INTERRUPTION` after the
/// first (at `first`, which the first signal sets).
fn second(first: &mut Option<Instant>, now: Instant) -> bool {
    match *first {
        None => {
            *first = Some(now);
            false
        }
        Some(t) => now.saturating_duration_since(t) > SAME_INTERRUPTION,
    }
}

/// The second interruption: the run directory in progress says `interrupted`, then exit 130
/// with the lock held, so no write puts `running` back.
fn exit_at_once() -> ! {
    let held = crate::report::current::mark_interrupted();
    errln!("interrupted again: exiting at once (the phase in progress is not summarised)");
    let _keep = held;
    std::process::exit(EXIT_INTERRUPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_together_are_one_interruption() {
        let t0 = Instant::now();
        let mut first = None;
        assert!(!second(&mut first, t0));
        assert!(!second(&mut first, t0 + Duration::from_micros(5)));
        assert!(!second(&mut first, t0 + SAME_INTERRUPTION));
        assert!(second(
            &mut first,
            t0 + SAME_INTERRUPTION + Duration::from_millis(1)
        ));
    }
}
