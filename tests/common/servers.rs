//! Real servers on loopback for the tests: `Launch` starts memcached and Redis (plain, UDP,
//! TLS) alike everywhere; etcd (one member or a Raft group), a coordinator with its agents;
//! the helpers that read etcd, HDR logs and memcached's command log independently of
//! kvmeter's code.

// Where every test found them before common/etcd.rs; not every test binary uses each.
#[allow(unused_imports)]
pub use super::etcd::{etcd, etcd_post, etcd_post_one, etcd_with, keys_left};
pub use super::Proc;
use super::{bin, free_port};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn wait_port(port: u16) {
    let t = Instant::now();
    while !listening(port) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "nothing on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a server listens on loopback `port`. A connect to a port in the ephemeral range
/// that nothing listens on can succeed by connecting the socket to itself (TCP simultaneous
/// open, when the kernel picks that very port as the source); that socket then also holds
/// the port, so the server about to bind it fails. Such a connection is not an answer.
pub fn listening(port: u16) -> bool {
    match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(s) => s.local_addr().ok() != s.peer_addr().ok(),
        Err(_) => false,
    }
}

/// Starts a server on a free loopback port (`command(port)` builds its command line) and
/// waits until it listens. Between `free_port` releasing a port and the server binding it,
/// another process can take it: a server that exits before it listens, or a port whose
/// listener is another process's (another test's server that won the race), is started
/// again on another port (five tries).
pub fn spawn_listening(mut command: impl FnMut(u16) -> Command) -> (Proc, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut c = Proc(command(port).spawn().expect("the server is installed"));
        let t = Instant::now();
        loop {
            if c.0.try_wait().ok().flatten().is_some() {
                break;
            }
            if listening(port) {
                if listener_is(c.0.id(), port) == Some(false) {
                    break;
                }
                // Still alive and listening a moment later: a server that exits right after
                // it listened (it lost a later step of its start) is started again too.
                std::thread::sleep(Duration::from_millis(150));
                if c.0.try_wait().ok().flatten().is_none()
                    && listener_is(c.0.id(), port) != Some(false)
                {
                    return (c, port);
                }
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "nothing on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("the server exited before listening, five times (ports taken?)");
}

/// Whether process `pid` holds a socket listening on `port` (/proc/net/tcp and tcp6: the
/// listeners' inodes; /proc/PID/fd: the process's sockets); None where the tables cannot be
/// read. A connection to 127.0.0.1:`port` can also be answered by another process listening on
/// every address (0.0.0.0, or [::] with IPv4 mapped), which the loopback entry alone would not
/// show: only a listener of `pid`'s own counts.
pub fn listener_is(pid: u32, port: u16) -> Option<bool> {
    let mut inodes = vec![];
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let on_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if on_port && f.get(3) == Some(&"0A") {
                inodes.extend(f.get(9).map(|i| format!("socket:[{i}]")));
            }
        }
    }
    if !read_any {
        return None;
    }
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    }))
}

/// One way to start memcached or redis-server on loopback for a test, so that every test
/// starts them alike (a free port, waiting until it is this server that listens, killed when
/// the test ends). `Launch::memcached().args(["-m", "8"]).start()`.
pub struct Launch {
    program: &'static str,
    args: Vec<String>,
    port_flags: Vec<&'static str>,
    log: Option<PathBuf>,
}

impl Launch {
    /// memcached: two worker threads, no UDP, 1,024 connections unless `-c` follows.
    pub fn memcached() -> Self {
        Launch {
            program: "memcached",
            args: s(&["-u", "nobody", "-l", "127.0.0.1", "-t", "2", "-U", "0"]),
            port_flags: vec!["-p"],
            log: None,
        }
    }

    /// memcached answering UDP on the same port number as TCP.
    pub fn memcached_udp() -> Self {
        Launch {
            args: s(&["-u", "nobody", "-l", "127.0.0.1", "-t", "2"]),
            port_flags: vec!["-p", "-U"],
            ..Launch::memcached()
        }
    }

