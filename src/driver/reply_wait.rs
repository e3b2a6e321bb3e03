//! `--store-opt reply_wait=auto` decided once per run: a network client polls for its replies
//! (`spin`) when the server shares kvmeter's CPUs, and sleeps in the kernel at once (`block`)
//! otherwise. `store::wait` says why, with the measurements; this module only looks at where
//! the server runs, and the manifest's store options then record `spin` or `block`.

use crate::store::StoreOptions;

/// Replaces `reply_wait=auto` in `opts` by `spin` or `block`; returns why, for a note. Stores
/// that do not declare the option (embedded ones, etcd) are left as they are (None).
pub(super) fn resolve(opts: &mut StoreOptions, managed_pid: Option<u32>) -> Option<String> {
    if opts.str("reply_wait") != "auto" {
        return None;
    }
    let (choice, why) = decide(opts.str("addr"), managed_pid);
    opts.set("reply_wait", choice);
    Some(format!("reply_wait: {choice} ({why})"))
}

fn decide(addr: &str, managed_pid: Option<u32>) -> (&'static str, String) {
    let pid = match managed_pid {
        Some(p) => p,
        None => match local_port(addr) {
            Err(_) => return ("block", "the server is not on this host".into()),
            Ok(port) => match crate::telemetry::procfs::listening_pid(
                &crate::telemetry::procfs::Root::system(),
                port,
            ) {
                Ok(p) => p,
                // Another user's server: its affinity is unknown; a server on this host
                // usually may run on every CPU.
                Err(why) => {
                    return (
                        "spin",
                        format!("the server is on this host; its CPUs are unknown: {why}"),
                    )
                }
            },
        },
    };
    match (affinity(0), affinity(pid)) {
        (Ok(ours), Ok(theirs)) => {
            let shared: Vec<usize> = ours
                .iter()
                .filter(|c| theirs.contains(c))
                .copied()
                .collect();
            if shared.is_empty() {
                (
                    "block",
                    format!("the server (pid {pid}) runs on other CPUs than kvmeter"),
                )
            } else {
                (
                    "spin",
                    format!(
                        "the server (pid {pid}) shares {} of kvmeter's {} CPUs",
                        shared.len(),
                        ours.len()
                    ),
                )
            }
        }
        (Err(why), _) | (_, Err(why)) => (
            "spin",
            format!("the server (pid {pid}) is on this host; its CPUs are unknown: {why}"),
        ),
    }
}

/// The port of `addr` (host:port, [v6]:port, or an http(s):// URL) when its host is this one
/// (loopback, `localhost` or the unspecified address).
pub(super) fn local_port(addr: &str) -> Result<u16, String> {
    let a = addr.split("://").last().unwrap_or(addr);
    let a = a.split('/').next().unwrap_or(a);
    let a = a.split(',').next().unwrap_or(a);
    let (host, port) = a
        .rsplit_once(':')
        .ok_or_else(|| "no port in it".to_string())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let local = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified());
    if !local {
        return Err("not on this host's loopback (only a server here can be sampled)".into());
    }
    port.parse()
        .map_err(|_| format!("port '{port}' is not a number"))
}

/// The CPUs a process may run on (`sched_getaffinity`; pid 0: this process).
fn affinity(pid: u32) -> Result<Vec<usize>, String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::sched_getaffinity(
            pid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if r != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_server_blocks_and_our_own_cpus_are_shared() {
        assert_eq!(decide("192.0.2.1:11211", None).0, "block");
        // This process as the "server": it shares every CPU it has with itself.
        let (c, why) = decide("", Some(std::process::id()));
        assert_eq!(c, "spin", "{why}");
        let n = affinity(0).unwrap().len();
        assert!(n >= 1);
        assert!(why.contains(&format!("of kvmeter's {n} CPUs")), "{why}");
    }
}
