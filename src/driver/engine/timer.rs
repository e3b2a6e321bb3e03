//! A timerfd in the event loop's epoll set: epoll_wait's own timeout counts whole
//! milliseconds (mio rounds up), which would send an open-loop arrival up to 1 ms late; a
//! timerfd wakes the loop at the arrival's nanosecond (with the thread's timer slack at 1 ns),
//! so the loop sleeps until then instead of spinning.

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::os::fd::RawFd;

pub(super) struct Timer {
    fd: RawFd,
    armed_for: u64,
}

impl Timer {
    pub(super) fn new(registry: &Registry, token: Token) -> std::io::Result<Timer> {
        // SAFETY: plain system calls on a descriptor this struct owns.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        registry.register(&mut SourceFd(&fd), token, Interest::READABLE)?;
        Ok(Timer { fd, armed_for: 0 })
    }

    /// Fires after `ns` (at least 1 µs); `due` (clock ns) names the wake-up so re-arming for
    /// the same one is skipped.
    pub(super) fn arm(&mut self, due: u64, ns: u64) {
        if self.armed_for == due {
            return;
        }
        self.armed_for = due;
        let ns = ns.max(1_000);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: fd is ours; spec lives across the call.
        unsafe { libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut()) };
    }

    /// Clears a fired timer (its count), so edge-triggered epoll reports the next one.
    pub(super) fn clear(&mut self) {
        let mut n = [0u8; 8];
        // SAFETY: reads 8 bytes into a buffer of 8.
        unsafe { libc::read(self.fd, n.as_mut_ptr().cast(), 8) };
        self.armed_for = 0;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this struct owns, once.
        unsafe { libc::close(self.fd) };
    }
}
