//! The fitted workload models' properties (docs/workloads-models.md): `workload=mixgraph` and its
//! `mixgraph.*` settings (db_bench's flag names) → `MixGraphConfig` and the schedule's sine,
//! checked with the property and its source named. Facebook ETC's names (`fb_key`, `fb_value`,
//! `fb_ia`) are values of ordinary properties and are read in `plan::workload`.

use super::props::Props;
use crate::error::UsageError;
use crate::workload::mixgraph::{Gpd, MixGraphConfig, SineRate};

/// The `workload` values kvmeter runs: YCSB's core workload (its Java class names) and
/// db_bench's mixgraph model.
pub(super) fn is_mixgraph(p: &Props) -> bool {
    p.get("workload")
        .is_some_and(|v| v.value.trim() == "mixgraph")
}

/// A `mixgraph.` property as a finite number.
fn num(p: &Props, k: &str, default: f64) -> Result<f64, UsageError> {
    p.float(&format!("mixgraph.{k}"), default)
}

fn gpd(p: &Props, prefix: &str, d: Gpd) -> Result<Gpd, UsageError> {
    let g = Gpd {
        theta: num(p, &format!("{prefix}_theta"), d.theta)?,
        k: num(p, &format!("{prefix}_k"), d.k)?,
        sigma: num(p, &format!("{prefix}_sigma"), d.sigma)?,
    };
    if g.sigma <= 0.0 {
        return Err(p.bad(
            &format!("mixgraph.{prefix}_sigma"),
            "a positive scale σ of the generalized Pareto distribution",
        ));
    }
    Ok(g)
}

/// A `mixgraph.` whole number within `range`.
fn whole(p: &Props, k: &str, default: i64, lo: i64, hi: i64) -> Result<i64, UsageError> {
    let name = format!("mixgraph.{k}");
    let v = p.int(&name, default)?;
    if !(lo..=hi).contains(&v) {
        return Err(p.bad(&name, &format!("a whole number from {lo} to {hi}")));
    }
    Ok(v)
}

/// `workload=mixgraph`'s model, or None for YCSB's core workload.
pub(super) fn mixgraph(p: &Props) -> Result<Option<MixGraphConfig>, UsageError> {
    if !is_mixgraph(p) {
        if let Some(k) = p.names().find(|k| k.starts_with("mixgraph.")) {
            return Err(p.bad(k, "-p workload=mixgraph with it (a mixgraph.* setting)"));
        }
        return Ok(None);
    }
    let d = MixGraphConfig::default();
    let mut ratios = [0.0; 3];
    for (i, (k, v)) in [
        ("mix_get_ratio", d.mix_get_ratio),
        ("mix_put_ratio", d.mix_put_ratio),
        ("mix_seek_ratio", d.mix_seek_ratio),
    ]
    .into_iter()
    .enumerate()
    {
        ratios[i] = num(p, k, v)?;
        if ratios[i] < 0.0 {
            return Err(p.bad(&format!("mixgraph.{k}"), "a ratio ≥ 0"));
        }
    }
    if ratios.iter().sum::<f64>() <= 0.0 {
        return Err(UsageError::new(
            "mixgraph.mix_get_ratio, mix_put_ratio and mix_seek_ratio are all 0: expected at least one positive ratio",
        ));
    }
    let mut keyrange_dist = [0.0; 4];
    for (i, k) in ["a", "b", "c", "d"].into_iter().enumerate() {
        keyrange_dist[i] = num(p, &format!("keyrange_dist_{k}"), 0.0)?;
    }
    let key_dist_a = num(p, "key_dist_a", d.key_dist_a)?;
    if !(0.0..=1.0).contains(&key_dist_a) {
        return Err(p.bad(
            "mixgraph.key_dist_a",
            "a from 0 to 1 in the power law F(x) = a·x^b (0 = uniform keys)",
        ));
    }
    let key_dist_b = num(p, "key_dist_b", d.key_dist_b)?;
    if key_dist_b < 0.0 {
        return Err(p.bad("mixgraph.key_dist_b", "b ≥ 0 (0 = uniform keys)"));
    }
    Ok(Some(MixGraphConfig {
        value: gpd(p, "value", d.value)?,
        mix_max_value_size: whole(p, "mix_max_value_size", 1024, 10, 64 << 20)?,
        iter: gpd(p, "iter", d.iter)?,
        mix_max_scan_len: whole(p, "mix_max_scan_len", 10000, 1, 1 << 20)?,
        key_dist_a,
        key_dist_b,
        keyrange_dist,
        keyrange_num: whole(p, "keyrange_num", 1, 1, 1024)?,
        mix_get_ratio: ratios[0],
        mix_put_ratio: ratios[1],
        mix_seek_ratio: ratios[2],
        sine: sine(p)?,
    }))
}