    /// redis-server without persistence, its files in `dir`.
    pub fn redis(dir: &Path) -> Self {
        let mut args = s(&["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        args.extend(["--dir".to_string(), dir.to_str().unwrap().to_string()]);
        Launch {
            program: "redis-server",
            args,
            port_flags: vec!["--port"],
            log: None,
        }
    }

    /// Redis answering TLS only (its plain port closed), with these files.
    pub fn redis_tls(dir: &Path, cert: &str, key: &str, ca: &str) -> Self {
        let r = Launch::redis(dir).args(&["--port", "0", "--tls-auth-clients", "no"]);
        Launch {
            port_flags: vec!["--tls-port"],
            ..r.args(&["--tls-cert-file", cert, "--tls-key-file", key])
                .args(&["--tls-ca-cert-file", ca])
        }
    }

    pub fn args(mut self, more: &[&str]) -> Self {
        self.args.extend(more.iter().map(|a| a.to_string()));
        self
    }

    /// The server's stderr into this file (otherwise discarded).
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_path_buf());
        self
    }

    pub fn start(self) -> (Proc, u16) {
        let log = self.log.as_ref().map(|p| std::fs::File::create(p).unwrap());
        spawn_listening(|port| self.command(port, log.as_ref()))
    }

    /// Starts it on `port` (a server the test restarts where it was) and waits until the
    /// port answers.
    pub fn start_at(self, port: u16) -> Proc {
        let log = self.log.as_ref().map(|p| std::fs::File::create(p).unwrap());
        let p = Proc(
            self.command(port, log.as_ref())
                .spawn()
                .expect("the server is installed"),
        );
        wait_port(port);
        p
    }

    fn command(&self, port: u16, log: Option<&std::fs::File>) -> Command {
        let mut c = Command::new(self.program);
        c.args(&self.args);
        for flag in &self.port_flags {
            c.args([flag.to_string(), port.to_string()]);
        }
        c.stdout(Stdio::null());
        match log {
            Some(f) => c.stderr(f.try_clone().unwrap()),
            None => c.stderr(Stdio::null()),
        };
        c
    }
}

/// memcached on loopback with one worker thread; `-vv` logs every command it serves.
pub fn memcached(dir: &Path, name: &str, verbose: bool) -> (Proc, u16) {
    let m = Launch::memcached()
        .args(&["-t", "1"])
        .log(&dir.join(format!("{name}.log")));
    match verbose {
        true => m.args(&["-vv"]).start(),
        false => m.start(),
    }
}

pub fn redis(dir: &Path) -> (Proc, u16) {
    Launch::redis(dir).start()
}

pub fn spawn(args: &[String], log: &Path) -> Child {
    let f = std::fs::File::create(log).unwrap();
    Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env("KVMETER_PLAN_KEY", super::TEST_PLAN_KEY)
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap()
}

pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub fn wait_exit(c: &mut Child, limit: Duration) -> i32 {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if t.elapsed() > limit {
            let _ = c.kill();
            panic!("process did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn counts(p: &Value) -> BTreeMap<String, u64> {
    p["ops"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap()))
        .collect()
}

/// Every histogram of an HDR log, added.
pub fn hlog_sum(path: &Path) -> Histogram<u64> {
    use base64::Engine;
    let mut sum = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        if line.starts_with('#') || line.starts_with('"') {
            continue;
        }
        let b64 = line.rsplit(',').next().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(bytes))
            .unwrap();
        sum.add(&h).unwrap();
    }
    sum
}

/// Each client connection's commands (`get KEY`, `set KEY`) from memcached's `-vv` log, for
/// connections that read (the run phase's), in arrival order per connection.
pub fn run_phase_streams(log: &Path) -> Vec<Vec<String>> {
    let mut open: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut done = vec![];
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let Some(rest) = line.strip_prefix('<') else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(fd), Some(cmd)) = (parts.next(), parts.next()) else {
            continue;
        };
        match cmd {
            "new" => {
                open.insert(fd.to_string(), vec![]);
            }
            "connection" => {
                if let Some(seq) = open.remove(fd) {
                    if seq.iter().any(|c| c.starts_with("get")) {
                        done.push(seq);
                    }
                }
            }
            "get" | "set" => {
                let key = parts.next().unwrap_or("");
                if let Some(seq) = open.get_mut(fd) {
                    seq.push(format!("{cmd} {key}"));
                }
            }
            _ => {}
        }
    }
    done.sort();
    done
}

