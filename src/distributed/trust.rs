//! What a distributed run's coordinator may ask of an agent, and what only the agent's own
//! command line decides (docs/distributed.md "Security", issue 27).
//!
//! The coordinator publishes a `Request` in etcd. Even authenticated (`seal`), it never carries
//! anything that executes or loads code or names a path on the agent's host: a `--power`
//! meter (commands, files, IPMI and Redfish tools), a `plugin:` library's path, calibration and
//! power-model files, antagonist and data directories, the run directory, block-device names,
//! TLS key files and passwords. The coordinator splits its own request into the part it
//! publishes and its host's own part (`split`); an agent refuses a published request that still
//! asks for any of them, naming the field, before anything is loaded (`check_published`), and
//! adds its own flags' values (`join`). Workload files are published as their text, so an agent
//! opens no file a plan names. The plan hash leaves the host-own fields out (`plan::plan_hash`),
//! so hosts with different meters or certificate paths still agree on the plan.

use crate::error::UsageError;
use crate::plan::{self, Request, WorkloadText, BUILTIN_WORKLOADS};
use std::path::PathBuf;

/// A workload file larger than this is not published (a YCSB property file is a few lines).
const MAX_WORKLOAD_TEXT: u64 = 256 * 1024;

/// What a host decides for itself in a distributed run: from the agent's own flags, or the
/// coordinator's own request.
#[derive(Clone, Debug, Default)]
pub struct Local {
    pub power: Option<String>,
    pub power_model: Option<String>,
    pub calibration: Option<PathBuf>,
    pub idle_baseline: Option<String>,
    pub io_dir: Option<PathBuf>,
    pub disk: Option<String>,
    /// `plugin:PATH` of this host's copy of the plug-in, when the run measures one.
    pub plugin: Option<String>,
    /// Store options that name files or hold secrets (`plan::is_host_own_option`).
    pub store_opts: Vec<String>,
    /// This host's live metrics endpoint (`--metrics-addr`, `--metrics-linger`): an address
    /// it listens on is its own to choose.
    pub metrics_addr: Option<String>,
    pub metrics_linger: Option<String>,
}

impl Local {
    /// Checks an agent's own `--store` and `--store-opt` values: only a plug-in and only
    /// host-own options may be given there (the rest is the plan's).
    pub fn check_agent_flags(&self) -> Result<(), UsageError> {
        if let Some(p) = &self.plugin {
            if !crate::store::plugin::is_plugin(p) {
                return Err(UsageError::new(format!(
                    "--store {p}: an agent takes its store from the plan; only a plug-in's library (--store plugin:PATH) is given to the agent itself"
                )));
            }
        }
        for o in &self.store_opts {
            let name = o.split_once('=').map_or(o.as_str(), |(k, _)| k);
            if !plan::is_host_own_option(name) {
                return Err(UsageError::new(format!(
                    "--store-opt {o}: an agent takes store options from the plan; only this host's files and secrets (tls_ca, tls_cert, tls_key, *_file, password...) are given to the agent itself"
                )));
            }
        }
        Ok(())
    }
}

/// Splits the coordinator's request into what it publishes and its own host's part, and
/// replaces workload-file paths by their text.
pub fn split(req: &Request) -> Result<(Request, Local), UsageError> {
    let mut p = req.clone();
    let (own_opts, shared_opts): (Vec<String>, Vec<String>) =
        req.store_opts.iter().cloned().partition(|o| {
            plan::is_host_own_option(o.split_once('=').map_or(o.as_str(), |(k, _)| k))
        });
    let local = Local {
        power: p.power.take(),
        power_model: p.power_model.take(),
        calibration: p.calibration.take(),
        idle_baseline: p.idle_baseline.take(),
        io_dir: p.io_dir.take(),
        disk: p.disk.take(),
        plugin: crate::store::plugin::is_plugin(&req.store).then(|| req.store.clone()),
        store_opts: own_opts,
        metrics_addr: p.metrics_addr.take(),
        metrics_linger: p.metrics_linger.take(),
    };
    p.store = plan::portable_store_name(&req.store);
    p.store_opts = shared_opts;
    p.out = None;
    p.data_dir = None;
    for name in &req.workload_files {
        if is_builtin_name(name) && !std::path::Path::new(name).exists() {
            continue;
        }
        let bad = |why: String| UsageError::new(format!("-P {name}: {why}"));
        let meta = std::fs::metadata(name).map_err(|e| bad(format!("cannot read it: {e}")))?;
        if meta.len() > MAX_WORKLOAD_TEXT {
            return Err(bad(format!(
                "{} bytes; a distributed run publishes workload files of at most {} KiB",
                meta.len(),
                MAX_WORKLOAD_TEXT / 1024
            )));
        }
        let bytes = std::fs::read(name).map_err(|e| bad(format!("cannot read it: {e}")))?;
        p.workload_texts.push(WorkloadText {
            name: name.clone(),
            text: plan::latin1(&bytes),
        });
    }
    Ok((p, local))
}

