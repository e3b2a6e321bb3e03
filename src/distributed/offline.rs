//! `kvmeter dist merge DIR...`: the merged run rebuilt offline from the agents' own run
//! directories (their dist/agent.json, intervals.jsonl and phases.jsonl), for when the
//! coordinator died or to check its result. The same records the agents posted to etcd, merged
//! by the same code (`merge::Merger`); an agent's directory is held to what a published plan may
//! ask, as etcd's plan is.

use super::merge::{exit_code, stopped_by, AgentInfo, DistInfo, Loss, Merger};
use super::{IntervalPost, PhaseDone};
use crate::report::RunStatus;
use std::collections::BTreeMap;

/// The request an agent directory recorded, as `dist merge` may use it: an agent's directory is
/// as trustworthy as whoever could write it, so it is held to what a published plan may ask
/// (no library, program or file is taken from it), after the fields that only matter where the
/// run happened are dropped.
fn trusted_request(
    recorded: &crate::plan::Request,
    dir: &std::path::Path,
    plugin: Option<String>,
    out: Option<std::path::PathBuf>,
) -> anyhow::Result<crate::plan::Request> {
    use crate::error::UsageError;
    // An agent's directory is as trustworthy as whoever could write it: its request is held
    // to what a published plan may ask (no library, program or file is taken from it), after
    // the fields that only matter where the run happened are dropped.
    let local = super::trust::Local {
        plugin,
        ..Default::default()
    };
    local.check_agent_flags()?;
    let mut published = recorded.clone();
    (
        published.power,
        published.power_model,
        published.calibration,
    ) = (None, None, None);
    (published.idle_baseline, published.io_dir, published.disk) = (None, None, None);
    (published.metrics_addr, published.metrics_linger) = (None, None);
    (published.out, published.data_dir) = (None, None);
    published.store_opts.retain(|o| {
        !crate::plan::is_host_own_option(o.split_once('=').map_or(o.as_str(), |(k, _)| k))
    });
    if let Err(why) = super::trust::check_published(&published, &local) {
        return Err(UsageError::new(format!(
            "{}: {}",
            dir.join("dist/agent.json").display(),
            why.replace("its own flags", "dist merge's own flags")
        ))
        .into());
    }
    let mut req = super::trust::join(&published, &local);
    req.out = Some(out.unwrap_or_else(|| crate::plan::default_out("dist-merge", &req.store)));
    Ok(req)
}

/// Each agent's record (dist/agent.json) by index: all of one run (job and plan hash), each
/// agent once.
fn read_agents(dirs: &[std::path::PathBuf]) -> anyhow::Result<Agents> {
    use super::AgentRecord;
    use crate::error::UsageError;
    let mut agents: BTreeMap<usize, (std::path::PathBuf, AgentRecord)> = BTreeMap::new();
    for d in dirs {
        let path = d.join("dist/agent.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            UsageError::new(format!(
                "{}: not an agent's run directory ({}: {e})",
                d.display(),
                path.display()
            ))
        })?;
        let r: AgentRecord = serde_json::from_str(&text)
            .map_err(|e| UsageError::new(format!("{}: {e}", path.display())))?;
        if let Some((_, first)) = agents.values().next() {
            if first.published.hash != r.published.hash || first.job != r.job {
                return Err(UsageError::new(format!(
                    "{}: agent of job {} with plan {}, but {} is of job {} with plan {}: not the same run",
                    d.display(),
                    r.job,
                    r.published.hash,
                    agents.values().next().map(|a| a.0.display().to_string()).unwrap_or_default(),
                    first.job,
                    first.published.hash
                ))
                .into());
            }
        }
        let i = r.registration.index;
        if let Some((other, _)) = agents.get(&i) {
            return Err(UsageError::new(format!(
                "{}: agent {i} again (also {}); give each agent's directory once",
                d.display(),
                other.display()
            ))
            .into());
        }
        agents.insert(i, (d.clone(), r));
    }
    Ok(agents)
}

/// `kvmeter dist merge DIR... [--out OUT]`: the merged run from agents' run directories, for
/// when the coordinator died (or to check its result): the same records the agents posted,
/// merged by the same code.
pub fn offline(
    dirs: &[std::path::PathBuf],
    out: Option<std::path::PathBuf>,
    plugin: Option<String>,
) -> anyhow::Result<i32> {
    use crate::error::UsageError;
    let agents = read_agents(dirs)?;
    let Some((_, first)) = agents.values().next() else {
        return Err(UsageError::new("kvmeter dist merge: give the agents' run directories").into());
    };
    let first = first.clone();
    let req = trusted_request(&first.published.request, &dirs[0], plugin, out)?;
    let plan = crate::plan::build(&req)?;
    let reports = Reports::read(&agents)?;
    let info = offline_info(&agents, &first);
    let quiet = plan.quiet;
    let phases = plan.phases.len();
    let mut m = Merger::create(plan, info)?;
    let mut status = RunStatus::Completed;
    for p in 0..phases {
        let t0 = agents
            .values()
            .filter_map(|(_, r)| r.starts.get(p).copied())
            .min();
        let Some(t0) = t0 else { break };
        m.begin_phase(p, t0);
        if let Some(stop) = reports.merge_phase(&mut m, p, &agents)? {
            status = stop;
            break;
        }
    }
    let root = m.root().to_path_buf();
    let status = m.finish(status, quiet)?;
    errln!("results: {}", root.display());
    Ok(exit_code(status))
}