pub struct Dist {
    pub dir: tempfile::TempDir,
    pub coord: Child,
    pub agents: Vec<Child>,
}

impl Drop for Dist {
    fn drop(&mut self) {
        for c in self
            .agents
            .iter_mut()
            .chain(std::iter::once(&mut self.coord))
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Dist {
    /// A coordinator for `n` agents with `run` flags, then the agents (T threads each).
    pub fn start(url: &str, job: &str, n: usize, coord_flags: &[&str], run: &[String]) -> Dist {
        Dist::start_with(url, job, n, coord_flags, run, |_| vec![])
    }

    /// As `start`, agent `i` with `agent_flags(i)` besides.
    pub fn start_with(
        url: &str,
        job: &str,
        n: usize,
        coord_flags: &[&str],
        run: &[String],
        agent_flags: impl Fn(usize) -> Vec<String>,
    ) -> Dist {
        let dir = tempfile::tempdir().unwrap();
        let mut args = s(&[
            "dist",
            "run",
            "--coord",
            url,
            "--job",
            job,
            "--agents",
            &n.to_string(),
            "--out",
            dir.path().join("merged").to_str().unwrap(),
            "--register-timeout",
            "30s",
        ]);
        args.extend(s(coord_flags));
        args.extend(run.iter().cloned());
        let coord = spawn(&args, &dir.path().join("coord.log"));
        let agents = (0..n)
            .map(|i| {
                let mut a = s(&[
                    "agent",
                    "--coord",
                    url,
                    "--job",
                    job,
                    "--index",
                    &i.to_string(),
                    "--out",
                    dir.path().join(format!("agent{i}")).to_str().unwrap(),
                ]);
                a.extend(agent_flags(i));
                spawn(&a, &dir.path().join(format!("agent{i}.log")))
            })
            .collect();
        Dist { dir, coord, agents }
    }

    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    pub fn log(&self, p: &str) -> String {
        std::fs::read_to_string(self.path(p)).unwrap_or_default()
    }

    /// Waits for everything; returns the coordinator's exit code.
    pub fn finish(&mut self) -> i32 {
        let code = wait_exit(&mut self.coord, Duration::from_secs(90));
        for a in &mut self.agents {
            wait_exit(a, Duration::from_secs(30));
        }
        code
    }
}

/// Polls `dir/intervals.csv` until a row of `phase` is there (its first interval is written):
/// a test that acts on a running phase waits for this, at most 60 s.
pub fn wait_for_phase(dir: &Path, phase: &str) {
    let t = std::time::Instant::now();
    loop {
        let csv = std::fs::read_to_string(dir.join("intervals.csv")).unwrap_or_default();
        if csv.lines().any(|l| l.starts_with(&format!("{phase},"))) {
            return;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "no {phase} interval"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// memcached's `stats` counters.
pub fn mc_stats(port: u16) -> std::collections::HashMap<String, u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut out = Vec::new();
    let mut b = [0u8; 4096];
    while !out.ends_with(b"END\r\n") {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0);
        out.extend_from_slice(&b[..n]);
    }
    String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            (f.next()? == "STAT").then_some(())?;
            Some((f.next()?.to_string(), f.next()?.parse().ok()?))
        })
        .collect()
}

/// A CA and a server certificate for 127.0.0.1, made with the openssl command line.
pub fn tls_files(dir: &Path) -> (String, String, String) {
    let run = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl is installed");
        assert!(
            o.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=kvmeter test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let p = |f: &str| dir.join(f).display().to_string();
    (p("ca.pem"), p("server.pem"), p("server.key"))
}
