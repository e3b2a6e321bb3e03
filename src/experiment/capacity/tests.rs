//! The capacity search's rules: the SLO terms, the next rate, the bounds and the verdicts.

use super::*;

fn settings() -> Settings {
    Settings {
        slo: vec![Term::parse("mean<1ms").unwrap()],
        require_achieved: false,
        start_rate: 1000.0,
        max_rate: 1e6,
        factor: 2.0,
        precision: 0.05,
        repeat: 3,
        max_points: 30,
        sustainable: false,
    }
}

#[test]
fn slo_terms_parse_with_units_and_reject_the_rest() {
    assert_eq!(
        Term::parse("mean<1ms").unwrap(),
        Term {
            stat: "mean".into(),
            bound_us: 1000.0
        }
    );
    assert_eq!(Term::parse("p99.9<250us").unwrap().bound_us, 250.0);
    assert_eq!(Term::parse("P99 < 2s").unwrap().bound_us, 2e6);
    for bad in ["mean", "p42<1ms", "mean<1", "mean<0ms", "p99>1ms"] {
        assert!(Term::parse(bad).is_err(), "{bad}");
    }
}

/// The search against a store whose capacity is known: mean latency rises past 1 ms at
/// exactly 37,000 ops/s. Steps 1k, 2k, … 64k, then bisects to within 5 %.
#[test]
fn the_search_brackets_a_known_capacity() {
    let s = settings();
    let truth = 37_000.0;
    let (mut lo, mut hi) = (None, None);
    let mut rate = s.start_rate;
    let mut tried = vec![];
    loop {
        tried.push(rate);
        if rate <= truth {
            lo = Some(lo.map_or(rate, |l: f64| l.max(rate)));
        } else {
            hi = Some(hi.map_or(rate, |h: f64| h.min(rate)));
        }
        match next_rate(lo, hi, rate, &s) {
            Some(r) => rate = r,
            None => break,
        }
    }
    let (l, h) = (lo.unwrap(), hi.unwrap());
    assert!(l <= truth && truth < h, "{l} .. {h}");
    assert!((h - l) / l <= 0.05);
    assert_eq!(&tried[..7], &[1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 64e3]);
    assert!(tried.len() <= 12, "{tried:?}");
}

#[test]
fn a_search_that_never_failed_is_a_lower_bound_and_one_that_never_passed_an_upper() {
    assert_eq!(
        bound_of(Some(8000.0), None),
        (Some("lower"), "≥ 8000 ops/s".to_string())
    );
    assert_eq!(
        bound_of(None, Some(500.0)),
        (Some("upper"), "≤ 500 ops/s".to_string())
    );
    assert_eq!(bound_of(Some(1e5), Some(1.1e5)).0, Some("bracketed"));
    assert_eq!(bound_of(None, None).0, None);
}

#[test]
fn a_failing_start_steps_down_and_a_passing_max_stops() {
    let s = settings();
    assert_eq!(next_rate(None, Some(1000.0), 1000.0, &s), Some(500.0));
    assert_eq!(next_rate(Some(1e6), None, 1e6, &s), None);
    assert_eq!(next_rate(Some(6e5), None, 6e5, &s), Some(1e6));
}

#[test]
fn repeated_runs_are_judged_on_their_median() {
    let s = settings();
    let p = |mean: f64| Point {
        offered_ops_per_s: 1000.0,
        repetition: 1,
        achieved_ops_per_s: 1000.0,
        achieved_ratio: 1.0,
        kept_up: true,
        mean_us: mean,
        p50_us: 0.0,
        p90_us: 0.0,
        p99_us: 0.0,
        p99_9_us: 0.0,
        service_mean_us: 0.0,
        service_p99_us: 0.0,
        run_dir: String::new(),
        sustain: None,
    };
    // One noisy run over the bound, two under: passes on the median (950 µs).
    let v = judge(1000.0, &[p(950.0), p(1400.0), p(900.0)], &s);
    assert!(v.pass);
    assert_eq!(v.figures, vec![("mean".to_string(), 950.0)]);
    assert!(!judge(1000.0, &[p(1001.0)], &s).pass);
    assert!(near_bound(&p(950.0), &s) && !near_bound(&p(500.0), &s));
}
