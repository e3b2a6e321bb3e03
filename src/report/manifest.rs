//! The manifest model (manifest.json): what was run, on what, with which store and options —
//! everything needed to repeat a run or to tell two runs apart. Written when the run starts
//! and again when it ends; the summary model (summary.json) sits next to it in `report`.

use crate::plan::Plan;
use crate::store;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Serialize)]
pub struct StoreManifest {
    pub name: String,
    pub version: String,
    pub options: BTreeMap<String, String>,
    pub capabilities: store::Capabilities,
    /// Server stores: the server measured, started by kvmeter (managed) or the user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerManifest>,
}

#[derive(Serialize)]
pub struct ServerManifest {
    pub managed: bool,
    pub addr: String,
    /// The version the server itself reports.
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Every member of a managed cluster (one for a single server), with its CPU seconds:
    /// members share this machine's CPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::store::cluster::MemberManifest>,
    /// Replication settings (replication factor, WAIT, quorum, Sentinels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replication: BTreeMap<String, String>,
}

/// Store options as the manifest shows them: secrets replaced.
pub fn shown_options(o: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    o.iter()
        .map(|(k, v)| {
            let v = if k == "password" && !v.is_empty() {
                "(set, not shown)".to_string()
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

#[derive(Serialize)]
pub struct DataManifest {
    pub path: String,
    pub temporary: bool,
    pub reused: bool,
    pub placement: crate::machine::Placement,
}

#[derive(Serialize)]
pub struct Measurement {
    pub clock: String,
    pub histogram_unit: &'static str,
    pub significant_digits: u8,
    pub highest_trackable_ns: u64,
    pub interval_s: f64,
    pub warmup: &'static str,
    pub values: &'static str,
}

impl Measurement {
    /// How latencies are taken and kept, for a run with this clock and interval.
    pub fn new(clock: String, interval_s: f64) -> Self {
        Measurement {
            clock,
            histogram_unit: "ns",
            significant_digits: crate::measure::SIGFIG,
            highest_trackable_ns: crate::measure::HIGHEST_NS,
            interval_s,
            warmup: "excluded from summary.json, kept in intervals.csv (warmup=1) and the HDR logs",
            values: "generated before the timer starts (YCSB generates them inside the timed call)",
        }
    }
}

#[derive(Serialize)]
pub struct Manifest<'a> {
    pub schema: &'static str,
    pub kvmeter_version: &'static str,
    pub git_revision: &'static str,
    pub command_line: Vec<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: super::RunStatus,
    pub seed: u64,
    pub store: StoreManifest,
    pub data_dir: DataManifest,
    pub machine: crate::machine::Machine,
    pub measurement: Measurement,
    /// The calibration this run used, or null with why not.
    pub calibration: Option<crate::calibrate::Calibration>,
    pub calibration_note: String,
    pub plan: &'a Plan,
}
