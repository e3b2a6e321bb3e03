//! One agent's share of a distributed run (docs/distributed.md, issue "past one machine"):
//! N agents × T threads must do what one host with N·T threads does.
//!
//! - Load: agent i inserts its contiguous slice of `[insertstart, insertstart+insertcount)`
//!   (YCSB's own `insertstart`/`insertcount` partitioning, as its docs suggest for many clients).
//! - Run: every agent draws from the whole key range. Worker w of agent i uses random stream
//!   `i·T + w` (the driver reads `Plan::share`), and its operation count is the one YCSB's split
//!   (§8.2) gives that global worker, so each worker replays one host's worker exactly.
//!   Run-phase inserts are spread: agent i takes keys `recordcount + i + k·N`.
//! - The event-driven engine (`--connections`): agent i opens its slice of the connections
//!   (the first `N % count` agents one more) and numbers them from the slice's start, so
//!   connection c of the whole run draws stream c whichever agent opens it; its requests
//!   are the run's operations split over agents.
//! - Pacing: `--target` and open-loop `--rate` are divided by N (the per-thread schedule of
//!   `--target` is then the same as one host's). Poisson arrivals stay Poisson (a sum of
//!   independent Poisson processes is one); fixed arrivals are phased i/N of a gap apart, so
//!   together they are evenly spaced at the full rate.
//!
//! The plan hash is what a coordinator and its agents compare before anything runs: SHA-256
//! of the resolved plan with the fields that are each host's own (run directory, data
//! directory, stdout format, warnings, meters, files and secrets) taken out.

use super::{PhaseKind, Plan, Share};

/// YCSB's split of operations over threads (§8.2): thread i gets n/t, plus one if i < n%t.
pub fn split_ops(total: u64, threads: usize, i: usize) -> u64 {
    if total == 0 {
        return 0;
    }
    let t = threads as u64;
    total / t + u64::from((i as u64) < total % t)
}

/// Agent `index` of `count`'s slice of `total` items: (offset, length), the first
/// `total % count` agents one longer.
pub fn slice(total: u64, count: usize, index: usize) -> (u64, u64) {
    let n = count as u64;
    let i = index as u64;
    let base = total / n;
    let extra = total % n;
    (i * base + i.min(extra), base + u64::from(i < extra))
}

/// Makes `plan` agent `share.index`'s part of the run `plan` describes for one host.
pub fn apply_share(plan: &mut Plan, share: Share) {
    let (n, i) = (share.count, share.index);
    let engine = plan.engine.as_mut().map(|e| {
        let (first, mine) = slice(e.connections as u64, n, i);
        e.connections = (mine as usize).max(1);
        e.first_conn = first;
        e.fds_needed = (e.connections + e.probe.map_or(0, |p| p.connections)) as u64
            + super::engine::FD_HEADROOM;
    });
    for p in &mut plan.phases {
        if engine.is_some() && p.kind == PhaseKind::Run && p.open_loop.is_none() {
            p.operations = split_ops(p.operations, n, i);
            p.threads = p
                .threads
                .min(plan.engine.as_ref().map_or(1, |e| e.connections));
            if let Some(w) = p.workload.as_mut() {
                w.insert_stride = n as i64;
                w.insert_offset = i as i64;
            }
            continue;
        }
        let t = p.threads;
        match p.kind {
            PhaseKind::Load => {
                let (lo, len) = slice(p.operations, n, i);
                if let Some(w) = p.workload.as_mut() {
                    w.insertstart += lo as i64;
                    w.insertcount = len as i64;
                    w.operationcount = len as i64;
                }
                p.operations = len;
            }
            PhaseKind::Run => {
                p.operations = match &p.open_loop {
                    // Open loop: arrival tickets i, i+N, i+2N, ... of the whole schedule.
                    Some(_) => split_ops(p.operations, n, i),
                    None => (0..t)
                        .map(|w| split_ops(p.operations, n * t, i * t + w))
                        .sum(),
                };
                if let Some(w) = p.workload.as_mut() {
                    w.insert_stride = n as i64;
                    w.insert_offset = i as i64;
                }
            }
            PhaseKind::Clear => {}
        }
        if let Some(target) = p.target.as_mut() {
            *target /= n as f64;
        }
        if let Some(o) = p.open_loop.as_mut() {
            o.rate /= n as f64;
            o.offset_gaps = i as f64 / n as f64;
            if let Some(s) = o.sine.as_mut() {
                // Each agent offers 1/n of the curve: a and d scale, the shape stays.
                s.a /= n as f64;
                s.d /= n as f64;
            }
        }
    }
    plan.share = Some(share);
}

/// Fields of a resolved plan that are each host's own: where results and data go, how they
/// are shown, and what names this host's files, devices and meters (a distributed run's agents
/// take these from their own flags, never from the coordinator: docs/distributed.md
/// "Security").
const HOST_OWN_FIELDS: [&str; 13] = [
    "out",
    "data_dir",
    "format",
    "warnings",
    "share",
    "status_interval",
    "power",
    "power_model",
    "power_model_given",
    "calibration",
    "io_dir",
    "disk",
    "metrics",
];

