//! Panics as data: a process-wide hook that prints a panic as one line on stderr and records
//! it, so whatever is supervising the run (a phase's interval loop, `Run::finish`) can see that
//! *some* thread panicked — a worker, a companion, the telemetry sampler, an agent's poster —
//! and end the run as failed with the panic's message, instead of waiting for a thread that
//! will never report back.
//!
//! Recording costs nothing until a panic happens: the supervisor compares one relaxed atomic
//! counter every loop turn (never on the per-operation path). Messages are kept in a short,
//! bounded list (the first few explain a run; a thousand identical ones do not).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

/// How many panic messages are kept (the count goes on).
const KEPT: usize = 16;

static COUNT: AtomicU64 = AtomicU64::new(0);
static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's last panic, as the hook described it (with its location), for
    /// `message_of` after `catch_unwind`.
    static LAST: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs the hook once per process. Every panic then prints one line,
/// `error: thread 'NAME' panicked at FILE:LINE: MESSAGE`, and is recorded; with
/// `RUST_BACKTRACE` set (and not 0), a backtrace follows the line.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("unnamed");
            let at = info
                .location()
                .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let text = format!(
                "thread '{name}' panicked{at}: {}",
                one_line(&payload_text(info.payload()))
            );
            errln!("error: {text}");
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
                errln!("{}", std::backtrace::Backtrace::force_capture());
            }
            record(text);
        }));
    });
}

/// Records a panic's description (the hook does this; tests may call it directly).
pub fn record(text: String) {
    LAST.with(|l| *l.borrow_mut() = Some(text.clone()));
    {
        let mut m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() < KEPT {
            m.push(text);
        }
    }
    COUNT.fetch_add(1, Ordering::Release);
}

/// Panics so far in this process (compare with an earlier value to see a new one).
#[inline]
pub fn count() -> u64 {
    COUNT.load(Ordering::Acquire)
}

/// The first panic recorded after `count()` returned `since`, if any.
pub fn since(since: u64) -> Option<String> {
    if count() <= since {
        return None;
    }
    let m = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
    m.get(since as usize)
        .or(m.last())
        .cloned()
        .or_else(|| Some("a thread panicked".into()))
}

/// The description of a panic this thread just caught with `catch_unwind`: the hook's line
/// (thread, location, message) when the hook is installed, else the payload's text.
pub fn message_of(payload: &(dyn std::any::Any + Send)) -> String {
    LAST.with(|l| l.borrow_mut().take())
        .unwrap_or_else(|| format!("panicked: {}", one_line(&payload_text(payload))))
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".into()
    }
}

/// A message on one line (summary.json's error and stderr both want one).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_panics_are_described_on_one_line_and_counted() {
        install();
        let before = count();
        let r = std::thread::Builder::new()
            .name("kvm-test-x".into())
            .spawn(|| {
                std::panic::catch_unwind(|| panic!("two\nlines"))
                    .map_err(|p| message_of(p.as_ref()))
            })
            .unwrap()
            .join()
            .unwrap();
        let msg = r.unwrap_err();
        assert!(
            msg.starts_with("thread 'kvm-test-x' panicked at src/panics.rs:"),
            "{msg}"
        );
        assert!(msg.ends_with(": two lines"), "{msg}");
        assert!(count() > before);
        assert!(since(before).is_some());
        assert_eq!(since(count()), None);
    }
}
