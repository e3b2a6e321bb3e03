//! What kvmeter writes and reads back: report.html and its figures, compare, the tidy table,
//! run-directory files, traces and replay, and live metrics for Prometheus and Grafana.
//! One test binary (`--test report`), one module per concern (issue 42: a binary links the
//! crate with its C stores, so fewer binaries build faster).

#[path = "../common/mod.rs"]
mod common;
#[path = "../plugin_build/mod.rs"]
mod plugin_build;

mod compare;
mod figures;
mod files;
mod html;
mod metrics;
mod replay;
mod table;
mod trace;