/// The request a host runs: the published one with this host's own part.
pub fn join(published: &Request, local: &Local) -> Request {
    let mut r = published.clone();
    r.power = local.power.clone();
    r.power_model = local.power_model.clone();
    r.calibration = local.calibration.clone();
    r.idle_baseline = local.idle_baseline.clone();
    r.io_dir = local.io_dir.clone();
    r.disk = local.disk.clone();
    r.metrics_addr = local.metrics_addr.clone();
    r.metrics_linger = local.metrics_linger.clone();
    if let Some(p) = &local.plugin {
        r.store = p.clone();
    }
    r.store_opts.extend(local.store_opts.iter().cloned());
    r
}

fn is_builtin_name(name: &str) -> bool {
    BUILTIN_WORKLOADS.iter().any(|(n, _)| *n == name)
}

/// Why an agent refuses a published request (one line naming the field), or nothing. Called
/// after the plan's authentication verified and before anything is resolved or loaded.
pub fn check_published(req: &Request, local: &Local) -> Result<(), String> {
    let refuse = |field: &str, flag: &str| {
        Err(format!(
            "the plan asks for '{field}', which an agent takes only from its own flags ({flag}): refused, nothing was loaded or run"
        ))
    };
    let some = |o: &Option<PathBuf>| o.is_some();
    if req.power.is_some() {
        return refuse("power", "--power");
    }
    if req.power_model.is_some() {
        return refuse("power_model", "--power-model");
    }
    if req.idle_baseline.is_some() {
        return refuse("idle_baseline", "--idle-baseline");
    }
    if some(&req.calibration) {
        return refuse("calibration", "--calibration");
    }
    if some(&req.io_dir) {
        return refuse("io_dir", "--io-dir");
    }
    if req.disk.is_some() {
        return refuse("disk", "--disk");
    }
    if req.metrics_addr.is_some() || req.metrics_linger.is_some() {
        return refuse("metrics_addr", "--metrics-addr");
    }
    if some(&req.out) {
        return refuse("out", "--out");
    }
    if some(&req.data_dir) {
        return refuse("data_dir", "--data-dir");
    }
    if !req.faults.is_empty() {
        return Err(
            "the plan asks for 'faults': a distributed run faults no server: refused, nothing was loaded or run"
                .into(),
        );
    }
    if crate::store::plugin::is_plugin(&req.store) {
        let wanted = plan::portable_store_name(&req.store);
        if req.store != wanted {
            return refuse("store (a plug-in's path)", "--store plugin:PATH");
        }
        match &local.plugin {
            None => {
                return Err(format!(
                    "the plan measures the plug-in {wanted}, which an agent loads only from its own flags: give this agent --store plugin:PATH to its copy; refused, nothing was loaded or run"
                ))
            }
            Some(mine) if plan::portable_store_name(mine) != wanted => {
                return Err(format!(
                    "the plan measures the plug-in {wanted}, but this agent was given {}: refused, nothing was loaded or run",
                    plan::portable_store_name(mine)
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(o) = req
        .store_opts
        .iter()
        .find(|o| plan::is_host_own_option(o.split_once('=').map_or(o.as_str(), |(k, _)| k)))
    {
        let name = o.split_once('=').map_or(o.as_str(), |(k, _)| k);
        return refuse(&format!("store option {name}"), "--store-opt");
    }
    for f in &req.workload_files {
        if !is_builtin_name(f) && !req.workload_texts.iter().any(|w| &w.name == f) {
            return Err(format!(
                "the plan names the workload file '{f}' without its text: an agent opens no file a plan names; refused, nothing was loaded or run"
            ));
        }
    }
    if req
        .workload_texts
        .iter()
        .any(|w| w.text.len() as u64 > MAX_WORKLOAD_TEXT || !req.workload_files.contains(&w.name))
    {
        return Err("the plan's workload texts are oversized or name no -P file: refused".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            command: "run".into(),
            store: "null".into(),
            workload_files: vec!["workloadc".into()],
            ..Default::default()
        }
    }

    #[test]
    fn split_keeps_host_own_fields_home_and_join_restores_them() {
        let d = tempfile::tempdir().unwrap();
        let wl = d.path().join("mywl");
        std::fs::write(&wl, "recordcount=7\nreadproportion=1\n").unwrap();
        let mut r = req();
        r.workload_files = vec!["workloadc".into(), wl.display().to_string()];
        r.power = Some("cmd:/bin/true".into());
        r.calibration = Some("/etc/cal.json".into());
        r.io_dir = Some("/data".into());
        r.disk = Some("nvme0n1".into());
        r.out = Some("/results".into());
        r.store = "redis".into();
        r.store_opts = vec![
            "addr=127.0.0.1:6379".into(),
            "tls_ca=/etc/ca.pem".into(),
            "password=x".into(),
        ];
        let (p, local) = split(&r).unwrap();
        assert_eq!(p.power, None);
        assert_eq!(p.calibration, None);
        assert_eq!(p.io_dir, None);
        assert_eq!(p.disk, None);
        assert_eq!(p.out, None);
        assert_eq!(p.store_opts, vec!["addr=127.0.0.1:6379".to_string()]);
        assert_eq!(local.store_opts.len(), 2);
        // The built-in stays a name; the file travels as its text.
        assert_eq!(p.workload_texts.len(), 1);
        assert_eq!(
            p.workload_texts[0].text,
            "recordcount=7\nreadproportion=1\n"
        );
        check_published(&p, &Local::default()).unwrap();
        let back = join(&p, &local);
        assert_eq!(back.power.as_deref(), Some("cmd:/bin/true"));
        assert_eq!(back.store_opts.len(), 3);
    }

    #[test]
    fn a_published_request_naming_code_or_paths_is_refused_by_field() {
        type Edit = Box<dyn Fn(&mut Request)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|r| r.power = Some("cmd:/bin/sh -c id".into())),
                "'power'",
            ),
            (
                Box::new(|r| r.power = Some("file:/etc/shadow".into())),
                "'power'",
            ),
            (
                Box::new(|r| r.calibration = Some("/x".into())),
                "'calibration'",
            ),
            (Box::new(|r| r.io_dir = Some("/x".into())), "'io_dir'"),
            (Box::new(|r| r.data_dir = Some("/x".into())), "'data_dir'"),
            (Box::new(|r| r.out = Some("/x".into())), "'out'"),
            (Box::new(|r| r.disk = Some("../../etc".into())), "'disk'"),
            // An endpoint a forged plan opens on every agent (0.0.0.0: to the network).
            (
                Box::new(|r| r.metrics_addr = Some("0.0.0.0:9464".into())),
                "'metrics_addr'",
            ),
            (
                Box::new(|r| r.store = "plugin:/tmp/evil.so".into()),
                "plug-in's path",
            ),
            (
                Box::new(|r| r.store = "plugin:evil.so".into()),
                "--store plugin:PATH",
            ),
            (
                Box::new(|r| r.faults = vec!["at=1s,kill=server".into()]),
                "'faults'",
            ),
            (
                Box::new(|r| r.store_opts = vec!["tls_key=/k".into()]),
                "store option tls_key",
            ),
            (
                Box::new(|r| r.store_opts = vec!["password=pw".into()]),
                "store option password",
            ),
            (
                Box::new(|r| r.workload_files = vec!["/etc/passwd".into()]),
                "'/etc/passwd'",
            ),
        ];
        for (edit, want) in cases {
            let mut r = req();
            edit(&mut r);
            let e = check_published(&r, &Local::default()).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains('\n'));
        }
        // The agent's own plug-in with the same file name is what runs.
        let mut r = req();
        r.store = "plugin:libkvm_lmdb.so".into();
        let mine = Local {
            plugin: Some("plugin:/opt/kvm/libkvm_lmdb.so".into()),
            ..Default::default()
        };
        check_published(&r, &mine).unwrap();
        assert_eq!(join(&r, &mine).store, "plugin:/opt/kvm/libkvm_lmdb.so");
        let other = Local {
            plugin: Some("plugin:/opt/kvm/libother.so".into()),
            ..Default::default()
        };
        assert!(check_published(&r, &other)
            .unwrap_err()
            .contains("libother.so"));
    }

    #[test]
    fn an_agent_gives_itself_only_host_own_options() {
        let ok = Local {
            store_opts: vec!["tls_ca=/ca.pem".into(), "password_file=/pw".into()],
            plugin: Some("plugin:./libx.so".into()),
            ..Default::default()
        };
        ok.check_agent_flags().unwrap();
        let bad = Local {
            store_opts: vec!["addr=10.0.0.1:6379".into()],
            ..Default::default()
        };
        assert!(bad
            .check_agent_flags()
            .unwrap_err()
            .0
            .contains("--store-opt addr="));
        let bad = Local {
            plugin: Some("redis".into()),
            ..Default::default()
        };
        assert!(bad.check_agent_flags().is_err());
    }
}