/// `mixgraph.sine_mix_rate=true`: the QPS sine (and its noise), checked so the rate stays
/// positive everywhere (Λ must increase for the schedule to invert it).
pub(super) fn sine(p: &Props) -> Result<Option<SineRate>, UsageError> {
    let on = match p.get("mixgraph.sine_mix_rate").map(|v| v.value.trim()) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(_) => return Err(p.bad("mixgraph.sine_mix_rate", "true or false")),
    };
    if !on || !is_mixgraph(p) {
        return Ok(None);
    }
    let s = SineRate {
        a: num(p, "sine_a", 1.0)?,
        b: num(p, "sine_b", 1.0)?,
        c: num(p, "sine_c", 0.0)?,
        d: num(p, "sine_d", 1.0)?,
        noise: num(p, "sine_mix_rate_noise", 0.0)?,
        interval_ms: whole(
            p,
            "sine_mix_rate_interval_milliseconds",
            10000,
            1,
            86_400_000,
        )? as u64,
    };
    if !(0.0..=1.0).contains(&s.noise) {
        return Err(p.bad("mixgraph.sine_mix_rate_noise", "a ratio from 0 to 1"));
    }
    if s.b < 0.0 {
        return Err(p.bad(
            "mixgraph.sine_b",
            "an angular frequency ≥ 0 (radians per second)",
        ));
    }
    if s.d > 1e9 || s.a.abs() > 1e9 {
        return Err(p.bad("mixgraph.sine_d", "at most 1e9 operations per second"));
    }
    if s.floor() <= 0.0 {
        return Err(UsageError::new(format!(
            "mixgraph.sine_d ({}) must exceed |sine_a| ({}) × (1 + sine_mix_rate_noise ({}) / 2) so the rate a·sin(b·t + c) + d stays positive; raise sine_d or lower sine_a",
            s.d,
            s.a.abs(),
            s.noise
        )));
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> Props {
        let mut p = Props::default();
        for (k, v) in kv {
            p.set(k, v.to_string(), format!("-p {k}"));
        }
        p
    }

    #[test]
    fn mixgraph_reads_db_bench_names_and_defaults() {
        let p = props(&[
            ("workload", "mixgraph"),
            ("mixgraph.value_k", "0.1033"),
            ("mixgraph.mix_get_ratio", "0.8"),
            ("mixgraph.mix_put_ratio", "0.2"),
            ("mixgraph.keyrange_num", "30"),
        ]);
        let m = mixgraph(&p).unwrap().unwrap();
        assert_eq!(m.value.k, 0.1033);
        assert_eq!(m.value.sigma, 25.45);
        assert_eq!(m.iter.k, 2.517);
        assert_eq!((m.mix_get_ratio, m.mix_put_ratio), (0.8, 0.2));
        assert_eq!(m.keyrange_num, 30);
        assert!(m.sine.is_none());
        assert!(mixgraph(&props(&[])).unwrap().is_none());
    }

    #[test]
    fn bad_mixgraph_settings_name_the_property() {
        let e = |kv: &[(&str, &str)]| {
            let mut all = vec![("workload", "mixgraph")];
            all.extend_from_slice(kv);
            mixgraph(&props(&all)).unwrap_err().to_string()
        };
        assert!(e(&[("mixgraph.value_sigma", "0")]).contains("mixgraph.value_sigma"));
        assert!(e(&[("mixgraph.mix_get_ratio", "-1")]).contains("mixgraph.mix_get_ratio"));
        assert!(e(&[("mixgraph.keyrange_num", "5000")]).contains("from 1 to 1024"));
        let s = e(&[
            ("mixgraph.sine_mix_rate", "true"),
            ("mixgraph.sine_a", "100"),
            ("mixgraph.sine_d", "100"),
        ]);
        assert!(s.contains("stays positive"), "{s}");
        let p = props(&[("mixgraph.value_k", "1")]);
        assert!(mixgraph(&p)
            .unwrap_err()
            .to_string()
            .contains("workload=mixgraph"));
    }
}
