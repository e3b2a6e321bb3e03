//! Fuzz targets over the clients' reply parsers (RESP, memcached text and binary, the etcd
//! HTTP gateway), through the public store API: a listener on 127.0.0.1 in this process
//! answers every request with the fuzz input, and a fresh session runs a read, a scan and an
//! update against it. Slower than a direct call, but the route stays the same while the
//! parsers behind `store::net::Conn` change, and it checks what a user sees: no panic, no
//! hang past the operation's deadline, memory bounded.
//!
//! Only the plain single-server modes are used: Cluster and Sentinel follow addresses from
//! replies (F9), and a fuzzed reply must never make kvmeter connect outside 127.0.0.1.

use super::engine::Target;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "resp",
            seeds: seeds_resp,
            dict: RESP_DICT,
            run: resp,
        },
        Target {
            name: "memcached_text",
            seeds: seeds_mc_text,
            dict: MC_TEXT_DICT,
            run: mc_text,
        },
        Target {
            name: "memcached_binary",
            seeds: seeds_mc_binary,
            dict: &[],
            run: mc_binary,
        },
        Target {
            name: "etcd",
            seeds: seeds_etcd,
            dict: ETCD_DICT,
            run: etcd,
        },
    ]
}

/// A loopback server answering each request with `reply`, closing a connection that sends
/// nothing for 20 ms (so a reply the client is still waiting on ends in EOF, quickly).
struct Fake {
    port: u16,
    reply: Arc<Mutex<Vec<u8>>>,
}

impl Fake {
    fn start() -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let reply = Arc::new(Mutex::new(Vec::new()));
        let r = reply.clone();
        std::thread::Builder::new()
            .name("fuzz-fake-server".into())
            .spawn(move || {
                for s in l.incoming().flatten() {
                    let r = r.clone();
                    // One thread per connection: a session may hold several.
                    std::thread::spawn(move || serve(s, &r));
                }
            })
            .unwrap();
        Fake { port, reply }
    }
}

fn serve(mut s: std::net::TcpStream, reply: &Mutex<Vec<u8>>) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; 4096];
    // At most 16 requests per connection: a client looping on its own is bounded too.
    for _ in 0..16 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let r = reply.lock().unwrap().clone();
                if s.write_all(&r).is_err() {
                    return;
                }
            }
        }
    }
}

/// The store `kind` opened against this target's fake server.
struct Client {
    fake: Fake,
    store: Box<dyn kvmeter::store::Store>,
}

fn client(kind: &str, extra: &[&str]) -> Client {
    let fake = Fake::start();
    let spec = kvmeter::store::find(kind).unwrap();
    let mut given = vec![
        format!("addr=127.0.0.1:{}", fake.port),
        "timeout_ms=200".to_string(),
    ];
    given.extend(extra.iter().map(|s| s.to_string()));
    let opts = kvmeter::store::StoreOptions::parse(kind, spec.options, &given).unwrap();
    let dir = super::targets::scratch().join(format!("store-{kind}"));
    std::fs::create_dir_all(&dir).unwrap();
    let store = (spec.open)(&dir, &opts).unwrap();
    Client { fake, store }
}

/// One input: a session (which may itself send a request), then a read, a scan and an update,
/// every request answered with `input`. True when the read succeeded.
fn exercise(c: &Client, input: &[u8]) -> bool {
    use kvmeter::store::{Fields, Record, ScanOut};
    *c.fake.reply.lock().unwrap() = input.to_vec();
    let Ok(mut s) = c.store.session() else {
        return false;
    };
    let ok = s.read("usertable", b"user1", Fields::All).0.is_ok();
    let _ = s.read("usertable", b"user2", Fields::One(b"field0"));
    let mut out = ScanOut::default();
    let _ = s.scan("usertable", b"user1", 10, Fields::All, &mut out);
    let mut r = Record::new();
    r.push(b"field0", b"value");
    let _ = s.update("usertable", b"user1", &r);
    let _ = s.last_error();
    let _ = s.close();
    ok
}

macro_rules! reply_target {
    ($f:ident, $kind:expr, $extra:expr) => {
        fn $f(input: &[u8]) -> bool {
            static C: OnceLock<Client> = OnceLock::new();
            exercise(C.get_or_init(|| client($kind, $extra)), input)
        }
    };
}

reply_target!(resp, "redis", &[]);
reply_target!(mc_text, "memcached", &["protocol=text"]);
reply_target!(mc_binary, "memcached", &["protocol=binary"]);
reply_target!(etcd, "etcd", &[]);

fn strs(v: &[&str]) -> Vec<Vec<u8>> {
    v.iter().map(|s| s.as_bytes().to_vec()).collect()
}

