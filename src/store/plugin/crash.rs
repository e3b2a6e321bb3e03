//! What a run directory says when a plug-in crashes the process.
//!
//! A plug-in runs inside kvmeter's process (an out-of-process store would add a round trip per
//! operation, the cost the wrapper exists to avoid), so a segfault in it ends kvmeter. What
//! must survive is already on disk — intervals.csv and the HDR logs are written as each
//! interval closes — and this module adds the one thing missing: a `crash.txt` in the run
//! directory naming the signal and the plug-in, so the report says what happened instead of
//! "killed?". The handler is async-signal-safe: it formats into a stack buffer and uses only
//! open(2), write(2), close(2) and sigaction(2), then hands the signal to the handler that was
//! there before (Rust's stack-overflow reporter, or the default action), so the process still
//! dies of the signal with its usual exit status and core dump.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The file the handler writes: the run directory's crash.txt (a leaked C string; null when
/// no run is armed).
static PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
/// The first line, naming the plug-in (leaked C string).
static WHAT: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

const SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// The handlers found before ours, one per entry of SIGNALS (written once, before ours is
/// installed; read only by the handler).
static mut PREVIOUS: [std::mem::MaybeUninit<libc::sigaction>; 5] =
    [std::mem::MaybeUninit::uninit(); 5];
static INSTALLED: std::sync::Once = std::sync::Once::new();

/// The name of this crash report in a run directory.
pub const FILE: &str = "crash.txt";

/// From now on a fatal signal writes `rundir/crash.txt` naming `plugin` before the process
/// dies. Call once the run directory exists.
pub fn arm(rundir: &Path, plugin: &str) {
    let Ok(path) = CString::new(rundir.join(FILE).as_os_str().as_encoded_bytes()) else {
        return;
    };
    let what = format!(
        "kvmeter died of a fatal signal while the store plug-in {plugin} was loaded; the crash is most likely in the plug-in. Every interval completed before it is in intervals.csv and the HDR logs; 'kvmeter report {}' makes the report from them.\n",
        rundir.display()
    );
    let what = CString::new(what).unwrap_or_default();
    PATH.store(path.into_raw(), Ordering::SeqCst);
    WHAT.store(what.into_raw(), Ordering::SeqCst);
    INSTALLED.call_once(|| {
        // SAFETY: sigaction with a handler of the SA_SIGINFO shape; PREVIOUS is written here,
        // once, before our handler can run.
        unsafe {
            for (i, sig) in SIGNALS.iter().enumerate() {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = handler as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut act.sa_mask);
                let prev = (*std::ptr::addr_of_mut!(PREVIOUS))[i].as_mut_ptr();
                libc::sigaction(*sig, &act, prev);
            }
        }
    });
}

/// The run is over: a later signal writes nothing.
pub fn disarm() {
    PATH.store(std::ptr::null_mut(), Ordering::SeqCst);
}

fn signal_name(sig: libc::c_int) -> &'static [u8] {
    match sig {
        libc::SIGSEGV => b"SIGSEGV (invalid memory access)",
        libc::SIGBUS => b"SIGBUS (bus error)",
        libc::SIGILL => b"SIGILL (illegal instruction)",
        libc::SIGFPE => b"SIGFPE (arithmetic fault)",
        libc::SIGABRT => b"SIGABRT (abort)",
        _ => b"a fatal signal",
    }
}

/// Appends `n` in hexadecimal.
fn push_hex(buf: &mut [u8], len: &mut usize, n: usize) {
    let digits = b"0123456789abcdef";
    let mut tmp = [0u8; 16];
    let mut i = 0;
    let mut v = n;
    loop {
        tmp[i] = digits[v & 15];
        i += 1;
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    for b in b"0x".iter().chain(tmp[..i].iter().rev()) {
        if *len < buf.len() {
            buf[*len] = *b;
            *len += 1;
        }
    }
}

fn push(buf: &mut [u8], len: &mut usize, s: &[u8]) {
    for b in s {
        if *len < buf.len() {
            buf[*len] = *b;
            *len += 1;
        }
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let path = PATH.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if !path.is_null() {
        // SAFETY: only async-signal-safe calls; the strings were leaked at arm and never freed.
        unsafe {
            let mut buf = [0u8; 160];
            let mut len = 0;
            push(&mut buf, &mut len, b"signal: ");
            push(&mut buf, &mut len, signal_name(sig));
            if !info.is_null() && matches!(sig, libc::SIGSEGV | libc::SIGBUS) {
                push(&mut buf, &mut len, b" at address ");
                push_hex(&mut buf, &mut len, (*info).si_addr() as usize);
            }
            push(&mut buf, &mut len, b"\n");
            let what = WHAT.load(Ordering::SeqCst);
            let fd = libc::open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644);
            // The same words in crash.txt and on stderr.
            for fd in [fd, 2] {
                if fd < 0 {
                    continue;
                }
                if !what.is_null() {
                    libc::write(fd, what.cast(), libc::strlen(what));
                }
                libc::write(fd, buf.as_ptr().cast(), len);
            }
            if fd >= 0 {
                libc::close(fd);
            }
        }
    }
    // Hand the signal on: the previous handler, or the default action.
    let i = SIGNALS.iter().position(|s| *s == sig).unwrap_or(0);
    // SAFETY: PREVIOUS[i] was filled before this handler was installed.
    unsafe {
        let prev = (*std::ptr::addr_of!(PREVIOUS))[i].assume_init_ref();
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
            // Returning re-runs the faulting instruction (SIGSEGV, SIGBUS, SIGILL, SIGFPE),
            // which now takes the default action; a raised signal (SIGABRT) is raised again.
            if sig == libc::SIGABRT {
                libc::raise(sig);
            }
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex() {
        let mut buf = [0u8; 32];
        let mut len = 0;
        super::push_hex(&mut buf, &mut len, 0xdead_beef);
        assert_eq!(&buf[..len], b"0xdeadbeef");
        len = 0;
        super::push_hex(&mut buf, &mut len, 0);
        assert_eq!(&buf[..len], b"0x0");
    }
}
