//! How a network client waits for a reply: block in the kernel at once, or first poll the
//! socket for a short while, giving the CPU away between polls (`--store-opt reply_wait`).
//!
//! Why (issue 45, measured on a 2-vCPU KVM guest with `perf`'s scheduler tracepoints and
//! `/proc/interrupts`): when the server shares kvmeter's CPUs, a blocking round trip puts the
//! client's CPU to sleep, and each reply then wakes a halted virtual CPU through an
//! inter-processor interrupt (about one per request at two connections, two at one), which costs
//! more than the server's work. redis-benchmark, busier between requests, kept the CPUs awake
//! and was 1.3–1.4× ahead at two connections. Polling for up to `SPIN_BUDGET` and calling
//! `sched_yield` between polls keeps the CPU awake and hands it straight to the server when
//! both want it: at one and two connections kvmeter then did 2.0–2.4× its blocking rate with
//! about the same CPU per request, and a reply that takes longer still ends in a blocking read.
//! When the server runs on other CPUs (or another host), polling would only burn the client's
//! CPU, which figures such as "operations per client CPU-second" must not pay for; `auto`
//! (the default) therefore polls only where the server shares kvmeter's CPUs, which the run
//! decides at its start (`driver::setup`) and records in the manifest's store options.

use crate::error::UsageError;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The longest a request polls before it blocks: above a loopback round trip with the server
/// on the same CPUs (25–60 µs here), far below a request deadline.
pub const SPIN_BUDGET: Duration = Duration::from_micros(50);

/// The `reply_wait` option every network store declares, with its help text.
pub const WAIT_OPT: super::OptSpec = super::OptSpec {
    name: "reply_wait",
    default: "auto",
    help: "how a client waits for a reply: spin (poll the socket up to 50 µs, yielding the CPU between polls, then block), block (sleep in the kernel at once), or auto: spin when the server shares kvmeter's CPUs (on this host, with an overlapping CPU affinity), block otherwise. The manifest's store options record the choice",
};

/// A resolved `reply_wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Wait {
    #[default]
    Block,
    Spin,
}

impl Wait {
    /// The polling budget, or None to block at once.
    pub fn budget(self) -> Option<Duration> {
        match self {
            Wait::Spin => Some(SPIN_BUDGET),
            Wait::Block => None,
        }
    }
}

/// `--store-opt reply_wait`: `spin` or `block`; `auto` that the run did not resolve (a check outside
/// a run) blocks.
pub fn wait(o: &super::StoreOptions) -> Result<Wait, UsageError> {
    Ok(match o.choice("reply_wait", &["auto", "spin", "block"])? {
        "spin" => Wait::Spin,
        _ => Wait::Block,
    })
}

/// Reads what socket `fd` has into `buf`, polling (a non-blocking `recv`) until bytes arrive
/// or `budget` passes, yielding the CPU between polls. `Some(n)`: n bytes were read (0: the
/// peer closed). `None`: nothing came within the budget, or an error, which the blocking read
/// that follows reports.
pub fn spin(fd: RawFd, buf: &mut [u8], budget: Duration) -> Option<usize> {
    let t0 = Instant::now();
    loop {
        // SAFETY: the buffer is valid for its length; MSG_DONTWAIT never blocks.
        let got = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if got >= 0 {
            return Some(got as usize);
        }
        match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock if t0.elapsed() < budget => std::thread::yield_now(),
            std::io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_reply_in_time_is_read_and_none_is_a_bounded_wait() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 16];
        let t = Instant::now();
        assert_eq!(
            spin(c.as_raw_fd(), &mut buf, Duration::from_millis(5)),
            None
        );
        assert!(t.elapsed() >= Duration::from_millis(5));
        assert!(t.elapsed() < Duration::from_secs(2));
        s.write_all(b"hello").unwrap();
        assert_eq!(
            spin(c.as_raw_fd(), &mut buf, Duration::from_secs(5)),
            Some(5)
        );
        assert_eq!(&buf[..5], b"hello");
        drop(s);
        assert_eq!(
            spin(c.as_raw_fd(), &mut buf, Duration::from_secs(5)),
            Some(0)
        );
    }
}
