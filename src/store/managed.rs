//! Managed servers: kvmeter starts the server binary itself (Debian's memcached,
//! redis-server, etcd) on free loopback ports, waits until it answers, keeps its output in the
//! run directory, hands its pid to telemetry, and stops it at the end — also on Ctrl-C, on a
//! kvmeter error (Drop) and, through PR_SET_PDEATHSIG, when kvmeter itself is killed.
//!
//! The server runs in its own process group so a terminal's Ctrl-C reaches kvmeter only:
//! kvmeter then ends the phase, writes its results, and stops the server (SIGTERM, then
//! SIGKILL after a grace period).

use super::{ServerSpec, StoreOptions};
use crate::error::UsageError;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Managed {
    child: Option<Child>,
    pub name: &'static str,
    pub addr: String,
    pub pid: u32,
    pub version: String,
    pub log: PathBuf,
    pub command: Vec<String>,
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
        let binary = find_binary(spec.binary).ok_or_else(|| {
            UsageError::new(format!(
                "--store {name}: '{}' is not installed (install Debian's {} — scripts/setup.sh does), or run a server yourself and pass --store-opt addr=host:port",
                spec.binary, spec.package
            ))
        })?;
        let mut last_err = String::new();
        // A port taken between our probe and the server's bind: try fresh ports.
        for _attempt in 0..3 {
            let ports = free_ports(spec.ports)?;
            let args = (spec.args)(opts, &ports, dir);
            let out = File::create(log)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", log.display()))?;
            let err = out.try_clone()?;
            let mut cmd = Command::new(&binary);
            cmd.args(&args)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .process_group(0);
            // SAFETY: async-signal-safe calls only, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = cmd
                .spawn()
                .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", binary.display()))?;
            let pid = child.id();
            let addr = format!("127.0.0.1:{}", ports[0]);
            let mut command = vec![binary.display().to_string()];
            command.extend(args);
            let mut m = Managed {
                child: Some(child),
                name,
                addr,
                pid,
                version: String::new(),
                log: log.to_path_buf(),
                command,
            };
            let mut ping_opts = opts.clone();
            ping_opts.set("addr", &m.addr);
            let deadline = Instant::now() + timeout;
            loop {
                if let Some(status) = m.exited() {
                    last_err = format!(
                        "{} exited ({status}) before answering; its last output:\n{}",
                        spec.binary,
                        tail(log, 15)
                    );
                    break;
                }
                match (spec.ping)(&ping_opts, &m.addr) {
                    Ok(v) => {
                        m.version = v;
                        return Ok(m);
                    }
                    Err(e) if Instant::now() >= deadline => {
                        let _ = m.stop();
                        anyhow::bail!(
                            "{} did not answer at {} within {:.0} s: {e}; its last output:\n{}",
                            spec.binary,
                            m.addr,
                            timeout.as_secs_f64(),
                            tail(log, 15)
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            let already_in_use = last_err.contains("in use");
            drop(m);
            if !already_in_use {
                break;
            }
        }
        anyhow::bail!("{last_err}")
    }

    /// The exit status if the server has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn last_lines(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// SIGTERM, up to 10 s to exit, then SIGKILL. Returns how it ended.
    pub fn stop(&mut self) -> anyhow::Result<String> {
        let Some(mut child) = self.child.take() else {
            return Ok("already stopped".into());
        };
        if let Some(s) = child.try_wait()? {
            return Ok(format!("had already exited ({s})"));
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
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

impl Drop for Managed {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
