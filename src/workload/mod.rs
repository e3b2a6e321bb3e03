//! YCSB's core workload (`CoreWorkload`): keys, values and the operation stream, exactly as
//! ycsb-workload-spec §2–§6 describes. It knows nothing of time or stores: the driver asks it
//! for the next operation, which it writes into the worker's reusable `OpBuffers` (its records
//! are `crate::record`'s, the leaf the stores encode from).

mod config;
pub mod fb;
pub mod generators;
pub mod keys;
pub mod mixgraph;
pub mod rng;

pub use config::{Distribution, FieldLengthDistribution, KeySizeDistribution, WorkloadConfig};

use crate::record::{Fields, Record, RecordView};
use generators::*;
pub use rng::Rng;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

/// A worker's reusable operation buffers: the workload writes the next operation here.
#[derive(Default)]
pub struct OpBuffers {
    pub keynum: i64,
    pub key: Vec<u8>,
    /// Field to read (`None` = all fields).
    pub read_field: Option<usize>,
    pub values: Record,
    pub scan_len: usize,
}

enum KeyChooser {
    Uniform(UniformLong),
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
    Hotspot(Hotspot),
    Sequential(Sequential),
    Exponential(Exponential),
}

enum Lengths {
    Constant(i64),
    Uniform(UniformLong),
    Zipfian(Zipfian),
    Histogram(HistogramLengths),
    FbValue,
    /// mixgraph's value sizes: the Pareto and `mix_max_value_size`.
    Mixgraph(mixgraph::Gpd, i64),
}

impl Lengths {
    #[inline]
    fn next(&self, rng: &mut Rng) -> i64 {
        match self {
            Lengths::Constant(n) => *n,
            Lengths::Uniform(u) => u.next(rng),
            Lengths::Zipfian(z) => z.next(rng),
            Lengths::Histogram(h) => h.next(rng),
            Lengths::FbValue => fb::value_size(rng),
            Lengths::Mixgraph(g, max) => {
                mixgraph::fold_value(g.inverse_ceil(1.0 - rng.next_f64()), *max)
            }
        }
    }
}

/// `DiscreteGenerator` over the operation proportions (§5.10), with the per-choice
/// probabilities precomputed (the weights never change, so the result is identical).
struct OpChooser {
    choices: Vec<(f64, Op)>,
}

impl OpChooser {
    fn new(c: &WorkloadConfig) -> Self {
        let weights = [
            (c.readproportion, Op::Read),
            (c.updateproportion, Op::Update),
            (c.insertproportion, Op::Insert),
            (c.scanproportion, Op::Scan),
            (c.readmodifywriteproportion, Op::ReadModifyWrite),
        ];
        let kept: Vec<(f64, Op)> = weights.into_iter().filter(|(w, _)| *w > 0.0).collect();
        let sum: f64 = kept.iter().map(|(w, _)| w).sum();
        OpChooser {
            choices: kept.into_iter().map(|(w, op)| (w / sum, op)).collect(),
        }
    }

    #[inline]
    fn choose(&self, mut u: f64) -> Op {
        for &(p, op) in &self.choices {
            if u < p {
                return op;
            }
            u -= p;
        }
        // Upstream aborts here ("oops"); it can only happen through rounding with u close to
        // 1, so kvmeter takes the last operation instead.
        self.choices.last().map(|c| c.1).unwrap_or(Op::Read)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadError {
    /// The acknowledgement window of run-phase inserts is full (upstream's fatal error).
    TooManyUnacknowledged,
}

impl std::fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Too many unacknowledged insertion keys (more than 2^20 inserts in flight)")
    }
}

