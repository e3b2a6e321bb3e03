//! tokio: one task per connection, doing what the mio loop does per wake-up (read, parse and
//! record every complete reply, one write with a new request per reply) as awaits. Either a
//! current_thread runtime per loop thread (`tokio`) or one multi-thread runtime with T workers
//! (`tokio-mt`, work-stealing between them). Each runtime thread records into its own
//! thread-local tally (no lock per request), merged when the thread ends.

use crate::mio_mech::rbuf_len;
use crate::proto::{consume, InFlight, Stream, Tally, MAX_REQ};
use crate::Job;
use std::cell::RefCell;
use std::sync::Mutex;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

thread_local! {
    static TALLY: RefCell<Tally> = RefCell::new(Tally::new());
}

static MERGED: Mutex<Option<Tally>> = Mutex::new(None);

fn take_local() -> Tally {
    TALLY.with(|t| std::mem::replace(&mut *t.borrow_mut(), Tally::new()))
}

/// One connection's closed loop until the deadline; returns its completed requests.
async fn conn_task(
    std_sock: std::net::TcpStream,
    seed: u64,
    depth: usize,
    keys: u64,
    deadline: Instant,
) -> u64 {
    std_sock.set_nonblocking(true).unwrap();
    let mut sock = tokio::net::TcpStream::from_std(std_sock).unwrap();
    let mut stream = Stream::new(seed, keys);
    let mut inflight = InFlight::new();
    let mut rbuf = vec![0u8; rbuf_len(depth)];
    let mut filled = 0;
    let mut wbuf = Vec::with_capacity(depth * MAX_REQ);
    let mut count = 0u64;
    let mut fresh = depth;
    for _ in 0..depth {
        stream.push_request(&mut wbuf);
    }
    loop {
        if fresh > 0 {
            let now = Instant::now();
            for _ in 0..fresh {
                inflight.push(now);
            }
            if sock.write_all(&wbuf).await.is_err() {
                break;
            }
            wbuf.clear();
        }
        let n = match sock.read(&mut rbuf[filled..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        filled += n;
        let now = Instant::now();
        let done = TALLY.with(|t| {
            consume(
                &mut rbuf,
                &mut filled,
                &mut inflight,
                &mut t.borrow_mut(),
                now,
            )
        });
        let Some(done) = done else { break };
        count += done as u64;
        if now >= deadline {
            return count;
        }
        for _ in 0..done {
            stream.push_request(&mut wbuf);
        }
        fresh = done;
    }
    TALLY.with(|t| t.borrow_mut().errors += 1);
    count
}

async fn spawn_all(job: Job) -> u64 {
    let (depth, keys, deadline, first) = (job.depth, job.keys, job.deadline, job.first);
    let handles: Vec<_> = job
        .socks
        .into_iter()
        .enumerate()
        .map(|(i, s)| tokio::spawn(conn_task(s, first + i as u64, depth, keys, deadline)))
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.await.expect("task panicked");
    }
    total
}

/// `tokio`: this thread's own current_thread runtime.
pub fn run_current_thread(job: Job) -> Tally {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let _ = take_local();
    let n = rt.block_on(spawn_all(job));
    let t = take_local();
    assert_eq!(t.hist.len(), n, "tally lost replies");
    t
}

/// `tokio-mt`: one multi-thread runtime with `workers` workers for every connection.
pub fn run_multi_thread(jobs: Vec<Job>, workers: usize) -> Tally {
    *MERGED.lock().unwrap() = Some(Tally::new());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_io()
        .on_thread_stop(|| {
            let t = take_local();
            MERGED.lock().unwrap().as_mut().unwrap().merge(&t);
        })
        .build()
        .unwrap();
    let n: u64 = rt.block_on(async {
        let hs: Vec<_> = jobs
            .into_iter()
            .map(|j| tokio::spawn(spawn_all(j)))
            .collect();
        let mut n = 0;
        for h in hs {
            n += h.await.unwrap();
        }
        n
    });
    drop(rt); // waits for the workers, whose on_thread_stop merges their tallies
    let t = MERGED.lock().unwrap().take().unwrap();
    if t.hist.len() != n {
        eprintln!("warning: tokio-mt merged {} of {} replies", t.hist.len(), n);
    }
    t
}
