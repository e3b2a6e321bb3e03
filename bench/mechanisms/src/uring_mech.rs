//! io_uring through the `io-uring` crate: one ring per thread, per connection one recv SQE
//! always in flight (into the connection's own read buffer: the completion model keeps every
//! connection's buffer lent to the kernel) and a send SQE whenever new requests are ready
//! (requests made while a send is in flight wait in a second buffer). One
//! `io_uring_enter` per batch submits every SQE the batch produced and waits for the next
//! completion. The ring is set up SINGLE_ISSUER | DEFER_TASKRUN (completions run in the
//! submitting thread's enter, the cheapest mode kernels >= 6.1 offer); if the kernel refuses,
//! plainly (said on stderr). No provided buffers, no multishot receives.

use crate::mio_mech::rbuf_len;
use crate::proto::{consume, InFlight, Stream, Tally, MAX_REQ};
use crate::Job;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::os::fd::AsRawFd;
use std::time::Instant;

struct Conn {
    fd: i32,
    rbuf: Vec<u8>,
    filled: usize,
    /// The bytes the send in flight carries (stable while it is in flight), sent so far.
    wbuf: Vec<u8>,
    wsent: usize,
    sending: bool,
    /// Requests made while a send was in flight, not yet stamped.
    next: Vec<u8>,
    fresh: usize,
    inflight: InFlight,
    stream: Stream,
    dead: bool,
}

const RECV: u64 = 0;
const SEND: u64 = 1;

/// Sets up the ring; `pub` for the `--probe` check in main.
pub fn ring(sq: u32, cq: u32) -> (IoUring, bool) {
    if let Ok(r) = IoUring::builder()
        .setup_cqsize(cq)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(sq)
    {
        return (r, true);
    }
    let r = IoUring::builder()
        .setup_cqsize(cq)
        .build(sq)
        .unwrap_or_else(|e| {
            eprintln!("kvmeter-mechanisms: io_uring_setup: {e}");
            std::process::exit(3)
        });
    (r, false)
}

fn push(ring: &mut IoUring, e: &squeue::Entry) {
    loop {
        // SAFETY: every buffer an entry points into lives in `conns`, which is never resized
        // and is leaked at the end (never freed while the kernel may write into it).
        if unsafe { ring.submission().push(e) }.is_ok() {
            return;
        }
        ring.submit().expect("io_uring_enter");
    }
}

fn recv_sqe(c: &mut Conn, i: usize) -> squeue::Entry {
    let space = &mut c.rbuf[c.filled..];
    opcode::Recv::new(types::Fd(c.fd), space.as_mut_ptr(), space.len() as u32)
        .build()
        .user_data((i as u64) << 1 | RECV)
}

fn send_sqe(c: &Conn, i: usize) -> squeue::Entry {
    let rest = &c.wbuf[c.wsent..];
    opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
        .build()
        .user_data((i as u64) << 1 | SEND)
}

/// Moves the waiting requests into the send buffer, stamps them, queues the send.
fn start_send(ring: &mut IoUring, c: &mut Conn, i: usize) {
    std::mem::swap(&mut c.wbuf, &mut c.next);
    c.next.clear();
    c.wsent = 0;
    let now = Instant::now();
    for _ in 0..c.fresh {
        c.inflight.push(now);
    }
    c.fresh = 0;
    c.sending = true;
    let e = send_sqe(c, i);
    push(ring, &e);
}

pub fn run(job: Job) -> Tally {
    let mut tally = Tally::new();
    let n = job.socks.len();
    let sq = (2 * n as u32).next_power_of_two().clamp(64, 4096);
    let cq = (4 * n as u32).next_power_of_two().clamp(128, 65536);
    let (mut ring, fast) = ring(sq, cq);
    if !fast {
        eprintln!("note: io_uring without SINGLE_ISSUER|DEFER_TASKRUN (refused by the kernel)");
    }
    let mut conns: Vec<Conn> = job
        .socks
        .iter()
        .enumerate()
        .map(|(i, s)| Conn {
            fd: s.as_raw_fd(),
            rbuf: vec![0; rbuf_len(job.depth)],
            filled: 0,
            wbuf: Vec::with_capacity(job.depth * MAX_REQ),
            wsent: 0,
            sending: false,
            next: Vec::with_capacity(job.depth * MAX_REQ),
            fresh: 0,
            inflight: InFlight::new(),
            stream: Stream::new(job.first + i as u64, job.keys),
            dead: false,
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        for _ in 0..job.depth {
            c.stream.push_request(&mut c.next);
        }
        c.fresh = job.depth;
        start_send(&mut ring, c, i);
        let e = recv_sqe(c, i);
        push(&mut ring, &e);
    }
    let mut done_cqes: Vec<(u64, i32)> = Vec::with_capacity(cq as usize);
    loop {
        if Instant::now() >= job.deadline {
            break;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e)
                if e.raw_os_error() == Some(libc::EINTR)
                    || e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => panic!("io_uring_enter: {e}"),
        }
        done_cqes.clear();
        done_cqes.extend(
            ring.completion()
                .map(|e: cqueue::Entry| (e.user_data(), e.result())),
        );
        for &(ud, res) in &done_cqes {
            let i = (ud >> 1) as usize;
            let c = &mut conns[i];
            if c.dead {
                continue;
            }
            if res <= 0 && !(res == -libc::EAGAIN || res == -libc::EINTR) {
                c.dead = true;
                tally.errors += 1;
                continue;
            }
            if ud & 1 == RECV {
                if res > 0 {
                    c.filled += res as usize;
                    let now = Instant::now();
                    let Some(done) =
                        consume(&mut c.rbuf, &mut c.filled, &mut c.inflight, &mut tally, now)
                    else {
                        c.dead = true;
                        tally.errors += 1;
                        continue;
                    };
                    for _ in 0..done {
                        c.stream.push_request(&mut c.next);
                    }
                    c.fresh += done;
                }
                let e = recv_sqe(c, i);
                push(&mut ring, &e);
                if !c.sending && c.fresh > 0 {
                    start_send(&mut ring, c, i);
                }
            } else {
                if res > 0 {
                    c.wsent += res as usize;
                }
                if c.wsent < c.wbuf.len() {
                    let e = send_sqe(c, i);
                    push(&mut ring, &e);
                } else {
                    c.sending = false;
                    if c.fresh > 0 {
                        start_send(&mut ring, c, i);
                    }
                }
            }
        }
    }
    drop(ring); // cancels what is in flight
    std::mem::forget(conns); // buffers the kernel may still have held: never freed
    std::mem::forget(job.socks);
    tally
}
