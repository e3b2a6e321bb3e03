//! The report channel against what an attacker without the key can send (issue 41; review
//! 2026-11-27 F1, F2): captured frames replayed on another connection or repeated on the same
//! one, idle connections, a flooding connection.

use super::inbox::{MAX_QUEUED_PER_AGENT, SPARE_PENDING};
use super::*;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

const PREFIX: &str = "/kvmeter/t/";

fn seal() -> Seal {
    let s = Seal::load(None, Some("0123456789abcdef0123".into())).unwrap();
    s.for_run("nonce-of-this-run")
}

/// The agent a report key belongs to (as reports.rs says for the coordinator).
fn agent_of(k: &str) -> Option<usize> {
    if !(k.starts_with("iv/") || k.starts_with("done/")) {
        return None;
    }
    k.rsplit('/').next()?.parse().ok()
}

fn inbox(agents: usize) -> Inbox {
    Inbox::bind(
        "127.0.0.1:0".parse().unwrap(),
        None,
        seal(),
        PREFIX.into(),
        agents,
        agent_of,
    )
    .unwrap()
}

fn sender(i: &Inbox, agent: usize) -> Sender {
    Sender::connect(&i.addr().to_string(), None, seal(), PREFIX.into(), agent).unwrap()
}

fn wait_for(i: &Inbox, n: usize) -> Vec<(String, String)> {
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < deadline {
        got.extend(i.take());
        std::thread::sleep(Duration::from_millis(10));
    }
    got
}

fn wait_rejected(i: &Inbox, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut why = vec![];
    while why.len() < n && Instant::now() < deadline {
        why.extend(i.take_rejected().into_iter().map(|(_, w)| w));
        std::thread::sleep(Duration::from_millis(10));
    }
    why
}

/// Reads until the coordinator closes the connection; false on a timeout.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() != io::ErrorKind::WouldBlock,
        }
    }
}

#[test]
fn sealed_frames_arrive_in_order_and_finish_waits_for_the_close() {
    let i = inbox(1);
    let mut s = sender(&i, 0);
    for k in 0..50 {
        s.send(&format!("iv/0/{k:06}/0000"), &"x".repeat(k * 100))
            .unwrap();
    }
    s.send("done/0/0000", "{}").unwrap();
    s.finish().unwrap();
    let got = wait_for(&i, 51);
    assert_eq!(got.len(), 51);
    for (k, (key, body)) in got.iter().take(50).enumerate() {
        assert_eq!(key, &format!("iv/0/{k:06}/0000"));
        assert_eq!(body.len(), k * 100);
    }
    assert_eq!(got[50].0, "done/0/0000");
    assert!(i.take_rejected().is_empty());
}

/// Forwards one connection both ways and keeps what the agent sent (a man in the middle).
fn recording_proxy(to: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        let (mut agent, _) = l.accept().unwrap();
        let mut coord = TcpStream::connect(to).unwrap();
        let (mut a2, mut c2) = (agent.try_clone().unwrap(), coord.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = io::copy(&mut c2, &mut a2);
            let _ = a2.shutdown(Shutdown::Write);
        });
        let mut b = [0u8; 4096];
        loop {
            match agent.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    kept.lock().unwrap().extend_from_slice(&b[..n]);
                    if coord.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = coord.shutdown(Shutdown::Write);
    });
    (addr, seen)
}

