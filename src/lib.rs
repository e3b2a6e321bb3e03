//! kvmeter: measures key-value stores the way storage researchers do by hand — YCSB-exact
//! workloads, tail latency from HdrHistograms, and a run directory written as the run goes.
//! See docs/architecture.md for the map of modules.

// First, so that its macros are in scope in every module below.
#[macro_use]
pub mod console;

pub mod antagonist;
pub mod args;
pub mod calibrate;
pub mod cli;
pub mod distributed;
pub mod doctor;
pub mod driver;
pub mod error;
pub mod experiment;
pub mod fault;
pub mod machine;
pub mod measure;
pub mod metrics;
pub mod panics;
pub mod plan;
pub mod record;
pub mod report;
pub mod store;
pub mod telemetry;
pub mod trace;
pub mod values;
pub mod workload;
