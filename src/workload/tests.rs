//! The core workload's tests: YCSB's operation mix, key choice and field generation against
//! the spec's values (../shared/ycsb-workload-spec.md).

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
