//! The core workload's settings as the plan resolves them (ycsb-workload-spec §2–§6): every
//! property with its YCSB name, serialized into manifest.json.

use super::generators::HistogramLengths;
use super::mixgraph::MixGraphConfig;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
    Hotspot,
    Sequential,
    Exponential,
}

impl Distribution {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "uniform" => Distribution::Uniform,
            "zipfian" => Distribution::Zipfian,
            "latest" => Distribution::Latest,
            "hotspot" => Distribution::Hotspot,
            "sequential" => Distribution::Sequential,
            "exponential" => Distribution::Exponential,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldLengthDistribution {
    Constant,
    Uniform,
    Zipfian,
    Histogram,
    /// Facebook ETC's value sizes (`workload::fb`, `valuesizedistribution=fb_value`).
    #[serde(rename = "fb_value")]
    FbValue,
    /// mixgraph's generalized Pareto value sizes (`WorkloadConfig::mixgraph`).
    Mixgraph,
}

/// How key names are written: YCSB's `user…` names, or Facebook ETC's sizes (`workload::fb`:
/// the key index zero-padded to a generalized-extreme-value length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum KeySizeDistribution {
    #[serde(rename = "ycsb")]
    Ycsb,
    #[serde(rename = "fb_key")]
    FbKey,
}

/// Every core-workload property, typed and validated (spec §1.3), with YCSB's names.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadConfig {
    pub table: String,
    pub fieldcount: i64,
    pub fieldnameprefix: String,
    pub fieldlength: i32,
    pub minfieldlength: i32,
    pub fieldlengthdistribution: FieldLengthDistribution,
    pub fieldlengthhistogram: String,
    #[serde(skip)]
    pub fieldlength_histogram: Option<HistogramLengths>,
    pub readallfields: bool,
    pub readallfieldsbyname: bool,
    pub writeallfields: bool,
    pub dataintegrity: bool,
    pub readproportion: f64,
    pub updateproportion: f64,
    pub insertproportion: f64,
    pub scanproportion: f64,
    pub readmodifywriteproportion: f64,
    pub requestdistribution: Distribution,
    pub minscanlength: i32,
    pub maxscanlength: i32,
    /// `uniform` or `zipfian`.
    pub scanlengthdistribution: String,
    pub insertorder: String,
    pub insertstart: i64,
    pub insertcount: i64,
    pub zeropadding: i32,
    pub hotspotdatafraction: f64,
    pub hotspotopnfraction: f64,
    pub exponential_percentile: f64,
    pub exponential_frac: f64,
    pub recordcount: i64,
    /// 0 = unlimited (stop by duration).
    pub operationcount: i64,
    pub insertion_retry_limit: i32,
    pub insertion_retry_interval: i32,
    /// Run-phase inserts of one agent of a distributed run (docs/distributed.md): agent `i` of
    /// `N` takes the keys `recordcount + i + k·N`, so agents never insert the same key and
    /// together fill the range one host would. 1 and 0 on a single host.
    #[serde(skip_serializing_if = "is_one")]
    pub insert_stride: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub insert_offset: i64,
    /// `keysizedistribution` (docs/workloads-models.md).
    pub keysizedistribution: KeySizeDistribution,
    /// `workload=mixgraph`: db_bench's model drives the mix, keys, values and scans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mixgraph: Option<MixGraphConfig>,
}

fn is_one(v: &i64) -> bool {
    *v == 1
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl WorkloadConfig {
    pub fn ordered(&self) -> bool {
        self.insertorder != "hashed"
    }

    /// An upper bound on the bytes one record of this workload takes on the wire: its key, and
    /// every field at the longest length the distribution draws, with 32 bytes of framing
    /// per field (an encoding's or a protocol's lengths and separators) and 256 per record.
    /// It sizes what a network store may accept in one reply (`max_reply=auto`).
    pub fn largest_record(&self) -> u64 {
        let longest = match self.fieldlengthdistribution {
            FieldLengthDistribution::Histogram => self
                .fieldlength_histogram
                .as_ref()
                .map(|h| h.max())
                .unwrap_or(0),
            FieldLengthDistribution::FbValue => super::fb::MAX_VALUE,
            FieldLengthDistribution::Mixgraph => self
                .mixgraph
                .as_ref()
                .map(|m| m.mix_max_value_size)
                .unwrap_or(0),
            _ => self.fieldlength as i64,
        }
        .max(self.minfieldlength as i64)
        .max(0) as u64;
        let fields = self.fieldcount.max(0) as u64;
        let name = self.fieldnameprefix.len() as u64 + 20;
        let key = match self.keysizedistribution {
            KeySizeDistribution::FbKey => super::fb::MAX_KEY as u64,
            KeySizeDistribution::Ycsb => 4 + (self.zeropadding.max(0) as u64).max(20),
        };
        fields
            .saturating_mul(longest.saturating_add(name).saturating_add(32))
            .saturating_add(key)
            .saturating_add(256)
    }

    /// The most records one operation reads: a scan's longest, else one.
    pub fn records_per_read(&self) -> u64 {
        if let Some(m) = self.mixgraph.as_ref().filter(|m| m.mix_seek_ratio > 0.0) {
            m.mix_max_scan_len.max(1) as u64
        } else if self.scanproportion > 0.0 {
            self.maxscanlength.max(1) as u64
        } else {
            1
        }
    }
}
