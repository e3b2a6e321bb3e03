//! Facts about the machine and the data directory, recorded in every manifest so that a figure
//! can be traced to the hardware it came from (CPU, cores, memory, kernel, filesystem and block
//! device under the data, CPU affinity of the run).

use serde::Serialize;
use std::path::Path;

/// The CPUs this process can use (the affinity mask and cgroup quota included, as
/// `available_parallelism` reads them); 1 when unknown. The one place kvmeter asks: the
/// manifest's `logical_cpus`, `threads-per-cpu`, `$cpus` and the managed servers' `cpus=` check.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    pub logical_cpus: usize,
    /// CPUs this process may run on (pinning, taskset, cgroup cpusets).
    pub cpu_affinity: Vec<usize>,
    pub memory_bytes: u64,
    pub kernel: String,
    pub os: String,
    pub virtualization: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Placement {
    pub path: String,
    pub mount_point: String,
    pub filesystem: String,
    pub device: String,
    /// The whole disk under the device (partition and device-mapper resolved), if found.
    pub block_device: Option<String>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn machine() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| {
            l.starts_with("model name") || l.starts_with("Model") || l.starts_with("cpu model")
        })
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let hypervisor = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().any(|f| f == "hypervisor"))
        .unwrap_or(false);
    let memory_bytes = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or(0);
    let os = read("/etc/os-release")
        .lines()
        .find(|l| l.starts_with("PRETTY_NAME="))
        .map(|l| {
            l.trim_start_matches("PRETTY_NAME=")
                .trim_matches('"')
                .to_string()
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    Machine {
        hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
        cpu_model,
        logical_cpus: cpu_count(),
        cpu_affinity: affinity(),
        memory_bytes,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        os,
        virtualization: if hypervisor {
            "virtual machine (hypervisor flag set)".into()
        } else {
            "none detected".into()
        },
    }
}

fn affinity() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Where `path` lives: the longest matching mount in /proc/self/mountinfo.
pub fn placement(path: &Path) -> Placement {
    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mut best: Option<(String, String, String, String)> = None;
    for line in read("/proc/self/mountinfo").lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < sep + 3 || fields.len() < 5 {
            continue;
        }
        let mount = unescape_mount(fields[4]);
        let majmin = fields[2].to_string();
        if canon.starts_with(&mount)
            && best
                .as_ref()
                .map(|b| mount.len() >= b.0.len())
                .unwrap_or(true)
        {
            best = Some((
                mount,
                fields[sep + 1].to_string(),
                fields[sep + 2].to_string(),
                majmin,
            ));
        }
    }
    let (mount_point, filesystem, device, majmin) = best.unwrap_or_else(|| {
        (
            "/".into(),
            "unknown".into(),
            "unknown".into(),
            String::new(),
        )
    });
    Placement {
        path: canon.display().to_string(),
        mount_point,
        filesystem,
        device,
        block_device: whole_disk(&majmin),
    }
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Resolves a major:minor to its whole disk via sysfs (partition → parent; dm → slaves).
fn whole_disk(majmin: &str) -> Option<String> {
    if majmin.is_empty() {
        return None;
    }
    let link = std::fs::canonicalize(format!("/sys/dev/block/{majmin}")).ok()?;
    let name = link.file_name()?.to_str()?.to_string();
    if link.join("partition").exists() {
        return link.parent()?.file_name()?.to_str().map(String::from);
    }
    if let Ok(mut slaves) = std::fs::read_dir(link.join("slaves")) {
        if let Some(Ok(s)) = slaves.next() {
            return s.file_name().to_str().map(String::from);
        }
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_filled() {
        let m = machine();
        assert!(m.logical_cpus >= 1);
        assert!(m.memory_bytes > 0);
        assert!(!m.kernel.is_empty());
        assert!(!m.cpu_affinity.is_empty());
        let p = placement(Path::new("/"));
        assert_eq!(p.mount_point, "/");
        assert_ne!(p.filesystem, "unknown");
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
    }
}
