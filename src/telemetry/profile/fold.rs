//! Charges each sample to a group and folds its stack (Brendan Gregg's folded format, the input
//! of every flame graph tool: `root;caller;…;leaf count`).
//!
//! Groups, in kvmeter's process:
//! - `store-foreground`: a worker or event-loop thread inside the store's own code (a frame in
//!   the plug-in's or the store's library, or a symbol the adapter names, e.g. `rocksdb::`);
//! - `harness`: the same threads anywhere else (kvmeter generating, sending, measuring);
//! - `harness-other`: kvmeter's other threads (telemetry, statistics, metrics, the main thread);
//! - `antagonist`: the CPU, I/O and memory-bandwidth antagonists;
//! - `store-background`: threads kvmeter did not start (rocksdb:low, rocksdb:high, …);
//!
//! and `server` for every thread of a managed server's process. Each folded stack starts with
//! its thread group (`rocksdb:low`, `kvm-worker`), so a group's flame graph splits by thread
//! too, and kernel frames end in `_[k]` (collapse-perf's `--kernel` convention).

use super::script::{Frame, Sample};
use std::collections::HashMap;

/// Distinct stacks kept per phase, all groups together; later new stacks count under
/// `[other stacks]` (so memory stays bounded on any run length).
pub(super) const MAX_STACKS: usize = 20_000;

/// Who the measured processes are.
#[derive(Clone, Debug, Default)]
pub struct Roles {
    pub own_pid: u32,
    pub server_pid: Option<u32>,
    /// kvmeter's executable as perf names it (its frames are the harness's or a linked-in
    /// store's).
    pub exe: String,
    /// Symbol prefixes of a store compiled into kvmeter (`StoreKind::profile_symbols`).
    pub store_symbols: Vec<String>,
}

/// Libraries every program runs on: their frames are nobody's store.
const RUNTIME: [&str; 9] = [
    "libc.so",
    "libc-",
    "libm.so",
    "libpthread",
    "ld-linux",
    "libstdc++",
    "libgcc_s",
    "libdl",
    "librt",
];

impl Roles {
    fn store_frame(&self, f: &Frame) -> bool {
        if self
            .store_symbols
            .iter()
            .any(|p| f.sym.starts_with(p.as_str()))
        {
            return true;
        }
        if f.dso.starts_with('[') || f.dso == self.exe {
            return false;
        }
        let base = f.dso.rsplit('/').next().unwrap_or(&f.dso);
        !RUNTIME.iter().any(|r| base.starts_with(r))
    }

    /// Whether `pid` is one of the measured processes.
    pub(super) fn measured(&self, pid: u32) -> bool {
        pid == self.own_pid || Some(pid) == self.server_pid
    }

    /// The group a sample is charged to, and its thread group.
    pub(super) fn group(&self, s: &Sample) -> (&'static str, String) {
        let tg = crate::telemetry::procfs::thread_group(&s.comm);
        if Some(s.pid) == self.server_pid {
            return ("server", tg);
        }
        if s.pid != self.own_pid {
            return ("other", tg);
        }
        let g = match tg.as_str() {
            "kvm-worker" | "kvm-loop" | "kvm-probe" => {
                if s.frames.iter().any(|f| self.store_frame(f)) {
                    "store-foreground"
                } else {
                    "harness"
                }
            }
            "kvm-cpu" | "kvm-io" | "kvm-membw" => "antagonist",
            t if t.starts_with("kvm-") || t == "kvmeter" => "harness-other",
            _ => "store-background",
        };
        (g, tg)
    }
}

/// A frame's name in a folded stack: the symbol, else the object it lies in.
pub(super) fn frame_name(f: &Frame) -> String {
    let mut name = if f.sym == "[unknown]" || f.sym.is_empty() {
        match f.dso.rsplit('/').next() {
            Some(base) if f.dso != "[unknown]" && !base.is_empty() => {
                format!("[{}]", base.trim_matches(['[', ']']))
            }
            _ => "[unknown]".to_string(),
        }
    } else {
        f.sym.clone()
    };
    // ';' separates frames and a line ends in " count": neither may be inside a name.
    name = name.replace([';', '\n'], ":");
    if f.kernel() {
        name.push_str("_[k]");
    }
    name
}

/// One group's folded stacks and counts.
#[derive(Debug, Default)]
pub(super) struct GroupFold {
    pub(super) samples: u64,
    pub(super) kernel_samples: u64,
    pub(super) stacks: HashMap<String, u64>,
    /// Samples by their innermost frame (self time).
    pub(super) leaves: HashMap<String, u64>,
}

/// A phase's samples, folded per group.
#[derive(Debug, Default)]
pub(super) struct Fold {
    pub(super) groups: std::collections::BTreeMap<&'static str, GroupFold>,
    pub(super) stacks: usize,
    /// Samples whose stack came after `MAX_STACKS` distinct ones.
    pub(super) overflow: u64,
}

