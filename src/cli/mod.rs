//! Dispatch and exit codes: the parsed command line (`args`, the clap definition) handed to
//! the library, whose error becomes one line and an exit code. Everything else lives in the
//! library so tests can call it in-process. Nothing imports `cli`; one file per concern:
//! `dist` (the distributed commands), `compare`, `stores` (the store listing), `trace`
//! (`trace stats`); the rest here.

use crate::args::{Cli, Command};
use crate::error::{EXIT_OK, EXIT_USAGE};
use crate::experiment::job::Job;
use clap::Parser;

mod compare;
mod dist;
mod stores;
mod trace;

pub use stores::stores_report;

/// `kvmeter report DIR [--cost FILE]`, the same way for every kind of directory: an
/// experiment's results and findings are first made again from its steps' files (nothing is
/// done to other directories), then report draws the page of whatever kind `dir` is.
fn report(dir: &std::path::Path, cost: Option<&std::path::Path>) -> anyhow::Result<i32> {
    if let Some(c) = cost {
        // A bad cost file is refused before anything in the directory is written again.
        crate::report::cost::load(c)?;
    }
    crate::experiment::file::run::refresh(dir)?;
    let w = crate::report::html::write_with_cost(dir, cost)?;
    outln!(
        "{} ({} figures, {:.0} KiB)",
        w.path.display(),
        w.figures,
        w.bytes as f64 / 1024.0
    );
    Ok(EXIT_OK)
}

/// Runs the command line; returns the process exit code.
pub fn main_with(args: Vec<std::ffi::OsString>) -> i32 {
    crate::panics::install();
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // Help and version are not errors; usage errors print clap's one-line reason.
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            let _ = e.print();
            return code;
        }
    };
    let result = match cli.command {
        Command::Report { dir, cost } => report(&dir, cost.as_deref()),
        Command::Durability(a) => {
            crate::experiment::durability::run(&crate::experiment::durability::Settings {
                store: a.store,
                store_opts: a.store_opt,
                duration: a.duration,
                faults: a.fault,
                kills: a.kills,
                writers: a.writers,
                out: a.out,
                seed: a.seed,
                fail_on_loss: a.fail_on_loss,
            })
        }
        Command::DurabilityWriter {
            store,
            dir,
            start,
            store_opt,
        } => Ok(crate::experiment::durability::writer_main(
            &store, &dir, start, &store_opt,
        )),
        Command::SealRunDir { dir } => {
            crate::report::current::seal_when_abandoned(&dir);
            Ok(EXIT_OK)
        }
        Command::Stores { plugins } => stores::stores(&plugins),
        Command::Agent(a) => dist::agent(a),
        Command::Dist { command } => dist::run(command),
        Command::Doctor { data_dir } => {
            out!("{}", crate::doctor::report(data_dir.as_deref()));
            Ok(EXIT_OK)
        }
        Command::Calibrate {
            calibration,
            seconds,
            power,
        } => crate::calibrate::run(calibration, seconds, power),
        Command::Experiment(a) => crate::experiment::file::run::main(a),
        Command::Compare(a) => compare::compare(a),
        Command::Trace { command } => trace::run(command),
        Command::Table(a) => crate::report::tidy::main(&crate::report::tidy::Options {
            dirs: a.dirs,
            format: a.format,
            output: a.output,
        }),
        measuring => match Job::from_command(measuring) {
            Ok(Some(job)) => job.execute(),
            Ok(None) => unreachable!("every other command is matched above"),
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {e:#}");
            crate::report::current::fail_outer(&format!("{e:#}"));
            crate::error::exit_code(&e)
        }
    }
}