/// The shared workload object of one phase.
pub struct CoreWorkload {
    pub cfg: WorkloadConfig,
    field_names: Vec<Vec<u8>>,
    field_lengths: Lengths,
    field_chooser: UniformLong,
    key_chooser: KeyChooser,
    scan_lengths: Lengths,
    op_chooser: OpChooser,
    load_sequence: Counter,
    insert_sequence: AcknowledgedCounter,
    ordered: bool,
    zeropadding: usize,
    /// `recordcount`, and this process's stride and offset among run-phase insert keys
    /// (`WorkloadConfig::insert_stride`): the insert sequence counts densely, keys above
    /// `recordcount` are spread.
    first_new: i64,
    stride: i64,
    offset: i64,
    /// `workload=mixgraph`: the model that draws the operation, key and scan length.
    mixgraph: Option<mixgraph::MixGraph>,
    /// `keysizedistribution=fb_key`: key names as `fb::key_name` writes them.
    fb_keys: bool,
}

impl CoreWorkload {
    /// Builds the generators as `CoreWorkload.init` does (§2). The config must be validated.
    pub fn new(cfg: WorkloadConfig) -> Self {
        let c = &cfg;
        let field_names = (0..c.fieldcount)
            .map(|i| format!("{}{}", c.fieldnameprefix, i).into_bytes())
            .collect();
        let field_lengths = match c.fieldlengthdistribution {
            FieldLengthDistribution::Constant => Lengths::Constant(c.fieldlength as i64),
            FieldLengthDistribution::Uniform => Lengths::Uniform(UniformLong::new(
                c.minfieldlength as i64,
                c.fieldlength as i64,
            )),
            FieldLengthDistribution::Zipfian => {
                Lengths::Zipfian(Zipfian::new(c.minfieldlength as i64, c.fieldlength as i64))
            }
            FieldLengthDistribution::Histogram => Lengths::Histogram(
                c.fieldlength_histogram
                    .clone()
                    .expect("validated: histogram loaded"),
            ),
            FieldLengthDistribution::FbValue => Lengths::FbValue,
            FieldLengthDistribution::Mixgraph => {
                let m = c.mixgraph.as_ref().expect("validated: mixgraph settings");
                Lengths::Mixgraph(m.value, m.mix_max_value_size)
            }
        };
        let mixgraph = c
            .mixgraph
            .clone()
            .map(|m| mixgraph::MixGraph::new(m, c.insertcount));
        let insert_sequence = AcknowledgedCounter::new(c.recordcount);
        let (lo, hi) = (c.insertstart, c.insertstart + c.insertcount - 1);
        let key_chooser = match c.requestdistribution {
            Distribution::Uniform => KeyChooser::Uniform(UniformLong::new(lo, hi)),
            Distribution::Exponential => KeyChooser::Exponential(Exponential::new(
                c.exponential_percentile,
                c.recordcount as f64 * c.exponential_frac,
            )),
            Distribution::Sequential => KeyChooser::Sequential(Sequential::new(lo, hi)),
            Distribution::Zipfian => {
                // 2.0 is YCSB's fudge factor; there is no -1 (quirk 5).
                let expected_new =
                    (c.operationcount as f64 * c.insertproportion * 2.0) as i32 as i64;
                KeyChooser::Zipfian(ScrambledZipfian::new(
                    c.insertstart,
                    c.insertstart + c.insertcount + expected_new,
                ))
            }
            Distribution::Latest => KeyChooser::Latest(SkewedLatest::new(&insert_sequence)),
            Distribution::Hotspot => KeyChooser::Hotspot(Hotspot::new(
                lo,
                hi,
                c.hotspotdatafraction,
                c.hotspotopnfraction,
            )),
        };
        let scan_lengths = if c.scanlengthdistribution == "zipfian" {
            Lengths::Zipfian(Zipfian::new(c.minscanlength as i64, c.maxscanlength as i64))
        } else {
            Lengths::Uniform(UniformLong::new(
                c.minscanlength as i64,
                c.maxscanlength as i64,
            ))
        };
        CoreWorkload {
            field_names,
            field_lengths,
            field_chooser: UniformLong::new(0, c.fieldcount - 1),
            key_chooser,
            scan_lengths,
            op_chooser: OpChooser::new(c),
            load_sequence: Counter::new(c.insertstart),
            insert_sequence,
            ordered: c.ordered(),
            zeropadding: c.zeropadding.max(0) as usize,
            first_new: c.recordcount,
            stride: c.insert_stride.max(1),
            offset: c.insert_offset,
            mixgraph,
            fb_keys: c.keysizedistribution == KeySizeDistribution::FbKey,
            cfg,
        }
    }

