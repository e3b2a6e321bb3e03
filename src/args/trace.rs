//! The flags of `kvmeter trace` (`trace stats`); `cli::trace` runs it. The key cap's default
//! is `trace::stats::KEY_CAP`, written out (args imports only clap and `plan`).

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// What a trace holds, read once in bounded memory: records, duration, the rate per
    /// second, the op mix (by the trace's names and by kind), distinct keys and a Zipf α fit
    /// of key popularity, key and value size percentiles. Prints a table; with --out also
    /// stats.json, rate.csv and figures/*.svg.
    Stats(TraceStatsArgs),
}

#[derive(Args, Debug)]
pub struct TraceStatsArgs {
    /// The trace file (`.zst`: read compressed).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// twitter, rocksdb, cachebench or monitor (default: told from the first lines).
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Write stats.json, rate.csv and figures/ into this new directory (never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Count lines that break the format and go on (default: stop at the first, exit 2).
    #[arg(long)]
    pub skip_bad: bool,
    /// Track at most this many distinct keys (past it the distinct count is a lower bound).
    #[arg(long, value_name = "N", default_value_t = 10_000_000, hide = true)]
    pub key_cap: usize,
}
