//! `kvmeter replay TRACE`: the flags of a trace replay (docs/replay.md "Replaying"), beside
//! the run flags it shares (`CommonArgs`: store, threads, --ops, --duration, --rate, --out...).

use super::CommonArgs;
use crate::plan::replay::ReplayRequest;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The trace file (`.zst` read as it is).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// The trace's format: twitter (default), rocksdb, cachebench, monitor.
    #[arg(long, value_name = "FORMAT")]
    pub trace_format: Option<String>,
    /// Replay this many times faster than recorded (0.5 = half speed). --rate instead replays
    /// evenly at a rate, the trace's times ignored.
    #[arg(long, value_name = "F")]
    pub speed: Option<f64>,
    /// Replay each record this many times, keys suffixed ~1..~K (scales a small trace up).
    #[arg(long, value_name = "K")]
    pub amplify: Option<u64>,
    /// Skip the trace's first N records; the first replayed record is time zero.
    #[arg(long, value_name = "N")]
    pub skip: Option<u64>,
    /// Count and skip bad lines instead of refusing the trace. Without it, every line is
    /// parsed before anything is created and a bad one is refused with file:line, exit 2.
    #[arg(long)]
    pub skip_bad: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

impl ReplayArgs {
    /// The run flags as a `Request` (command `replay`) and the replay's own.
    pub fn into_requests(self) -> (crate::plan::Request, ReplayRequest) {
        let r = ReplayRequest {
            trace: self.trace,
            format: self.trace_format,
            speed: self.speed,
            rate: None,
            amplify: self.amplify,
            skip: self.skip,
            skip_bad: self.skip_bad,
        };
        (self.common.into_request("replay", vec![], None), r)
    }
}
