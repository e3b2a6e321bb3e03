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
mod tests {
    use super::*;

    pub(crate) fn config() -> WorkloadConfig {
        WorkloadConfig {
            table: "usertable".into(),
            fieldcount: 10,
            fieldnameprefix: "field".into(),
            fieldlength: 100,
            minfieldlength: 1,
            fieldlengthdistribution: FieldLengthDistribution::Constant,
            fieldlengthhistogram: "hist.txt".into(),
            fieldlength_histogram: None,
            readallfields: true,
            readallfieldsbyname: false,
            writeallfields: false,
            dataintegrity: false,
            readproportion: 0.95,
            updateproportion: 0.05,
            insertproportion: 0.0,
            scanproportion: 0.0,
            readmodifywriteproportion: 0.0,
            requestdistribution: Distribution::Uniform,
            minscanlength: 1,
            maxscanlength: 1000,
            scanlengthdistribution: "uniform".into(),
            insertorder: "hashed".into(),
            insertstart: 0,
            insertcount: 1000,
            zeropadding: 1,
            hotspotdatafraction: 0.2,
            hotspotopnfraction: 0.8,
            exponential_percentile: 95.0,
            exponential_frac: 0.8571428571,
            recordcount: 1000,
            operationcount: 1000,
            insertion_retry_limit: 0,
            insertion_retry_interval: 3,
            insert_stride: 1,
            insert_offset: 0,
            keysizedistribution: KeySizeDistribution::Ycsb,
            mixgraph: None,
        }
    }

    #[test]
    fn load_inserts_spec_keys_in_order() {
        let w = CoreWorkload::new(config());
        let mut rng = Rng::for_worker(1, 0);
        let mut b = OpBuffers::default();
        let want = [
            "user6284781860667377211",
            "user8517097267634966620",
            "user1820151046732198393",
            "user4052466453699787802",
            "user3232700585171816769",
        ];
        for k in want {
            w.next_load(&mut rng, &mut b);
            assert_eq!(std::str::from_utf8(&b.key).unwrap(), k);
            assert_eq!(b.values.len(), 10);
            assert_eq!(b.values.data_bytes(), 10 * (6 + 100));
        }
    }

    #[test]
    fn op_chooser_follows_discrete_rule() {
        let mut c = config();
        c.readproportion = 0.95;
        c.updateproportion = 0.05;
        let ch = OpChooser::new(&c);
        assert_eq!(ch.choose(0.0), Op::Read);
        assert_eq!(ch.choose(0.9499), Op::Read);
        assert_eq!(ch.choose(0.95), Op::Update);
        assert_eq!(ch.choose(0.999999), Op::Update);
        // Unnormalised proportions are normalised by their sum.
        c.readproportion = 1.0;
        c.updateproportion = 3.0;
        let ch = OpChooser::new(&c);
        assert_eq!(ch.choose(0.2), Op::Read);
        assert_eq!(ch.choose(0.3), Op::Update);
    }