type Agents = BTreeMap<usize, (std::path::PathBuf, super::AgentRecord)>;

/// What the agents wrote of their reports to etcd into their run directories.
struct Reports {
    posts: Vec<IntervalPost>,
    dones: Vec<PhaseDone>,
}

impl Reports {
    fn read(agents: &Agents) -> anyhow::Result<Self> {
        let read_lines = |p: std::path::PathBuf| -> anyhow::Result<Vec<String>> {
            Ok(std::fs::read_to_string(&p)
                .map_err(|e| crate::error::UsageError::new(format!("{}: {e}", p.display())))?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect())
        };
        let mut r = Reports {
            posts: vec![],
            dones: vec![],
        };
        for (d, _) in agents.values() {
            for l in read_lines(d.join("dist/intervals.jsonl"))? {
                // A line cut short by a crash is the only one that may not parse: the last.
                if let Ok(p) = serde_json::from_str(&l) {
                    r.posts.push(p);
                }
            }
            for l in read_lines(d.join("dist/phases.jsonl"))? {
                if let Ok(p) = serde_json::from_str(&l) {
                    r.dones.push(p);
                }
            }
        }
        Ok(r)
    }

    /// Merges phase `p`'s intervals in order, records the agents that posted in it but never
    /// ended it as lost, and ends the phase; the run's status when that stops the run.
    fn merge_phase(
        &self,
        m: &mut Merger,
        p: usize,
        agents: &Agents,
    ) -> anyhow::Result<Option<RunStatus>> {
        let mut by_k: BTreeMap<usize, Vec<&IntervalPost>> = BTreeMap::new();
        for post in self.posts.iter().filter(|x| x.phase_index == p) {
            by_k.entry(post.index).or_default().push(post);
        }
        let mut last: BTreeMap<usize, usize> = BTreeMap::new();
        for (k, list) in &by_k {
            m.interval(list)?;
            for x in list {
                last.insert(x.agent, *k);
            }
        }
        let ended: Vec<PhaseDone> = self
            .dones
            .iter()
            .filter(|d| d.phase_index == p)
            .cloned()
            .collect();
        for i in agents.keys() {
            let posted = || by_k.values().flatten().filter(|x| x.agent == *i);
            if !ended.iter().any(|d| d.agent == *i) && posted().next().is_some() {
                m.info.degraded = true;
                m.info.lost.push(Loss {
                    agent: *i,
                    phase: m.plan.phases[p].name.clone(),
                    at_s: posted().map(|x| x.end_s).fold(0.0, f64::max),
                    last_interval: last.get(i).copied(),
                });
            }
        }
        Ok(stopped_by(m.end_phase(&ended)?))
    }
}

/// The merged run's record: the agents as their directories tell, and what is missing.
fn offline_info(agents: &Agents, first: &super::AgentRecord) -> DistInfo {
    let n = first.published.agents;
    let mut info = DistInfo {
        job: first.job.clone(),
        agents: n,
        plan_hash: first.published.hash.clone(),
        merged_by: "dist merge".into(),
        coordinator: Some(first.published.coordinator.clone()),
        ..Default::default()
    };
    let regs: BTreeMap<usize, super::Registration> = agents
        .iter()
        .map(|(i, (_, r))| (*i, r.registration.clone()))
        .collect();
    info.warnings = super::clock_warnings(&regs, Some(&first.published.coordinator));
    for (i, (d, r)) in agents {
        info.agent_hosts.insert(
            *i,
            AgentInfo {
                host: r.registration.host.clone(),
                placed_by: r.registration.placed_by.clone(),
                threads: r.registration.threads,
                run_dir: Some(d.display().to_string()),
            },
        );
    }
    let missing: Vec<String> = (0..n)
        .filter(|i| !agents.contains_key(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        info.degraded = true;
        info.warnings.push(format!(
            "merged {} of {n} agents: no run directory for agent(s) {}",
            agents.len(),
            missing.join(", ")
        ));
    }
    info
}