/// Whether a store option names a file or holds a secret: a host's own (its certificates, its
/// passwords), never taken from a distributed run's plan.
pub fn is_host_own_option(name: &str) -> bool {
    matches!(name, "tls_ca" | "tls_cert" | "tls_key")
        || name.contains("password")
        || name.contains("secret")
        || name.contains("token")
        || name.ends_with("_file")
        || name.ends_with("_dir")
        || name.ends_with("_path")
}

/// A plug-in is named by its library's file name across hosts (each loads its own copy).
pub fn portable_store_name(store: &str) -> String {
    match store.strip_prefix(crate::store::plugin::PREFIX) {
        Some(path) => format!(
            "{}{}",
            crate::store::plugin::PREFIX,
            std::path::Path::new(path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        None => store.to_string(),
    }
}

/// SHA-256 (64 hex digits) of the resolved plan without each host's own fields: what a
/// coordinator and its agents compare (and what `kvmeter agent --plan-hash` pins) before
/// anything runs.
pub fn plan_hash(plan: &Plan) -> String {
    let mut v = serde_json::to_value(plan).expect("a plan serializes");
    if let Some(o) = v.as_object_mut() {
        for own in HOST_OWN_FIELDS {
            o.remove(own);
        }
        if let Some(opts) = o.get_mut("store_options").and_then(|x| x.as_object_mut()) {
            opts.retain(|k, _| !is_host_own_option(k));
        }
        if let Some(store) = o.get_mut("store") {
            if let Some(s) = store.as_str() {
                *store = serde_json::Value::String(portable_store_name(s));
            }
        }
        // The engine's event loops are each host's own (one per CPU by default).
        if plan.engine.is_some() {
            if let Some(phases) = o.get_mut("phases").and_then(|p| p.as_array_mut()) {
                for p in phases.iter_mut().filter_map(|p| p.as_object_mut()) {
                    p.remove("threads");
                    if let Some(props) = p.get_mut("properties").and_then(|x| x.as_object_mut()) {
                        props.remove("threadcount");
                    }
                }
            }
        }
    }
    let text = v.to_string();
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_split_like_ycsb() {
        let v: Vec<u64> = (0..3).map(|i| split_ops(10, 3, i)).collect();
        assert_eq!(v, [4, 3, 3]);
        assert_eq!(split_ops(0, 4, 2), 0);
        assert_eq!(
            (0..4).map(|i| split_ops(1_000_003, 4, i)).sum::<u64>(),
            1_000_003
        );
    }

    #[test]
    fn slices_cover_the_range_once() {
        for (total, n) in [(10u64, 3usize), (9, 3), (2, 4), (100_000, 4)] {
            let mut next = 0;
            for i in 0..n {
                let (lo, len) = slice(total, n, i);
                assert_eq!(lo, next, "{total} over {n}, agent {i}");
                next += len;
            }
            assert_eq!(next, total);
        }
        assert_eq!(slice(10, 3, 0), (0, 4));
        assert_eq!(slice(10, 3, 2), (7, 3));
    }

    #[test]
    fn agents_split_operations_as_one_host_splits_its_threads() {
        // One host: 1003 operations over 3·2 threads; agent i's workers are global i·2, i·2+1.
        let (n, t, total) = (3usize, 2usize, 1003u64);
        let one_host: Vec<u64> = (0..n * t).map(|g| split_ops(total, n * t, g)).collect();
        for i in 0..n {
            let agent: u64 = (0..t).map(|w| split_ops(total, n * t, i * t + w)).sum();
            // The agent then splits its own count over its T threads the same way.
            for w in 0..t {
                assert_eq!(split_ops(agent, t, w), one_host[i * t + w]);
            }
        }
    }

    #[test]
    fn agents_split_the_engines_connections_and_number_them_across_the_run() {
        let req = super::super::Request {
            command: "run".into(),
            store: "memcached".into(),
            workload_files: vec!["workloadc".into()],
            connections: Some(10),
            ops: Some(1001),
            ..Default::default()
        };
        let one = super::super::build(&req).unwrap();
        let mut seen = vec![];
        for i in 0..3 {
            let mut p = one.clone();
            apply_share(&mut p, Share { index: i, count: 3 });
            let e = p.engine.unwrap();
            let run = p.phases.iter().find(|p| p.kind == PhaseKind::Run).unwrap();
            seen.push((e.first_conn, e.connections, run.operations));
        }
        // 10 = 4 + 3 + 3, numbered 0.., 4.., 7..; 1001 operations = 334 + 334 + 333.
        assert_eq!(seen, [(0, 4, 334), (4, 3, 334), (7, 3, 333)]);
    }

    #[test]
    fn the_engines_event_loops_are_each_hosts_own_in_the_plan_hash() {
        let mut req = super::super::Request {
            command: "run".into(),
            store: "memcached".into(),
            workload_files: vec!["workloadc".into()],
            connections: Some(100),
            ..Default::default()
        };
        let a = super::super::build(&req).unwrap();
        let mut b = a.clone();
        for p in &mut b.phases {
            p.threads += 3;
        }
        assert_eq!(plan_hash(&a), plan_hash(&b));
        req.connections = Some(101);
        assert_ne!(
            plan_hash(&a),
            plan_hash(&super::super::build(&req).unwrap())
        );
        // Worker threads are the plan's, as before.
        req.connections = None;
        let c = super::super::build(&req).unwrap();
        let mut d = c.clone();
        d.phases[0].threads += 1;
        assert_ne!(plan_hash(&c), plan_hash(&d));
    }
}
