//! Verdicts on bounds and noise (issue 28, item 3): each expected interval and verdict is
//! worked out by hand in the test from the inputs, not taken from the code under test.

use super::expr::Val;
use super::findings::{check, decide};
use super::*;
use crate::report::experiment::{counts, value_text, Bound, Results, StepResults, Verdict};

/// Two capacity steps, one run step twice (identical), one run step that differs.
const FILE: &str = r#"
[experiment]
name = "v"
title = "verdicts"
paper = "papers/003"

[settings]
store = "memcached"
workload = "workloadc"
records = 100
duration = "3s"

[[step]]
name = "tcp"
command = "capacity"
start_rate = 1000

[[step]]
name = "udp"
command = "capacity"
start_rate = 1000
store_opt = { udp = true }

[[step]]
name = "a"
command = "run"
threads = 2
workload = "workloada"

[[step]]
name = "a-again"
command = "run"
workload = "workloada"
threads = 2

[[step]]
name = "b"
command = "run"
workload = "workloadb"
threads = 2

[[finding]]
id = "udp-over-tcp"
claim = "UDP reaches a higher capacity"
paper = "higher"
value = "{udp:capacity_ops_per_s} / {tcp:capacity_ops_per_s}"
expect = "> 1"

[[finding]]
id = "tcp-at-least"
claim = "TCP serves more than 5,000 ops/s"
paper = 5000
value = "{tcp:capacity_ops_per_s}"
expect = "> 5000"

[[finding]]
id = "b-over-a"
claim = "B is faster than A"
paper = "faster"
value = "{b:run.throughput_ops_per_s} / {a:run.throughput_ops_per_s}"
expect = "> 1"
"#;

fn step(figures: &[(&str, f64)], bounds: Vec<Bound>) -> StepResults {
    StepResults {
        status: "completed".into(),
        detail: String::new(),
        figures: figures
            .iter()
            .map(|(k, v)| (k.to_string(), *v, false))
            .collect(),
        bounds,
        facts: Default::default(),
    }
}

fn lower(v: f64) -> Bound {
    Bound {
        key: "capacity_ops_per_s".into(),
        low: v,
        high: f64::INFINITY,
        why: format!("capacity ≥ {v}"),
    }
}

fn results(a: f64, a_again: f64, b: f64) -> Results {
    let mut r = Results::default();
    let tput = "run.throughput_ops_per_s";
    r.steps.insert(
        "tcp".into(),
        step(&[("capacity_ops_per_s", 8000.0)], vec![lower(8000.0)]),
    );
    r.steps.insert(
        "udp".into(),
        step(&[("capacity_ops_per_s", 8000.0)], vec![lower(8000.0)]),
    );
    r.steps.insert("a".into(), step(&[(tput, a)], vec![]));
    r.steps
        .insert("a-again".into(), step(&[(tput, a_again)], vec![]));
    r.steps.insert("b".into(), step(&[(tput, b)], vec![]));
    r
}

fn load() -> Experiment {
    from_text(Path::new("v.toml"), FILE, "quick", &[]).unwrap()
}

#[test]
fn identical_steps_are_found_whatever_the_order_of_their_keys() {
    let e = load();
    let names: Vec<Vec<&str>> = noise::groups(&e.steps)
        .iter()
        .map(|g| g.iter().map(|&i| e.steps[i].name.as_str()).collect())
        .collect();
    // udp differs from tcp by one store option; b by its workload.
    assert_eq!(names, vec![vec!["a", "a-again"]]);
}

/// papers/003 at smoke scale: both capacities "≥ 8000". Their ratio 1.00 lies anywhere in
/// [8000/∞, ∞/8000] = [0, ∞): inconclusive, not "not reproduced"; one bound alone decides a
/// claim it exceeds (≥ 8000 > 5000).
#[test]
fn a_ratio_of_two_lower_bounds_is_inconclusive_and_one_bound_can_decide() {
    let e = load();
    let mut r = results(1000.0, 1000.0, 5000.0);
    noise::apply(&e.steps, &mut r);
    let c = check(&e.findings, e.devices.len(), &r);
    assert_eq!(c[0].verdict, Verdict::Inconclusive, "{:?}", c[0]);
    assert_eq!(c[0].interval, Some((0.0, f64::INFINITY)));
    assert!(c[0].why.contains("capacity ≥ 8000"), "{}", c[0].why);
    assert_eq!(c[1].verdict, Verdict::Reproduced, "{:?}", c[1]);
    assert_eq!(value_text(&c[1]), "≥ 8000");
    // b / a = 5000 / 1000, and a agrees with its twin: decided as before.
    assert_eq!((c[2].verdict, c[2].value), (Verdict::Reproduced, Some(5.0)));
    assert!(counts(&c).contains("2 reproduced, 0 not reproduced, 1 inconclusive"));
}

