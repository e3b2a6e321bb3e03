//! Faults on a schedule (papers/002: what a crash costs while clients keep going). The
//! `--fault` spec is parsed and checked in `plan::fault`, beside `--antagonist`; this is the
//! runtime, as `antagonist/` is for the loads. Like the pressure schedule, a list of timed
//! events beside a run phase: `schedule.rs` fires them on the members of a cluster kvmeter
//! started, `recovery.rs` reads the timeline around each one.
//!
//! kvmeter never signals a process it did not start: a fault on a user's server (`addr=`) is
//! refused with the rest of the input (`plan::fault`).

pub mod recovery;
pub mod schedule;
