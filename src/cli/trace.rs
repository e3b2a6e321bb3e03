//! `kvmeter trace stats`: reads the trace once (`trace::stats`), prints a short table and,
//! with `--out`, writes stats.json, rate.csv and figures/ (rate over time, op mix) into a new
//! directory (`report::trace_stats` draws them). Nothing is created before the whole trace has
//! been read: a bad line is one `file:line: what` and exit 2 with no directory left behind.

use crate::args::{TraceCommand, TraceStatsArgs};
use crate::error::{UsageError, EXIT_OK};
use crate::report::trace_stats::{document, table, write_out};
use crate::trace::stats;
use crate::trace::{Format, TraceReader};

pub fn run(command: TraceCommand) -> anyhow::Result<i32> {
    match command {
        TraceCommand::Stats(a) => trace_stats(a),
    }
}

fn trace_stats(a: TraceStatsArgs) -> anyhow::Result<i32> {
    let format = match a.format.as_deref() {
        None => None,
        Some(s) => Some(Format::parse(s).ok_or_else(|| {
            UsageError::new(format!(
                "--format {s:?}: expected twitter, rocksdb, cachebench or monitor"
            ))
        })?),
    };
    if let Some(out) = &a.out {
        if out.exists() {
            return Err(UsageError::new(format!(
                "--out {}: already exists (trace stats writes a new directory, never over one)",
                out.display()
            ))
            .into());
        }
    }
    let mut reader = TraceReader::open_guess(&a.trace, format)?;
    let opts = stats::Options {
        key_cap: a.key_cap.max(1),
        skip_bad: a.skip_bad,
    };
    let mut st = stats::collect(&mut reader, &opts).map_err(|e| UsageError::new(e.to_string()))?;
    let zipf = st.zipf();
    let bytes = std::fs::metadata(&a.trace).map_or(0, |m| m.len());
    let doc = document(&a.trace, reader.format(), bytes, &st, zipf.as_ref());
    out!("{}", table(&a.trace, reader.format(), &st, zipf.as_ref()));
    if let Some(out) = &a.out {
        write_out(out, &doc, &st)?;
        outln!("wrote {}", out.display());
    }
    Ok(EXIT_OK)
}