    /// Which operations this workload can issue.
    pub fn ops(&self) -> Vec<Op> {
        if let Some(m) = &self.mixgraph {
            let c = m.config();
            return [
                (c.mix_get_ratio, Op::Read),
                (c.mix_put_ratio, Op::Update),
                (c.mix_seek_ratio, Op::Scan),
            ]
            .into_iter()
            .filter(|(r, _)| *r > 0.0)
            .map(|(_, op)| op)
            .collect();
        }
        self.op_chooser.choices.iter().map(|c| c.1).collect()
    }

    pub fn read_fields<'a>(&'a self, b: &OpBuffers) -> Fields<'a> {
        match b.read_field {
            Some(i) => Fields::One(&self.field_names[i]),
            None => Fields::All,
        }
    }

    #[inline]
    fn key_name(&self, keynum: i64, out: &mut Vec<u8>) {
        if self.fb_keys {
            return fb::key_name(keynum, self.first_new, out);
        }
        keys::build_key_name(keynum, self.zeropadding, self.ordered, out);
    }

    /// Appends one field's value: random (§4.2) or, with data integrity, deterministic (§4.3).
    #[inline]
    fn push_value(&self, rng: &mut Rng, key: &[u8], field: usize, values: &mut Record) {
        let len = self.field_lengths.next(rng).max(0) as usize;
        let name = &self.field_names[field];
        let buf = values.begin_field(name);
        if self.cfg.dataintegrity {
            keys::deterministic_value(key, name, len, buf);
        } else {
            keys::random_value(rng, len, buf);
        }
        values.end_field();
    }

    #[inline]
    fn all_values(&self, rng: &mut Rng, b: &mut OpBuffers) {
        b.values.clear();
        for f in 0..self.field_names.len() {
            self.push_value(rng, &b.key, f, &mut b.values);
        }
    }

    #[inline]
    fn update_values(&self, rng: &mut Rng, b: &mut OpBuffers) {
        if self.cfg.writeallfields {
            self.all_values(rng, b);
        } else {
            b.values.clear();
            let f = self.field_chooser.next(rng) as usize;
            self.push_value(rng, &b.key, f, &mut b.values);
        }
    }

    /// Load phase (`doInsert`, §6.1): the next key from the shared counter, all fields.
    /// Key numbers stay 64-bit (kvmeter does not truncate to 32 bits: quirk 1).
    #[inline]
    pub fn next_load(&self, rng: &mut Rng, b: &mut OpBuffers) {
        b.keynum = self.load_sequence.next();
        self.key_name(b.keynum, &mut b.key);
        self.all_values(rng, b);
    }

    /// A key number of the insert sequence (dense) as this process's key: itself on one host;
    /// for agent i of N, keys past `recordcount` are `recordcount + i + k·N`.
    #[inline]
    fn spread(&self, k: i64) -> i64 {
        if k >= self.first_new {
            self.first_new + (k - self.first_new) * self.stride + self.offset
        } else {
            k
        }
    }

    /// `nextKeynum` (§6.2).
    #[inline]
    fn next_keynum(&self, rng: &mut Rng) -> i64 {
        let k = self.dense_keynum(rng);
        self.spread(k)
    }

    #[inline]
    fn dense_keynum(&self, rng: &mut Rng) -> i64 {
        if let KeyChooser::Exponential(e) = &self.key_chooser {
            loop {
                let limit = self.insert_sequence.last();
                let k = limit - e.next(rng) as i32 as i64;
                if k >= 0 {
                    return k;
                }
            }
        }
        loop {
            let limit = self.insert_sequence.last();
            let k = match &self.key_chooser {
                KeyChooser::Uniform(u) => u.next(rng),
                KeyChooser::Zipfian(z) => z.next(rng),
                KeyChooser::Latest(l) => l.next(rng, &self.insert_sequence),
                KeyChooser::Hotspot(h) => h.next(rng),
                KeyChooser::Sequential(s) => s.next(),
                KeyChooser::Exponential(_) => unreachable!(),
            };
            if k <= limit {
                return k;
            }
        }
    }

    #[inline]
    fn one_read_field(&self, rng: &mut Rng) -> Option<usize> {
        if self.cfg.readallfields {
            None
        } else {
            Some(self.field_chooser.next(rng) as usize)
        }
    }

    /// Run phase (`doTransaction`, §6.2), keeping the draw order of §6.3. For an insert the
    /// caller must `acknowledge(b.keynum)` once the store call returned, whatever its status.
    #[inline]
    pub fn next_op(&self, rng: &mut Rng, b: &mut OpBuffers) -> Op {
        if let Some(m) = &self.mixgraph {
            return self.next_mixgraph(m, rng, b);
        }
        let op = self.op_chooser.choose(rng.next_f64());
        match op {
            Op::Read => {
                b.keynum = self.next_keynum(rng);
                self.key_name(b.keynum, &mut b.key);
                b.read_field = self.one_read_field(rng);
            }
            Op::Update => {
                b.keynum = self.next_keynum(rng);
                self.key_name(b.keynum, &mut b.key);
                self.update_values(rng, b);
            }
            Op::Insert => {
                b.keynum = self.spread(self.insert_sequence.next());
                self.key_name(b.keynum, &mut b.key);
                self.all_values(rng, b);
            }
            Op::Scan => {
                b.keynum = self.next_keynum(rng);
                self.key_name(b.keynum, &mut b.key);
                b.scan_len = self.scan_lengths.next(rng) as i32 as usize;
                b.read_field = self.one_read_field(rng);
            }
            Op::ReadModifyWrite => {
                b.keynum = self.next_keynum(rng);
                self.key_name(b.keynum, &mut b.key);
                b.read_field = self.one_read_field(rng);
                self.update_values(rng, b);
            }
        }
        op
    }

    /// A mixgraph operation: get → read, put → update (one value of the model's size), seek →
    /// scan of the model's length; the key from the model's hotness.
    #[inline]
    fn next_mixgraph(&self, m: &mixgraph::MixGraph, rng: &mut Rng, b: &mut OpBuffers) -> Op {
        let op = m.op(rng.next_f64());
        b.keynum = self.cfg.insertstart + m.keynum(rng);
        self.key_name(b.keynum, &mut b.key);
        match op {
            mixgraph::MixOp::Get => {
                b.read_field = self.one_read_field(rng);
                Op::Read
            }
            mixgraph::MixOp::Put => {
                self.update_values(rng, b);
                Op::Update
            }
            mixgraph::MixOp::Seek => {
                b.scan_len = m.scan_len(rng) as usize;
                b.read_field = self.one_read_field(rng);
                Op::Scan
            }
        }
    }

    pub fn acknowledge(&self, keynum: i64) -> Result<(), WorkloadError> {
        let dense = if keynum >= self.first_new {
            self.first_new + (keynum - self.first_new - self.offset) / self.stride
        } else {
            keynum
        };
        self.insert_sequence
            .acknowledge(dense)
            .map_err(|_| WorkloadError::TooManyUnacknowledged)
    }

    /// `verifyRow` (§4.3): `true` when every returned field holds its deterministic value.
    /// An empty result fails (upstream counts it as ERROR; kvmeter as a mismatch too).
    pub fn verify(&self, key: &[u8], got: RecordView<'_>, scratch: &mut Vec<u8>) -> bool {
        if got.is_empty() {
            return false;
        }
        let size = self.cfg.fieldlength.max(0) as usize;
        got.iter().all(|(name, value)| {
            scratch.clear();
            keys::deterministic_value(key, name, size, scratch);
            scratch == value
        })
    }
}

#[cfg(test)]
mod tests;