impl Fold {
    /// Folds `s` in; returns its group and its innermost frame's name.
    pub(super) fn add(&mut self, roles: &Roles, s: &Sample) -> (&'static str, String) {
        let (group, tg) = roles.group(s);
        let g = self.groups.entry(group).or_default();
        g.samples += 1;
        if s.frames.first().is_some_and(Frame::kernel) {
            g.kernel_samples += 1;
        }
        // perf's unwinder ends a stack with an all-ones address it could not resolve.
        let frames: Vec<&Frame> = s
            .frames
            .iter()
            .rev()
            .skip_while(|f| f.sym == "[unknown]" && f.dso == "[unknown]")
            .collect();
        let leaf = frames
            .last()
            .map(|f| frame_name(f))
            .unwrap_or_else(|| "[unknown]".into());
        *g.leaves.entry(leaf.clone()).or_default() += 1;
        let mut key = tg.replace([';', ' '], "_");
        for f in &frames {
            key.push(';');
            key.push_str(&frame_name(f));
        }
        if let Some(c) = g.stacks.get_mut(&key) {
            *c += 1;
        } else if self.stacks < MAX_STACKS {
            g.stacks.insert(key, 1);
            self.stacks += 1;
        } else {
            self.overflow += 1;
            *g.stacks
                .entry(format!("{};[other stacks]", tg.replace([';', ' '], "_")))
                .or_default() += 1;
        }
        (group, leaf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(sym: &str, dso: &str) -> Frame {
        Frame {
            sym: sym.into(),
            dso: dso.into(),
        }
    }

    fn sample(comm: &str, pid: u32, frames: Vec<Frame>) -> Sample {
        Sample {
            comm: comm.into(),
            pid,
            tid: pid + 1,
            time_ns: 1,
            frames,
        }
    }

    #[test]
    fn groups_by_process_thread_and_code() {
        let roles = Roles {
            own_pid: 10,
            server_pid: Some(20),
            exe: "/bin/kvmeter".into(),
            store_symbols: vec!["rocksdb::".into()],
        };
        let harness = sample("kvm-worker-3", 10, vec![frame("encode", "/bin/kvmeter")]);
        let in_libc = sample(
            "kvm-loop-0",
            10,
            vec![
                frame("__send", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                frame("engine", "/bin/kvmeter"),
            ],
        );
        let rocks = sample(
            "kvm-worker-0",
            10,
            vec![frame("rocksdb::DBImpl::Get", "/bin/kvmeter")],
        );
        let plugin = sample(
            "kvm-worker-1",
            10,
            vec![
                frame("mdb_get", "/usr/lib/liblmdb.so.0"),
                frame("read_record", "/tmp/libkvm_lmdb.so"),
            ],
        );
        let bg = sample("rocksdb:low0", 10, vec![]);
        let server = sample("memcached", 20, vec![]);
        assert_eq!(roles.group(&harness), ("harness", "kvm-worker".into()));
        assert_eq!(roles.group(&in_libc).0, "harness");
        assert_eq!(roles.group(&rocks).0, "store-foreground");
        assert_eq!(roles.group(&plugin).0, "store-foreground");
        assert_eq!(roles.group(&bg), ("store-background", "rocksdb:low".into()));
        assert_eq!(roles.group(&server).0, "server");
        assert_eq!(
            roles.group(&sample("kvm-telemetry", 10, vec![])).0,
            "harness-other"
        );
        assert_eq!(
            roles.group(&sample("kvmeter", 10, vec![])).0,
            "harness-other"
        );
        assert_eq!(
            roles.group(&sample("kvm-cpu-2", 10, vec![])).0,
            "antagonist"
        );
    }

    #[test]
    fn folds_root_first_with_kernel_marks_and_names_for_unknown_code() {
        let roles = Roles {
            own_pid: 10,
            server_pid: Some(20),
            ..Default::default()
        };
        let mut fold = Fold::default();
        let s = sample(
            "memcached",
            20,
            vec![
                frame("tcp_sendmsg", "[kernel.kallsyms]"),
                frame("[unknown]", "/usr/bin/memcached"),
                frame("start_thread", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
                frame("[unknown]", "[unknown]"),
            ],
        );
        fold.add(&roles, &s);
        fold.add(&roles, &s);
        let g = &fold.groups["server"];
        assert_eq!(g.samples, 2);
        assert_eq!(g.kernel_samples, 2);
        assert_eq!(
            g.stacks["memcached;start_thread;[memcached];tcp_sendmsg_[k]"],
            2
        );
        assert_eq!(g.leaves["tcp_sendmsg_[k]"], 2);
    }

    #[test]
    fn distinct_stacks_are_bounded() {
        let roles = Roles::default();
        let mut fold = Fold::default();
        for i in 0..MAX_STACKS + 5 {
            fold.add(&roles, &sample("t", 0, vec![frame(&format!("f{i}"), "/x")]));
        }
        assert_eq!(fold.stacks, MAX_STACKS);
        assert_eq!(fold.overflow, 5);
        let g = &fold.groups["store-background"];
        assert_eq!(g.stacks["t;[other stacks]"], 5);
        assert_eq!(g.samples as usize, MAX_STACKS + 5);
    }
}
