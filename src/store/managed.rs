//! Managed servers: kvmeter starts the server binary itself (Debian's memcached,
//! redis-server, etcd) on free loopback ports, waits until it answers, keeps its output in the
//! run directory, hands its pid to telemetry, and stops it at the end — also on Ctrl-C, on a
//! kvmeter error (Drop) and, through PR_SET_PDEATHSIG, when kvmeter itself is killed. A
//! cluster (`cluster.rs`) is a set of these; the fault schedule kills, pauses and restarts them
//! through the same handle.
//!
//! The server runs in its own process group so a terminal's Ctrl-C reaches kvmeter only:
//! kvmeter then ends the phase, writes its results, and stops the server (SIGTERM, then
//! SIGKILL after a grace period).
//!
//! Every server is forked by one long-lived thread (`keeper`): PR_SET_PDEATHSIG fires when the
//! *thread* that forked a child ends, so a member restarted by the fault thread would otherwise
//! be killed when that thread finished. The death signal is SIGKILL: a member paused by a
//! fault (SIGSTOP) would never act on SIGTERM.

use super::{ServerSpec, StoreOptions};
use crate::error::UsageError;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Managed {
    child: Option<Child>,
    pub name: &'static str,
    pub addr: String,
    pub pid: u32,
    pub version: String,
    pub log: PathBuf,
    /// The binary and its arguments (a restart runs exactly this again).
    pub command: Vec<String>,
    /// CPU seconds of earlier lives of this server (before a kill or restart).
    cpu_before: f64,
    /// Paused by SIGSTOP (a fault) and not yet continued.
    pub paused: bool,
    /// Times it was started.
    pub lives: u32,
    /// CPUs it is pinned to (`--store-opt cpus=`); empty: not pinned.
    pub cpus: Vec<usize>,
    /// The pid of its current life, 0 while none runs: shared with telemetry, which follows a
    /// restarted server to its new process (`pid` above keeps the last life's, for the manifest).
    live_pid: Arc<AtomicU32>,
}
/// The binary on PATH (and /usr/sbin, where some packages put daemons).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// The installed binary's version line ("memcached 1.6.18"), or why there is none.
pub fn binary_version(name: &str, args: &[&str]) -> String {
    let Some(bin) = find_binary(name) else {
        return "not installed".into();
    };
    match Command::new(bin).args(args).stdin(Stdio::null()).output() {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            let line = text.lines().next().unwrap_or("").trim();
            // "Redis server v=7.0.15 sha=…" → "7.0.15"; "etcd Version: 3.4.23" → "3.4.23".
            let v = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .or_else(|| line.rsplit(' ').next())
                .unwrap_or(line);
            v.to_string()
        }
        Err(e) => format!("unknown ({e})"),
    }
}

/// Free loopback ports (bound, read, released; the server binds them next).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let ls: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    ls.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The last `n` lines of a file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
    let mut s = String::new();
    let _ = f.read_to_string(&mut s);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Forks `cmd` on the keeper thread (see the module header).
fn spawn_kept(cmd: Command) -> std::io::Result<Child> {
    use std::sync::mpsc;
    type Job = (Command, mpsc::Sender<std::io::Result<Child>>);
    static KEEPER: std::sync::OnceLock<std::sync::Mutex<mpsc::Sender<Job>>> =
        std::sync::OnceLock::new();
    let tx = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("kvm-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn the keeper thread");
        std::sync::Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the keeper thread has ended"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the keeper thread has ended"))?
}

/// Runs `binary args` with output appended to (or truncating) `log`, in its own process group,
/// killed when kvmeter dies.
fn launch(
    binary: &str,
    args: &[String],
    log: &Path,
    append: bool,
    cpus: &[usize],
) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(log)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(binary);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    // The CPU mask is built before the fork: nothing is allocated in the child.
    // SAFETY: cpu_set_t is plain data; zeroed is its empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET bounds-checks against the set's size.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    let pin = !cpus.is_empty();
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if pin && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    spawn_kept(cmd).map_err(|e| anyhow::anyhow!("cannot start {binary}: {e}"))
}

/// CPU seconds (user + system) a running process has used, from /proc/PID/stat.
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) / hz)
}

impl Managed {
    /// Starts the server with its files under `dir` and its output in `log`.
    pub fn start(
        name: &'static str,
        spec: &ServerSpec,
        opts: &StoreOptions,
        dir: &Path,
        log: &Path,
        timeout: Duration,
    ) -> anyhow::Result<Managed> {
        let binary = binary_for(name, spec)?;
        let mut last_err = String::new();
        // A port taken between our probe and the server's bind: try fresh ports.
        for _attempt in 0..3 {
            let ports = free_ports(spec.ports)?;
            let args = (spec.args)(opts, &ports, dir);
            let addr = format!("127.0.0.1:{}", ports[0]);
            let mut m = Managed::spawn(name, &binary, args, addr, log, &cpus_of(opts))?;
            let mut ping_opts = opts.clone();
            ping_opts.set("addr", &m.addr);
            match m.wait_ready(|a| (spec.ping)(&ping_opts, a), timeout) {
                Ok(()) => return Ok(m),
                Err(e) => last_err = format!("{e:#}"),
            }
            if !last_err.contains("in use") {
                break;
            }
        }
        anyhow::bail!("{last_err}")
    }

    /// Starts `binary args` (output to `log`) without waiting for it to answer.
    pub fn spawn(
        name: &'static str,
        binary: &Path,
        args: Vec<String>,
        addr: String,
        log: &Path,
        cpus: &[usize],
    ) -> anyhow::Result<Managed> {
        let bin = binary.display().to_string();
        let child = launch(&bin, &args, log, false, cpus)?;
        let mut command = vec![bin];
        command.extend(args);
        Ok(Managed {
            live_pid: Arc::new(AtomicU32::new(child.id())),
            pid: child.id(),
            child: Some(child),
            name,
            addr,
            version: String::new(),
            log: log.to_path_buf(),
            command,
            cpu_before: 0.0,
            paused: false,
            lives: 1,
            cpus: cpus.to_vec(),
        })
    }

