//! Reports that bypass etcd (issue 33, docs/distributed.md "Where reports go"): each agent
//! pushes its interval and phase-end reports to the coordinator over one TCP connection, and
//! etcd keeps only membership, leases, start times and aborts. etcd then holds O(agents ×
//! phases) revisions whatever the run's length: through etcd, every report is a revision that
//! only a compaction frees, and etcd's compaction is etcd-wide (it would drop the history of
//! every other user's keys), so kvmeter never compacts someone else's etcd.
//!
//! The wire format is kvmeter's own because nothing this small exists as a crate: a frame is
//! `key length (u16 BE) · value length (u32 BE) · key · value` ([`parse_frame`]). Protocol 2
//! (issue 41, docs/security.md "The report channel"), in order on each connection:
//!
//! 1. coordinator → agent: `challenge/2` · 32 hex digits, fresh for this connection;
//! 2. agent → coordinator: `hello/2/<agent:04>` · a MAC over the run, the agent, the challenge
//!    and place 0 (`Seal::seal_frame`): it cannot be replayed on another connection;
//! 3. coordinator → agent: `welcome/2` · empty: the connection is this agent's;
//! 4. agent → coordinator: its reports in order, key relative to the run's prefix
//!    (`iv/<p>/<k>/<i>`, `done/<p>/<i>`), each value sealed with the challenge and its place
//!    on the connection (1, 2, …): a frame repeated, reordered or replayed does not verify.
//!
//! With `dist run --reports-tls-cert/--reports-tls-key` all of this runs inside TLS, the
//! agents pinning the coordinator's certificate by the hash the sealed plan carries (tls.rs).
//!
//! The coordinator's end is [`Inbox`] (inbox.rs); an agent's is [`Sender`].

mod inbox;
#[cfg(test)]
mod tests;
mod tls;

use super::seal::Seal;
pub use inbox::Inbox;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};
pub use tls::ServerTls;
use tls::Wire;

/// A key longer than this is not kvmeter's.
pub const MAX_KEY: usize = 256;
/// A frame's value larger than this is not a report.
pub const MAX_FRAME: usize = 1 << 20;
/// A frame before the hello verified (the hello itself) is at most this large.
pub const MAX_HELLO_FRAME: usize = 512;
/// The protocol this build speaks; a peer that speaks another is refused in one line.
pub const PROTOCOL: u32 = 2;
const HEADER: usize = 6;
const CHALLENGE: &str = "challenge/2";
const HELLO: &str = "hello/2/";
const WELCOME: &str = "welcome/2";
/// Protocol 1's hello (the same sealed bytes on every connection of a run).
const HELLO_V1: &str = "hello";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The coordinator answers a connection and its hello at once; this long is not kvmeter.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the coordinator listens, parsed from a published plan: only an IP-literal socket
/// address with a port (a plan never makes an agent resolve a name).
pub fn parse_published_addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s.parse().map_err(|_| {
        format!(
            "'{}' is not IP:PORT",
            s.chars().take(80).collect::<String>()
        )
    })?;
    if a.port() == 0 || a.ip().is_unspecified() || a.ip().is_multicast() {
        return Err(format!("{a} is not an address to connect to"));
    }
    Ok(a)
}

/// One frame at the start of `buf`: `Ok(None)` while incomplete, else (key, value, bytes
/// used). A key empty, over [`MAX_KEY`] or not UTF-8, or a value over `max_value` or not UTF-8,
/// is an error (the connection's end). The fuzz target `relay_frames` runs it.
pub fn parse_frame(buf: &[u8], max_value: usize) -> Result<Option<(&str, &str, usize)>, String> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let klen = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    let vlen = u32::from_be_bytes([buf[2], buf[3], buf[4], buf[5]]) as usize;
    if klen == 0 || klen > MAX_KEY || vlen > max_value {
        return Err(format!(
            "a frame of key {klen} and value {vlen} bytes (at most {MAX_KEY} and {max_value})"
        ));
    }
    if buf.len() < HEADER + klen + vlen {
        return Ok(None);
    }
    let key = std::str::from_utf8(&buf[HEADER..HEADER + klen])
        .map_err(|_| "a key that is not UTF-8".to_string())?;
    let value = std::str::from_utf8(&buf[HEADER + klen..HEADER + klen + vlen])
        .map_err(|_| format!("{key}: a value that is not UTF-8"))?;
    Ok(Some((key, value, HEADER + klen + vlen)))
}

