//! The run phase's `CoreWorkload` exactly as `kvmeter run` builds it from the same request (the
//! floors draw YCSB's operations and keys from it): plan, then the first phase with a workload.

use kvmeter::plan::{build, Request};
use kvmeter::workload::CoreWorkload;

/// Panics with `what` and the planner's message when the request is invalid.
pub fn run_phase(req: &Request, what: &str) -> CoreWorkload {
    let plan = build(req).unwrap_or_else(|e| panic!("{what}: {e}"));
    let cfg = plan
        .phases
        .iter()
        .find_map(|p| p.workload.clone())
        .expect("a run phase has a workload");
    CoreWorkload::new(cfg)
}