    /// Waits until `ping` answers (it returns the server's version), the server exits, or
    /// `timeout` passes; on failure the server is stopped and the error has its last output.
    pub fn wait_ready(
        &mut self,
        ping: impl Fn(&str) -> Result<String, String>,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let binary = self.command[0].rsplit('/').next().unwrap_or("").to_string();
        loop {
            if let Some(status) = self.exited() {
                anyhow::bail!(
                    "{binary} exited ({status}) before answering; its last output:\n{}",
                    tail(&self.log, 15)
                );
            }
            match ping(&self.addr) {
                Ok(v) => {
                    self.version = v;
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => {
                    let _ = self.stop();
                    anyhow::bail!(
                        "{binary} did not answer at {} within {:.0} s: {e}; its last output:\n{}",
                        self.addr,
                        timeout.as_secs_f64(),
                        tail(&self.log, 15)
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The exit status if the server has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Whether the server process is alive (paused counts as alive).
    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    pub fn last_lines(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// The pid of its current life (0 while it is not running), kept current across kills
    /// and restarts: what telemetry reads each sample.
    pub fn live_pid(&self) -> Arc<AtomicU32> {
        self.live_pid.clone()
    }

    /// CPU seconds used by every life of this server so far.
    pub fn cpu_seconds(&self) -> f64 {
        let now = self
            .child
            .as_ref()
            .and_then(|c| cpu_seconds_of(c.id()))
            .unwrap_or(0.0);
        self.cpu_before + now
    }

    /// Sends `sig` to the server (only ever to a process kvmeter started and has not reaped).
    fn signal(&self, sig: i32) -> anyhow::Result<()> {
        let Some(c) = self.child.as_ref() else {
            anyhow::bail!("{} is not running", self.name);
        };
        // SAFETY: signalling our own, unreaped child.
        if unsafe { libc::kill(c.id() as i32, sig) } != 0 {
            anyhow::bail!("kill({}): {}", c.id(), std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// SIGKILL, then reaps it (a crash: no shutdown, no flush).
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.cpu_before = self.cpu_seconds();
        self.signal(libc::SIGKILL)?;
        self.live_pid.store(0, Ordering::Relaxed);
        if let Some(mut c) = self.child.take() {
            c.wait()?;
        }
        self.paused = false;
        Ok(())
    }

    /// SIGSTOP: the process stays, answers nothing, holds its connections.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        self.signal(libc::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after `pause`.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        self.signal(libc::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Starts the same command again (same ports, same data directory), its output appended
    /// to the same log; the caller waits for it to answer. A running server is killed first.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.running() {
            self.kill()?;
        }
        let child = launch(
            &self.command[0],
            &self.command[1..],
            &self.log,
            true,
            &self.cpus,
        )?;
        self.pid = child.id();
        self.live_pid.store(child.id(), Ordering::Relaxed);
        self.child = Some(child);
        self.lives += 1;
        Ok(())
    }

    /// SIGTERM, up to 10 s to exit, then SIGKILL. Returns how it ended.
    pub fn stop(&mut self) -> anyhow::Result<String> {
        let cpu = self.cpu_seconds();
        let Some(mut child) = self.child.take() else {
            return Ok("already stopped".into());
        };
        self.live_pid.store(0, Ordering::Relaxed);
        if let Some(s) = child.try_wait()? {
            return Ok(format!("had already exited ({s})"));
        }
        self.cpu_before = cpu;
        // SAFETY: signalling our own child; a paused one must be continued to act on SIGTERM.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
            libc::kill(child.id() as i32, libc::SIGCONT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(s) = child.try_wait()? {
                return Ok(format!("stopped ({s})"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill()?;
        let s = child.wait()?;
        Ok(format!(
            "killed after 10 s without exiting on SIGTERM ({s})"
        ))
    }
}

/// The CPUs `--store-opt cpus=` pins managed servers to (empty: not pinned).
pub fn cpus_of(opts: &StoreOptions) -> Vec<usize> {
    crate::values::parse_cpus(opts.str("cpus")).unwrap_or_default()
}

/// Checks `--store-opt cpus=` (a list such as 1 or 0-1 or 0/2, each below the CPU count).
pub fn check_cpus(opts: &StoreOptions) -> Result<(), UsageError> {
    let v = opts.str("cpus");
    if v.is_empty() {
        return Ok(());
    }
    let n = crate::machine::cpu_count();
    let cpus = crate::values::parse_cpus(v)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            UsageError::new(format!(
                "--store-opt cpus={v}: expected CPU numbers such as 1, 0-1 or 0/2"
            ))
        })?;
    match cpus.iter().find(|&&x| x >= n) {
        Some(bad) => Err(UsageError::new(format!(
            "--store-opt cpus={v}: CPU {bad} does not exist here (CPUs 0 to {})",
            n - 1
        ))),
        None => Ok(()),
    }
}

/// The installed server binary, or a usage error saying which package has it.
pub fn binary_for(name: &str, spec: &ServerSpec) -> Result<PathBuf, UsageError> {
    find_binary(spec.binary).ok_or_else(|| {
        UsageError::new(format!(
            "--store {name}: '{}' is not installed (install Debian's {} — scripts/setup.sh does), or run a server yourself and pass --store-opt addr=host:port",
            spec.binary, spec.package
        ))
    })
}

impl Drop for Managed {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