/// Appends one frame to `out`.
pub fn encode_frame(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// The agent index a hello key names (`hello/2/0003` → 3).
fn hello_agent(key: &str) -> Option<usize> {
    let n = key.strip_prefix(HELLO)?;
    (n.len() == 4 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// An agent's end of the channel.
pub struct Sender {
    stream: Wire,
    seal: Seal,
    prefix: String,
    challenge: String,
    /// Place of the next report on this connection (the hello was 0).
    seq: u64,
    frame: Vec<u8>,
    /// Bytes written (headers, keys, sealed values).
    pub bytes_sent: u64,
}

impl Sender {
    /// Connects to the coordinator's published address (`addr` checked by
    /// [`parse_published_addr`]) as agent `agent`, in TLS trusting only the certificate whose
    /// SHA-256 is `pin` when the plan gives one: reads the connection's challenge, answers
    /// with the sealed hello and waits for the welcome, each within 3 s.
    pub fn connect(
        addr: &str,
        pin: Option<&str>,
        seal: Seal,
        prefix: String,
        agent: usize,
    ) -> io::Result<Sender> {
        let a = parse_published_addr(addr).map_err(io::Error::other)?;
        let tcp = TcpStream::connect_timeout(&a, CONNECT_TIMEOUT)?;
        tcp.set_nodelay(true)?;
        tcp.set_write_timeout(Some(WRITE_TIMEOUT))?;
        tcp.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let mut stream = match pin {
            Some(pin) => Wire::tls(tcp, a.ip(), pin)?,
            None => Wire::Plain(tcp),
        };
        let (key, challenge) = read_frame(&mut stream, "challenge").map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (a coordinator older than report channel protocol {PROTOCOL} sends none: run the same kvmeter on every host)"),
            )
        })?;
        if key != CHALLENGE || challenge.len() != 32 {
            return Err(io::Error::other(format!(
                "the coordinator's first frame is not a protocol-{PROTOCOL} challenge (another kvmeter version: run the same on every host)"
            )));
        }
        let mut s = Sender {
            stream,
            seal,
            prefix,
            challenge,
            seq: 0,
            frame: Vec::with_capacity(8 << 10),
            bytes_sent: 0,
        };
        let hello = format!("{HELLO}{agent:04}");
        let value = s
            .seal
            .seal_frame(&format!("{}{hello}", s.prefix), &s.challenge, 0, "");
        s.frame.clear();
        encode_frame(&mut s.frame, &hello, &value);
        s.stream.write_all(&s.frame)?;
        s.stream.flush()?;
        s.bytes_sent += s.frame.len() as u64;
        let (key, _) = read_frame(&mut s.stream, "welcome")?;
        if key != WELCOME {
            return Err(io::Error::other(
                "the coordinator did not welcome this agent's hello",
            ));
        }
        s.stream.tcp().set_read_timeout(None)?;
        Ok(s)
    }

    /// Seals `body` under the run's `prefix + key` at its place on this connection and sends
    /// it as one frame.
    pub fn send(&mut self, key: &str, body: &str) -> io::Result<()> {
        let seq = self.seq + 1;
        let value =
            self.seal
                .seal_frame(&format!("{}{key}", self.prefix), &self.challenge, seq, body);
        if key.len() > MAX_KEY || value.len() > MAX_FRAME {
            return Err(io::Error::other(format!(
                "a report of {} bytes under {key} is over the channel's {MAX_FRAME}-byte frame",
                value.len()
            )));
        }
        self.frame.clear();
        encode_frame(&mut self.frame, key, &value);
        self.stream.write_all(&self.frame)?;
        self.stream.flush()?;
        self.seq = seq;
        self.bytes_sent += self.frame.len() as u64;
        Ok(())
    }

    /// Ends the channel: the coordinator has read every frame once it closes its side
    /// (waited for at most 10 s).
    pub fn finish(mut self) -> io::Result<()> {
        self.stream.close_notify()?;
        let tcp = self.stream.tcp();
        tcp.shutdown(Shutdown::Write)?;
        tcp.set_read_timeout(Some(FINISH_TIMEOUT))?;
        // The raw socket: past close_notify TLS has nothing more to say.
        let mut s = tcp;
        let mut scratch = [0u8; 64];
        let deadline = Instant::now() + FINISH_TIMEOUT;
        // The coordinator sends nothing more; anything it did send is read and ignored.
        while Instant::now() < deadline {
            match s.read(&mut scratch) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the coordinator did not close the channel",
        ))
    }
}

/// One small frame from the coordinator (a challenge or a welcome), within the read timeout.
fn read_frame(stream: &mut impl Read, what: &str) -> io::Result<(String, String)> {
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 128];
    loop {
        match parse_frame(&buf, 64) {
            Ok(Some((k, v, _))) => return Ok((k.to_string(), v.to_string())),
            Ok(None) => {}
            Err(e) => return Err(io::Error::other(format!("the coordinator sent {e}"))),
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!(
                    "the coordinator closed the channel before its {what} (see its log for why)"
                ),
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the coordinator sent no {what} within {} s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                ))
            }
            Err(e) => return Err(e),
        }
    }
}
