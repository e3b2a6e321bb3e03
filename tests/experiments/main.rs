//! Experiments: the built-in ones, experiment files, faults, verdicts and models.
//! One test binary (`--test experiments`), one module per concern (issue 42: a binary links the
//! crate with its C stores, so fewer binaries build faster).

#[path = "../common/mod.rs"]
mod common;

mod builtin;
mod endings;
mod faults;
mod file;
mod models;
mod sustainable;
mod verdicts;