    #[test]
    fn mix_matches_proportions() {
        let mut c = config();
        c.readproportion = 0.5;
        c.updateproportion = 0.2;
        c.insertproportion = 0.1;
        c.scanproportion = 0.1;
        c.readmodifywriteproportion = 0.1;
        c.requestdistribution = Distribution::Zipfian;
        c.maxscanlength = 100;
        let w = CoreWorkload::new(c);
        let mut rng = Rng::for_worker(2, 0);
        let mut b = OpBuffers::default();
        let mut n = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let op = w.next_op(&mut rng, &mut b);
            if op == Op::Insert {
                w.acknowledge(b.keynum).unwrap();
            }
            if op == Op::Scan {
                assert!((1..=100).contains(&b.scan_len));
            }
            *n.entry(op).or_insert(0u32) += 1;
        }
        let frac = |op| n[&op] as f64 / 100_000.0;
        assert!((frac(Op::Read) - 0.5).abs() < 0.01);
        assert!((frac(Op::Update) - 0.2).abs() < 0.01);
        assert!((frac(Op::Insert) - 0.1).abs() < 0.01);
        assert!((frac(Op::Scan) - 0.1).abs() < 0.01);
        assert!((frac(Op::ReadModifyWrite) - 0.1).abs() < 0.01);
    }

    #[test]
    fn zipfian_hottest_key_is_144_for_1000_records() {
        let mut c = config();
        c.readproportion = 1.0;
        c.updateproportion = 0.0;
        c.requestdistribution = Distribution::Zipfian;
        let w = CoreWorkload::new(c);
        let mut rng = Rng::for_worker(4, 0);
        let mut b = OpBuffers::default();
        let mut counts = vec![0u32; 1001];
        for _ in 0..200_000 {
            w.next_op(&mut rng, &mut b);
            assert!(b.keynum < 1000, "key number 1000 must be rejected");
            counts[b.keynum as usize] += 1;
        }
        let top = (0..1000).max_by_key(|&i| counts[i]).unwrap();
        assert_eq!(top, 144);
        // P = 1/ZETAN ≈ 0.0378 before renormalising the rejected key 1000.
        let p = counts[144] as f64 / 200_000.0;
        assert!((0.035..0.041).contains(&p), "{p}");
        let second = counts[610] as f64 / 200_000.0;
        assert!((0.017..0.021).contains(&second), "{second}");
    }

    #[test]
    fn agents_spread_run_inserts_over_one_hosts_range() {
        // Two agents of a distributed run (plan::share): their run-phase insert keys never
        // collide and together are recordcount, recordcount+1, ... as one host's would be.
        let mut c = config();
        c.readproportion = 0.0;
        c.insertproportion = 1.0;
        let mut all = vec![];
        for i in 0..2 {
            let mut c = c.clone();
            c.insert_stride = 2;
            c.insert_offset = i;
            let w = CoreWorkload::new(c);
            let mut rng = Rng::for_worker(1, 0);
            let mut b = OpBuffers::default();
            for _ in 0..5 {
                assert_eq!(w.next_op(&mut rng, &mut b), Op::Insert);
                w.acknowledge(b.keynum).unwrap();
                all.push(b.keynum);
            }
        }
        all.sort();
        assert_eq!(all, (1000..1010).collect::<Vec<i64>>());
    }

    #[test]
    fn uniform_never_targets_run_inserts_and_latest_does() {
        let mut c = config();
        c.readproportion = 0.5;
        c.updateproportion = 0.0;
        c.insertproportion = 0.5;
        let w = CoreWorkload::new(c.clone());
        let mut rng = Rng::for_worker(5, 0);
        let mut b = OpBuffers::default();
        for _ in 0..10_000 {
            if w.next_op(&mut rng, &mut b) == Op::Insert {
                w.acknowledge(b.keynum).unwrap();
            } else {
                assert!(b.keynum < 1000);
            }
        }
        c.requestdistribution = Distribution::Latest;
        let w = CoreWorkload::new(c);
        let mut newest_reads = 0;
        for _ in 0..10_000 {
            if w.next_op(&mut rng, &mut b) == Op::Insert {
                w.acknowledge(b.keynum).unwrap();
            } else if b.keynum >= 1000 {
                newest_reads += 1;
            }
        }
        assert!(newest_reads > 3000, "{newest_reads}");
    }

    #[test]
    fn data_integrity_values_verify() {
        let mut c = config();
        c.dataintegrity = true;
        c.readallfieldsbyname = true;
        let w = CoreWorkload::new(c);
        let mut rng = Rng::for_worker(6, 0);
        let mut b = OpBuffers::default();
        w.next_load(&mut rng, &mut b);
        let mut scratch = Vec::new();
        assert!(w.verify(&b.key, b.values.view(), &mut scratch));
        let mut bad = Record::new();
        bad.push(b"field0", b"nope");
        assert!(!w.verify(&b.key, bad.view(), &mut scratch));
        assert!(!w.verify(&b.key, RecordView::EMPTY, &mut scratch));
    }

    #[test]
    fn exponential_favours_newest_keys() {
        let mut c = config();
        c.readproportion = 1.0;
        c.updateproportion = 0.0;
        c.requestdistribution = Distribution::Exponential;
        let w = CoreWorkload::new(c);
        let mut rng = Rng::for_worker(8, 0);
        let mut b = OpBuffers::default();
        let mut within = 0;
        for _ in 0..20_000 {
            w.next_op(&mut rng, &mut b);
            assert!((0..=999).contains(&b.keynum));
            if b.keynum >= 999 - (1000.0 * 0.8571428571) as i64 {
                within += 1;
            }
        }
        // Keys ≥ 142 are draws x < 858; draws x ≥ 1000 are rejected and redrawn, so the
        // expected share is (1 - e^(-858γ)) / (1 - e^(-1000γ)) with γ = 0.003495020985987739.
        let g = 0.003495020985987739f64;
        let want = (1.0 - (-858.0 * g).exp()) / (1.0 - (-1000.0 * g).exp());
        let f = within as f64 / 20_000.0;
        assert!((f - want).abs() < 0.005, "{f} vs {want}");
    }
}
