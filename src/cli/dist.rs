//! `kvmeter agent` and `kvmeter dist run|merge`: how their flags (`args::dist`) reach `dist`
//! (docs/distributed.md).

use crate::args::{AgentArgs, AgentLocalArgs, CoordArgs, DistCommand};

/// The coordination flags checked and their files read (exit 2 on a bad one, before anything
/// runs).
fn coord_spec(
    c: &CoordArgs,
) -> Result<crate::distributed::keys::CoordSpec, crate::error::UsageError> {
    let flags = crate::distributed::keys::CoordFlags {
        url: c.coord.clone(),
        ca: c.coord_ca.clone(),
        cert: c.coord_cert.clone(),
        key: c.coord_key.clone(),
        server_name: c.coord_server_name.clone(),
        user: c.coord_user.clone(),
        password_file: c.coord_password_file.clone(),
    };
    crate::distributed::keys::CoordSpec::resolve(&flags, |k| std::env::var(k).ok())
}

/// What an agent decides itself (dist::trust), from its own flags.
fn local(a: AgentLocalArgs) -> crate::distributed::trust::Local {
    crate::distributed::trust::Local {
        power: a.power,
        power_model: a.power_model,
        calibration: a.calibration,
        idle_baseline: a.idle_baseline,
        io_dir: a.io_dir,
        disk: a.disk,
        plugin: a.store,
        store_opts: a.store_opts,
        metrics_addr: a.metrics_addr,
        metrics_linger: a.metrics_linger,
    }
}

pub(super) fn agent(a: AgentArgs) -> anyhow::Result<i32> {
    crate::distributed::agent::run(crate::distributed::agent::Settings {
        coord: coord_spec(&a.coord)?,
        job: a.coord.job,
        index: a.index,
        count: a.count,
        out: a.out,
        data_dir: a.data_dir,
        plan_hash: a.plan_hash,
        plan_key_file: a.coord.plan_key_file,
        wait: a.wait,
        local: local(a.local),
    })
}

pub(super) fn run(command: DistCommand) -> anyhow::Result<i32> {
    match command {
        DistCommand::Merge { dirs, out, store } => {
            crate::distributed::offline::offline(&dirs, out, store)
        }
        DistCommand::Run(a) => {
            crate::distributed::coordinator::run(crate::distributed::coordinator::Settings {
                coord: coord_spec(&a.coord)?,
                job: a.coord.job,
                agents: a.agents,
                register_timeout: a.register_timeout,
                lease_ttl: a.lease_ttl,
                start_delay: a.start_delay,
                abort_on_loss: a.on_agent_loss == "abort",
                plan_key_file: a.coord.plan_key_file,
                reports: a.reports,
                reports_tls_cert: a.reports_tls_cert,
                reports_tls_key: a.reports_tls_key,
                request: a
                    .run
                    .common
                    .into_request("run", a.run.workload, Some(a.run.phase)),
            })
        }
    }
}