const RESP_DICT: &[&str] = &[
    "+OK\r\n",
    "-ERR x\r\n",
    ":1\r\n",
    "$5\r\nhello\r\n",
    "$-1\r\n",
    "*2\r\n",
    "*-1\r\n",
    "*0\r\n",
    "%1\r\n",
    "_\r\n",
    "#t\r\n",
    ",1.5\r\n",
    "(123\r\n",
    "=5\r\ntxt:x\r\n",
    "\r\n",
    "$",
    "*",
    ":",
    "+",
    "-",
];

fn seeds_resp() -> Vec<Vec<u8>> {
    strs(&[
        "*4\r\n$6\r\nfield0\r\n$5\r\nvalue\r\n$6\r\nfield1\r\n$3\r\nabc\r\n",
        "*0\r\n",
        "$5\r\nvalue\r\n",
        "$-1\r\n",
        ":1\r\n",
        "+OK\r\n",
        "-ERR unknown command\r\n",
        "*2\r\n$1\r\n0\r\n*2\r\n$5\r\nuser1\r\n$5\r\nuser2\r\n",
        "*2\r\n*1\r\n$5\r\nuser1\r\n*0\r\n",
        "$9000000000000000000\r\n",
        "*9000000000000000000\r\n",
    ])
}

const MC_TEXT_DICT: &[&str] = &[
    "VALUE ",
    "END\r\n",
    "STORED\r\n",
    "NOT_STORED\r\n",
    "DELETED\r\n",
    "NOT_FOUND\r\n",
    "ERROR\r\n",
    "CLIENT_ERROR x\r\n",
    "SERVER_ERROR x\r\n",
    "VERSION 1.6\r\n",
    "\r\n",
    " ",
];

fn seeds_mc_text() -> Vec<Vec<u8>> {
    strs(&[
        "VALUE user1 0 5\r\nhello\r\nEND\r\n",
        "END\r\n",
        "STORED\r\n",
        "NOT_FOUND\r\n",
        "SERVER_ERROR out of memory\r\n",
        "VALUE user1 0 9999999999999999999\r\n",
        "VERSION 1.6.18\r\n",
    ])
}

/// A memcached binary response header (24 bytes) and body.
fn mc_bin(opcode: u8, status: u16, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let total = (extras.len() + key.len() + value.len()) as u32;
    let mut v = vec![0x81, opcode];
    v.extend((key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.push(0);
    v.extend(status.to_be_bytes());
    v.extend(total.to_be_bytes());
    v.extend([0u8; 4]); // opaque
    v.extend([0u8; 8]); // cas
    v.extend(extras);
    v.extend(key);
    v.extend(value);
    v
}

fn seeds_mc_binary() -> Vec<Vec<u8>> {
    vec![
        mc_bin(0x00, 0, &[0, 0, 0, 0], b"", b"hello"),
        mc_bin(0x0c, 0, &[0, 0, 0, 0], b"user1", b"hello"),
        mc_bin(0x00, 1, &[], b"", b"Not found"),
        mc_bin(0x01, 0, &[], b"", b""),
        mc_bin(0x0b, 0, &[], b"", b"1.6.18"),
        {
            let mut v = mc_bin(0x00, 0, &[0, 0, 0, 0], b"", b"");
            v[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
            v
        },
    ]
}

const ETCD_DICT: &[&str] = &[
    "HTTP/1.1 200 OK\r\n",
    "HTTP/1.1 404 Not Found\r\n",
    "Content-Length: ",
    "Transfer-Encoding: chunked\r\n",
    "Content-Type: application/json\r\n",
    "\r\n",
    "{\"kvs\":[",
    "{\"key\":\"",
    "\"value\":\"",
    "\"count\":\"",
    "\"header\":{}",
    "]}",
    "\"more\":true",
    "\"error\":\"",
    "\"code\":",
    "0\r\n\r\n",
];

fn seeds_etcd() -> Vec<Vec<u8>> {
    let http = |body: &str| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let mut v = strs(&[
        &http("{\"header\":{\"revision\":\"5\"},\"kvs\":[{\"key\":\"dXNlcnRhYmxlL3VzZXIx\",\"value\":\"eyJmaWVsZDAiOiJoZWxsbyJ9\",\"mod_revision\":\"5\"}],\"count\":\"1\"}"),
        &http("{\"header\":{\"revision\":\"5\"}}"),
        &http("{\"header\":{\"revision\":\"6\"},\"succeeded\":true}"),
        &http("{\"error\":\"etcdserver: request timed out\",\"code\":14}"),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999999\r\n\r\n",
    ]);
    v.push(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_vec());
    v
}