#[test]
fn a_captured_hello_and_reports_replayed_on_another_connection_count_for_nothing() {
    let i = inbox(2);
    let (via, seen) = recording_proxy(i.addr());
    let mut s = Sender::connect(&via.to_string(), None, seal(), PREFIX.into(), 0).unwrap();
    for k in 0..3 {
        s.send(&format!("iv/0/{k:06}/0000"), "{}").unwrap();
    }
    s.finish().unwrap();
    assert_eq!(wait_for(&i, 3).len(), 3);
    let captured = seen.lock().unwrap().clone();
    assert!(captured.len() > 100, "the proxy saw the agent's frames");
    // The capture (hello and reports), replayed on new connections: closed at the hello.
    for _ in 0..3 {
        let mut replay = TcpStream::connect(i.addr()).unwrap();
        replay.write_all(&captured).unwrap();
        assert!(closed_by_peer(&mut replay));
    }
    let why = wait_rejected(&i, 3);
    assert_eq!(why.len(), 3, "{why:?}");
    for w in &why {
        assert!(
            w.starts_with("hello/2/0000: its authentication does not verify"),
            "{w}"
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(i.take().is_empty(), "a replayed frame was delivered");
}

/// A connection of agent `a` that has said its hello, and the challenge its frames are sealed
/// with (what a key holder's agent does; here to place a captured frame twice on it).
fn raw_agent(i: &Inbox, a: usize) -> (TcpStream, String) {
    let mut s = TcpStream::connect(i.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (key, challenge) = read_frame(&mut s, "challenge").unwrap();
    assert_eq!(key, CHALLENGE);
    let hello = format!("{HELLO}{a:04}");
    let mut f = vec![];
    encode_frame(
        &mut f,
        &hello,
        &seal().seal_frame(&format!("{PREFIX}{hello}"), &challenge, 0, ""),
    );
    s.write_all(&f).unwrap();
    assert_eq!(read_frame(&mut s, "welcome").unwrap().0, WELCOME);
    (s, challenge)
}

#[test]
fn a_frame_repeated_or_moved_on_its_connection_closes_it_and_counts_once() {
    let i = inbox(2);
    let (mut s, challenge) = raw_agent(&i, 0);
    let frame = |k: &str, seq: u64| {
        let mut f = vec![];
        encode_frame(
            &mut f,
            k,
            &seal().seal_frame(&format!("{PREFIX}{k}"), &challenge, seq, "{}"),
        );
        f
    };
    let first = frame("iv/0/000000/0000", 1);
    s.write_all(&first).unwrap();
    s.write_all(&first).unwrap();
    assert!(closed_by_peer(&mut s));
    assert_eq!(wait_for(&i, 1).len(), 1);
    let why = wait_rejected(&i, 1);
    assert!(why[0].contains("out of its place does not"), "{why:?}");
    // Another agent's report on agent 1's connection, even sealed in place: closed.
    let (mut s, challenge) = raw_agent(&i, 1);
    let k = "iv/0/000000/0000";
    let mut f = vec![];
    encode_frame(
        &mut f,
        k,
        &seal().seal_frame(&format!("{PREFIX}{k}"), &challenge, 1, "{}"),
    );
    s.write_all(&f).unwrap();
    assert!(closed_by_peer(&mut s));
    let why = wait_rejected(&i, 1);
    assert!(why[0].contains("not a report of agent 1"), "{why:?}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(i.take().is_empty());
}

#[test]
fn bad_frames_and_old_agents_close_their_connection_only() {
    let i = inbox(2);
    // Another key: refused at the hello, so connect fails.
    let other = Seal::load(None, Some("another key of 20 bytes".into()))
        .unwrap()
        .for_run("nonce-of-this-run");
    let e = Sender::connect(&i.addr().to_string(), None, other, PREFIX.into(), 0)
        .err()
        .expect("a hello with another key is refused");
    assert!(
        e.to_string()
            .contains("closed the channel before its welcome"),
        "{e}"
    );
    // An agent index past the run's, a report key that is not one, an oversized header and
    // protocol 1's hello.
    assert!(Sender::connect(&i.addr().to_string(), None, seal(), PREFIX.into(), 2).is_err());
    let mut wrong_key = sender(&i, 1);
    wrong_key.send("plan", "not a report").unwrap();
    let mut raw = TcpStream::connect(i.addr()).unwrap();
    raw.write_all(&[0, 10, 0xff, 0xff, 0xff, 0xff]).unwrap();
    let mut old = TcpStream::connect(i.addr()).unwrap();
    let mut f = vec![];
    encode_frame(
        &mut f,
        HELLO_V1,
        &seal().seal(&format!("{PREFIX}{HELLO_V1}"), ""),
    );
    old.write_all(&f).unwrap();
    let mut good = sender(&i, 0);
    good.send("iv/0/000000/0000", "fine").unwrap();
    good.finish().unwrap();
    assert_eq!(
        wait_for(&i, 1),
        vec![("iv/0/000000/0000".to_string(), "fine".to_string())]
    );
    let mut why = wait_rejected(&i, 5);
    why.sort();
    assert_eq!(why.len(), 5, "{why:?}");
    for part in [
        "hello/2/0000: its authentication does not verify",
        "hello/2/0002: this run has 2 agents",
        "plan: not a report of agent 1",
        "value 4294967295 bytes",
        "protocol 1 (an older kvmeter agent",
    ] {
        assert!(why.iter().any(|w| w.contains(part)), "{part}: {why:?}");
    }
}

#[test]
fn idle_connections_neither_stay_nor_lock_agents_out() {
    let i = inbox(2);
    // More idle connections than may wait for their hello, before any agent.
    let mut idle: Vec<TcpStream> = (0..2 + SPARE_PENDING + 10)
        .map(|_| TcpStream::connect(i.addr()).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut a0 = sender(&i, 0);
    let mut a1 = sender(&i, 1);
    a0.send("iv/0/000000/0000", "a").unwrap();
    a1.send("iv/0/000000/0001", "b").unwrap();
    a0.finish().unwrap();
    a1.finish().unwrap();
    assert_eq!(wait_for(&i, 2).len(), 2);
    // Every idle connection is closed: the oldest for newer ones, the rest at the deadline.
    for s in &mut idle {
        assert!(closed_by_peer(s));
    }
    let why = wait_rejected(&i, 2 + SPARE_PENDING + 10);
    assert!(
        why.iter().any(|w| w.contains("closed for a newer one")),
        "{why:?}"
    );
    assert!(why.iter().any(|w| w.contains("no hello within")), "{why:?}");
    // A new connection of agent 0 replaces its older one.
    let _first = sender(&i, 0);
    let mut second = sender(&i, 0);
    second.send("iv/0/000001/0000", "c").unwrap();
    second.finish().unwrap();
    assert_eq!(wait_for(&i, 1).len(), 1);
    assert!(wait_rejected(&i, 1)[0].contains("agent 0: replaced by its newer connection"));
}

#[test]
fn a_flooding_agent_neither_starves_another_nor_grows_the_queue_past_its_bound() {
    let i = inbox(2);
    let mut flood = sender(&i, 0);
    flood
        .stream
        .tcp()
        .set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let body = "x".repeat(100 << 10);
    let flooder = std::thread::spawn(move || {
        // Until TCP holds it back: nobody takes what the inbox queues.
        for k in 0..400 {
            if flood.send(&format!("iv/0/{k:06}/0000"), &body).is_err() {
                return k;
            }
        }
        400
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut other = sender(&i, 1);
    other.send("iv/0/000000/0001", "b").unwrap();
    let sent = flooder.join().unwrap();
    assert!(sent < 400, "the flood was never held back");
    let queued = i.queued_bytes();
    assert!(
        queued <= MAX_QUEUED_PER_AGENT + MAX_FRAME + (64 << 10) + 100,
        "{queued} bytes queued"
    );
    let got = i.take();
    assert!(
        got.iter().any(|(k, _)| k == "iv/0/000000/0001"),
        "agent 1's report was not read while agent 0 flooded"
    );
    other.finish().unwrap();
}

#[test]
fn a_published_address_is_an_ip_literal_with_a_port() {
    assert!(parse_published_addr("10.0.0.5:7070").is_ok());
    assert!(parse_published_addr("[::1]:7070").is_ok());
    for bad in [
        "coordinator:7070",
        "10.0.0.5",
        "0.0.0.0:7070",
        "10.0.0.5:0",
        "/tmp/sock",
    ] {
        assert!(parse_published_addr(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_frame_parses_whole_or_not_at_all() {
    let mut f = vec![];
    encode_frame(&mut f, "iv/0/000000/0000", "v");
    for cut in 0..f.len() {
        assert_eq!(parse_frame(&f[..cut], 64), Ok(None), "{cut}");
    }
    assert_eq!(
        parse_frame(&f, 64),
        Ok(Some(("iv/0/000000/0000", "v", f.len())))
    );
    assert!(parse_frame(&f, 0).is_err());
    assert!(parse_frame(&[0, 0, 0, 0, 0, 0], 64).is_err());
    assert!(parse_frame(&[0, 1, 0, 0, 0, 0, 0xff], 64).is_err());
    assert_eq!(hello_agent("hello/2/0007"), Some(7));
    for bad in ["hello/2/7", "hello/2/00x7", "hello", "hello/2/00007"] {
        assert_eq!(hello_agent(bad), None, "{bad}");
    }
}

/// A self-signed certificate and its key (openssl, as the etcd TLS tests make theirs), and
/// the SHA-256 of the certificate's DER bytes as `openssl x509 -fingerprint -sha256` says.
fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
    let o = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=kvmeter coordinator"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    // "sha256 Fingerprint=AB:CD:…"
    let text = String::from_utf8(o.stdout).unwrap();
    let pin = text.trim().rsplit('=').next().unwrap().replace(':', "");
    (cert, key, pin.to_ascii_lowercase())
}

fn tls_inbox(cert: &std::path::Path, key: &std::path::Path) -> Inbox {
    let tls = ServerTls::load(cert, key).unwrap();
    Inbox::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some(tls),
        seal(),
        PREFIX.into(),
        2,
        agent_of,
    )
    .unwrap()
}

#[test]
fn in_tls_reports_arrive_and_nothing_on_the_path_reads_them() {
    let d = tempfile::tempdir().unwrap();
    let (cert, key, pin) = self_signed(d.path());
    assert_eq!(ServerTls::load(&cert, &key).unwrap().fingerprint, pin);
    let i = tls_inbox(&cert, &key);
    let (via, seen) = recording_proxy(i.addr());
    let mut s = Sender::connect(&via.to_string(), Some(&pin), seal(), PREFIX.into(), 1).unwrap();
    for k in 0..20 {
        s.send(&format!("iv/0/{k:06}/0001"), &format!("report body {k}"))
            .unwrap();
    }
    s.send("done/0/0001", "{}").unwrap();
    s.finish().unwrap();
    let got = wait_for(&i, 21);
    assert_eq!(got.len(), 21);
    assert_eq!(got[7], ("iv/0/000007/0001".into(), "report body 7".into()));
    assert!(i.take_rejected().is_empty());
    let captured = seen.lock().unwrap().clone();
    // A TLS handshake record (0x16) opens what the agent sent; no key or body shows.
    assert_eq!(captured[0], 0x16);
    let text = String::from_utf8_lossy(&captured);
    for plain in ["hello/2/", "iv/0/", "report body", "done/0/"] {
        assert!(!text.contains(plain), "{plain} went in the clear");
    }
}

#[test]
fn an_agent_trusts_the_pinned_certificate_alone_and_never_speaks_plain_to_it() {
    let d = tempfile::tempdir().unwrap();
    let (cert, key, pin) = self_signed(d.path());
    let i = tls_inbox(&cert, &key);
    let mut wrong = pin.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    let e = Sender::connect(
        &i.addr().to_string(),
        Some(&wrong),
        seal(),
        PREFIX.into(),
        0,
    )
    .err()
    .expect("a certificate other than the pinned one");
    assert!(
        e.to_string().contains(&format!("the plan pins {wrong}")),
        "{e}"
    );
    // A TLS agent against a plain coordinator: the challenge in the clear is not TLS.
    let plain = inbox(1);
    assert!(Sender::connect(
        &plain.addr().to_string(),
        Some(&pin),
        seal(),
        PREFIX.into(),
        0
    )
    .is_err());
    // A plain client gets nothing from the TLS coordinator (it waits for a ClientHello).
    let mut raw = TcpStream::connect(i.addr()).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut b = [0u8; 64];
    assert!(
        !matches!(raw.read(&mut b), Ok(n) if n > 0),
        "the challenge went in the clear"
    );
    // The right pin still works after all that.
    let mut s =
        Sender::connect(&i.addr().to_string(), Some(&pin), seal(), PREFIX.into(), 0).unwrap();
    s.send("done/0/0000", "{}").unwrap();
    s.finish().unwrap();
    assert_eq!(wait_for(&i, 1).len(), 1);
}

#[test]
fn tls_flags_that_do_not_load_say_which_file() {
    let d = tempfile::tempdir().unwrap();
    let (cert, key, _) = self_signed(d.path());
    let junk = d.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let e = ServerTls::load(&junk, &key).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "--reports-tls-cert {}: no PEM certificate",
            junk.display()
        )),
        "{e}"
    );
    let e = ServerTls::load(&cert, &junk).unwrap_err();
    assert!(
        e.starts_with(&format!("--reports-tls-key {}:", junk.display())),
        "{e}"
    );
    let d2 = tempfile::tempdir().unwrap();
    let (_, other_key, _) = self_signed(d2.path());
    let e = ServerTls::load(&cert, &other_key).unwrap_err();
    assert!(e.starts_with("--reports-tls-cert"), "{e}");
}
