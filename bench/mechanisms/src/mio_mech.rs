//! epoll, edge-triggered, through mio 1.x: kvmeter's engine's mechanism. Per wake-up and
//! ready connection: reads until a short read (a short read on a stream socket emptied it; the
//! next bytes raise a new edge, as kvmeter's conn.rs relies on), then one write carrying a new
//! request per reply completed.

use crate::proto::{consume, InFlight, Stream, Tally, MAX_REPLY, MAX_REQ};
use crate::Job;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use std::io::{ErrorKind, Read, Write};
use std::time::Instant;

pub struct Conn {
    sock: TcpStream,
    rbuf: Vec<u8>,
    filled: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Requests appended to wbuf since the last flush, not yet stamped.
    fresh: usize,
    inflight: InFlight,
    stream: Stream,
    dead: bool,
}

/// Read buffer: room for every reply in flight (the same sizing in every mechanism).
pub fn rbuf_len(depth: usize) -> usize {
    (depth * 1100).max(MAX_REPLY) + 1024
}

impl Conn {
    fn flush(&mut self) -> std::io::Result<()> {
        if self.fresh > 0 {
            let now = Instant::now();
            for _ in 0..self.fresh {
                self.inflight.push(now);
            }
            self.fresh = 0;
        }
        while self.wpos < self.wbuf.len() {
            match self.sock.write(&self.wbuf[self.wpos..]) {
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        Ok(())
    }

    /// Returns false when the connection failed.
    fn on_ready(&mut self, tally: &mut Tally) -> bool {
        loop {
            let space = self.rbuf.len() - self.filled;
            match self.sock.read(&mut self.rbuf[self.filled..]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.filled += n;
                    let now = Instant::now();
                    let Some(done) = consume(
                        &mut self.rbuf,
                        &mut self.filled,
                        &mut self.inflight,
                        tally,
                        now,
                    ) else {
                        return false;
                    };
                    for _ in 0..done {
                        self.stream.push_request(&mut self.wbuf);
                    }
                    self.fresh += done;
                    if n < space {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
        self.flush().is_ok()
    }
}

pub fn run(job: Job) -> Tally {
    let mut tally = Tally::new();
    let mut poll = Poll::new().expect("epoll_create");
    let mut conns: Vec<Conn> = Vec::with_capacity(job.socks.len());
    for (i, s) in job.socks.into_iter().enumerate() {
        s.set_nonblocking(true).unwrap();
        let mut sock = TcpStream::from_std(s);
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)
            .unwrap();
        conns.push(Conn {
            sock,
            rbuf: vec![0; rbuf_len(job.depth)],
            filled: 0,
            wbuf: Vec::with_capacity(job.depth * MAX_REQ),
            wpos: 0,
            fresh: 0,
            inflight: InFlight::new(),
            stream: Stream::new(job.first + i as u64, job.keys),
            dead: false,
        });
    }
    for c in conns.iter_mut() {
        for _ in 0..job.depth {
            c.stream.push_request(&mut c.wbuf);
        }
        c.fresh = job.depth;
        if c.flush().is_err() {
            c.dead = true;
            tally.errors += job.depth as u64;
        }
    }
    let mut events = Events::with_capacity(1024);
    loop {
        let now = Instant::now();
        if now >= job.deadline {
            break;
        }
        if let Err(e) = poll.poll(&mut events, Some(job.deadline - now)) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            panic!("epoll_wait: {e}");
        }
        for ev in events.iter() {
            let c = &mut conns[ev.token().0];
            if c.dead {
                continue;
            }
            if !c.on_ready(&mut tally) {
                c.dead = true;
                tally.errors += 1;
                let _ = poll.registry().deregister(&mut c.sock);
            }
        }
    }
    tally
}
