//! The flags of `kvmeter table`; `report::tidy` makes the table.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct TableArgs {
    /// Run, sweep, capacity, experiment or compare directories: every run directory below
    /// them (manifest.json with summary.json) gives its rows.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// csv, jsonl (one JSON object a line) or parquet.
    #[arg(long, value_name = "FORMAT", default_value = "csv")]
    pub format: String,
    /// Write the table to this new file (an existing file is never overwritten); default:
    /// stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}
