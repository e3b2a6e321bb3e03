//! Which phases a command runs, in order: `run` (load, run or both), `suite` (papers/000's
//! sequence: load A, run A, B, C, F, D; clear; load E, run E) and `pressure` (a load, then
//! one run phase per antagonist block size, papers/004). Each slot carries what it is — a
//! pressure phase keeps its block size here rather than in its name.

use super::{PhaseKind, Request, PRESSURE_BLOCK_SIZES};
use crate::error::UsageError;

/// One phase before resolution.
pub(super) struct PhaseSlot {
    pub name: String,
    pub kind: PhaseKind,
    /// The `-P` files of this phase.
    pub files: Vec<String>,
    /// A pressure-scale phase: the antagonists' block size in bytes.
    pub block_size: Option<usize>,
}

impl PhaseSlot {
    fn new(name: &str, kind: PhaseKind, files: Vec<String>) -> Self {
        PhaseSlot {
            name: name.to_string(),
            kind,
            files,
            block_size: None,
        }
    }
}

pub(super) fn layout(req: &Request) -> Result<Vec<PhaseSlot>, UsageError> {
    let files = req.workload_files.clone();
    match req.command.as_str() {
        "pressure" => {
            let mut l = vec![];
            if req.phase.as_deref() != Some("run") {
                l.push(PhaseSlot::new("load", PhaseKind::Load, files.clone()));
            }
            for kib in block_sizes_kib(req)? {
                let mut slot =
                    PhaseSlot::new(&format!("pressure-{kib}k"), PhaseKind::Run, files.clone());
                slot.block_size = Some(kib * 1024);
                l.push(slot);
            }
            Ok(l)
        }
        "suite" => {
            let w = |l: &str| vec![format!("workload{l}")];
            Ok(vec![
                PhaseSlot::new("load-a", PhaseKind::Load, w("a")),
                PhaseSlot::new("run-a", PhaseKind::Run, w("a")),
                PhaseSlot::new("run-b", PhaseKind::Run, w("b")),
                PhaseSlot::new("run-c", PhaseKind::Run, w("c")),
                PhaseSlot::new("run-f", PhaseKind::Run, w("f")),
                PhaseSlot::new("run-d", PhaseKind::Run, w("d")),
                PhaseSlot::new("clear", PhaseKind::Clear, vec![]),
                PhaseSlot::new("load-e", PhaseKind::Load, w("e")),
                PhaseSlot::new("run-e", PhaseKind::Run, w("e")),
            ])
        }
        _ => match req.phase.as_deref().unwrap_or("both") {
            "load" => Ok(vec![PhaseSlot::new("load", PhaseKind::Load, files)]),
            "run" => Ok(vec![PhaseSlot::new("run", PhaseKind::Run, files)]),
            "both" => Ok(vec![
                PhaseSlot::new("load", PhaseKind::Load, files.clone()),
                PhaseSlot::new("run", PhaseKind::Run, files),
            ]),
            other => Err(UsageError::new(format!(
                "--phase '{other}': expected load, run or both"
            ))),
        },
    }
}

/// `--block-sizes` in KiB (pressure only).
fn block_sizes_kib(req: &Request) -> Result<Vec<usize>, UsageError> {
    let text = req.block_sizes.as_deref().unwrap_or(PRESSURE_BLOCK_SIZES);
    let list: Result<Vec<usize>, _> = text.split(',').map(|x| x.trim().parse::<usize>()).collect();
    match list {
        Ok(l)
            if !l.is_empty()
                && l
                    .iter()
                    .all(|k| *k >= 1 && k * 1024 <= crate::antagonist::io::MAX_BLOCK) =>
        {
            Ok(l)
        }
        _ => Err(UsageError::new(format!(
            "--block-sizes '{text}': expected KiB values from 1 to 4096, comma-separated (paper: 4,8,16,32,64,128,256,512)"
        ))),
    }
}