/// papers/002 at smoke scale: identical steps gave 3,664 and 128,943 ops/s. The noise floor is
/// their difference, 125,279: b = 130,000 over a = 3,664 ± 125,279 has a divisor interval
/// [−121,615, 128,943] that holds zero, so the ratio is unbounded: inconclusive.
#[test]
fn identical_steps_that_disagree_make_comparisons_on_them_inconclusive() {
    let e = load();
    let mut r = results(3664.0, 128_943.0, 130_000.0);
    noise::apply(&e.steps, &mut r);
    assert_eq!(r.identical.len(), 1);
    let d = &r.identical[0];
    assert_eq!(d.steps, vec!["a", "a-again"]);
    assert!((d.spread_pct - 100.0 * 125_279.0 / 3664.0).abs() < 1e-9);
    let c = check(&e.findings, e.devices.len(), &r);
    assert_eq!(c[2].verdict, Verdict::Inconclusive, "{:?}", c[2]);
    assert!(
        c[2].why.contains("'a' and 'a-again' ran the same command"),
        "{}",
        c[2].why
    );
    // A difference far above the noise is decided: a = 1000 and 1100 (floor 100), b = 5000:
    // b/a lies in [5000/1100, 5000/900] = [4.55, 5.56] for a, all > 1.
    let mut r = results(1000.0, 1100.0, 5000.0);
    noise::apply(&e.steps, &mut r);
    let c = check(&e.findings, e.devices.len(), &r);
    assert_eq!(c[2].verdict, Verdict::Reproduced, "{:?}", c[2]);
    let (lo, hi) = c[2].interval.unwrap();
    assert!((lo - 5000.0 / 1100.0).abs() < 1e-9 && (hi - 5000.0 / 900.0).abs() < 1e-9);
    // ... and so is one far below it: b = 200 against a in [900, 1100]: b/a ≤ 0.23, not > 1.
    let mut r = results(1000.0, 1100.0, 200.0);
    noise::apply(&e.steps, &mut r);
    assert_eq!(
        check(&e.findings, e.devices.len(), &r)[2].verdict,
        Verdict::NotReproduced
    );
}

fn val(v: f64, lo: f64, hi: f64) -> Val {
    Val {
        lo,
        hi,
        why: vec!["why".into()],
        ..Val::exact(v, false)
    }
}

#[test]
fn the_whole_interval_decides_or_nothing_does() {
    // An upper bound (a search whose lowest rate failed): capacity ≤ 500.
    let up = val(500.0, 0.0, 500.0);
    assert_eq!(decide(&up, "<", 1000.0).0, Verdict::Reproduced);
    assert_eq!(decide(&up, ">", 1000.0).0, Verdict::NotReproduced);
    assert_eq!(decide(&up, ">", 100.0).0, Verdict::Inconclusive);
    // A lower bound decides only on its own side.
    let low = val(1.2, 1.2, f64::INFINITY);
    assert_eq!(decide(&low, ">", 1.0).0, Verdict::Reproduced);
    assert_eq!(decide(&low, "<", 1.0).0, Verdict::NotReproduced);
    assert_eq!(decide(&low, ">=", 1.5).0, Verdict::Inconclusive);
    assert_eq!(decide(&low, "<=", 1.2).0, Verdict::Inconclusive);
}

/// A ratio of 1.00× cannot reproduce a claim of a difference: 1.003 is within 0.5 % of 1.
#[test]
fn a_value_at_the_threshold_is_inconclusive() {
    assert_eq!(
        decide(&Val::exact(1.003, false), ">", 1.0).0,
        Verdict::Inconclusive
    );
    assert_eq!(
        decide(&Val::exact(0.998, false), ">=", 1.0).0,
        Verdict::Inconclusive
    );
    assert_eq!(
        decide(&Val::exact(1.01, false), ">", 1.0).0,
        Verdict::Reproduced
    );
    assert_eq!(
        decide(&Val::exact(0.99, false), ">", 1.0).0,
        Verdict::NotReproduced
    );
    // Against zero there is no scale: 0.001 > 0 is decided.
    assert_eq!(
        decide(&Val::exact(0.001, false), ">", 0.0).0,
        Verdict::Reproduced
    );
}

/// Interval arithmetic through an expression: (x − y) / y with x in [10, 12] and y in [4, 5]
/// is [(10 − 5) / 5, (12 − 4) / 4] = [1, 2].
#[test]
fn intervals_go_through_the_arithmetic() {
    let mut r = Results::default();
    let b = |k: &str, lo: f64, hi: f64| Bound {
        key: k.into(),
        low: lo,
        high: hi,
        why: format!("{k} noisy"),
    };
    r.steps.insert(
        "s".into(),
        step(
            &[("x", 11.0), ("y", 4.5)],
            vec![b("x", 10.0, 12.0), b("y", 4.0, 5.0)],
        ),
    );
    let v = expr::parse("({s:x} - {s:y}) / {s:y}")
        .unwrap()
        .eval(&r)
        .unwrap();
    assert!((v.v - 6.5 / 4.5).abs() < 1e-12);
    assert!(
        (v.lo - 1.0).abs() < 1e-12 && (v.hi - 2.0).abs() < 1e-12,
        "{v:?}"
    );
    assert_eq!(v.why, vec!["x noisy".to_string(), "y noisy".to_string()]);
    // max of [10, 12] and 4.5 exact-free: [max(10, 4), max(12, 5)] = [10, 12].
    let m = expr::parse("max({s:*})").unwrap().eval(&r).unwrap();
    assert_eq!((m.v, m.lo, m.hi), (11.0, 10.0, 12.0));
}
