//! The cost model (`--cost FILE` on `kvmeter report`): how many nodes of each machine serve a
//! demand at the SLO, what they draw and cost over their life, and at what purchase price a
//! slower but thriftier machine breaks even — papers/003 §V-E and Table II (nodes bound by
//! memory, capacity and power summed over nodes, TPS/W) and papers/000's argument that the
//! low-power server wins "if it has a purchase price around 3x lower".
//!
//! Every assumption is in the file and printed with the result. Power must say what it covers
//! (`wall`, or another scope with a `wall_multiplier`: RAPL's package zone is not the wall),
//! and a machine whose power is an estimate makes its whole cost an estimate, labelled so.
//!
//! A capacity that is only a bound (a search that ended with every rate passing gives
//! "≥ X ops/s", capacity.json's `capacity_bound`) is carried as an interval through the
//! model: the node count, energy and TCO become ranges ("32–335"), and a break-even price is
//! given only where every capacity in the interval agrees on it; where it could be negative
//! it is "inconclusive", with why. A negative price is never printed as one: a machine whose
//! energy alone costs more than the reference's TCO has no break-even price.

use crate::error::UsageError;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The cost file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CostFile {
    pub demand: Demand,
    #[serde(default)]
    pub site: Site,
    #[serde(rename = "machine")]
    pub machines: Vec<Machine>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Demand {
    /// Operations per second to serve at the SLO.
    pub ops_per_s: f64,
    /// Data to hold in memory, GB.
    pub dataset_gb: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// Power usage effectiveness: facility power over IT power.
    pub pue: f64,
    pub usd_per_kwh: f64,
    /// The average load as a share of the demand (0..1): power between idle and load.
    pub utilization: f64,
}

impl Default for Site {
    fn default() -> Self {
        Site {
            pue: 1.0,
            usd_per_kwh: 0.0,
            utilization: 1.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub name: String,
    /// Operations per second one node serves at the SLO (a capacity result).
    #[serde(default)]
    pub capacity_ops_per_s: Option<f64>,
    /// A `kvmeter capacity` directory whose capacity.json gives `capacity_ops_per_s`.
    #[serde(default)]
    pub capacity_from: Option<String>,
    pub memory_gb: f64,
    pub power_load_w: f64,
    #[serde(default)]
    pub power_idle_w: Option<f64>,
    /// What the power figures cover: wall, psu, package (RAPL), or another named scope.
    pub power_scope: String,
    /// Wall power per watt of the given scope; required unless the scope is the wall.
    #[serde(default)]
    pub wall_multiplier: Option<f64>,
    /// The power figures are an estimate (a model, not a meter).
    #[serde(default)]
    pub power_estimate: bool,
    /// Purchase price of one node, $.
    #[serde(default)]
    pub price_usd: f64,
    #[serde(default = "three")]
    pub lifetime_years: f64,
}

fn three() -> f64 {
    3.0
}

/// One machine's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MachineCost {
    pub name: String,
    pub nodes: u64,
    /// "memory" or "throughput": what decides the node count.
    pub bound_by: String,
    pub capacity_ops_per_s: f64,
    pub power_load_w: f64,
    pub ops_per_s_per_w: f64,
    pub energy_kwh: f64,
    pub energy_usd: f64,
    pub capex_usd: f64,
    pub tco_usd: f64,
    pub usd_per_billion_ops: f64,
    /// The node price at which this machine's TCO equals the first machine's; none for the
    /// reference, where there is no such price, and where a bound leaves it undecided.
    pub break_even_price_usd: Option<f64>,
    pub estimate: bool,
    /// "lower", "upper" or "bracketed" when the capacity is not one figure (capacity.json's
    /// capacity_bound); the figures above are then at the capacity's measured end, and
    /// `ranges` holds what every capacity in the interval gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bound: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Ranges>,
    /// The break-even price as it should be read ("reference", "1234", "≥ 800", "none: ...",
    /// "inconclusive: ...").
    pub break_even: String,
}

/// The interval of each figure over the capacity's interval (`[lo, hi]`; null for an open
/// side in JSON).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ranges {
    pub capacity_per_node_ops_per_s: (f64, f64),
    pub nodes: (f64, f64),
    pub capacity_ops_per_s: (f64, f64),
    pub power_load_w: (f64, f64),
    pub ops_per_s_per_w: (f64, f64),
    pub energy_usd: (f64, f64),
    pub tco_usd: (f64, f64),
    pub usd_per_billion_ops: (f64, f64),
}

/// "1234", "≥ 1234", "≤ 1234" or "1000–1234", at `decimals` places.
pub fn range_text((lo, hi): (f64, f64), decimals: usize) -> String {
    let f = |x: f64| format!("{x:.decimals$}");
    match (lo.is_finite(), hi.is_finite()) {
        _ if lo == hi => f(lo),
        (true, false) => format!("≥ {}", f(lo)),
        (false, true) => format!("≤ {}", f(hi)),
        (true, true) => format!("{}–{}", f(lo), f(hi)),
        _ => "unbounded".into(),
    }
}

pub fn load(path: &Path) -> Result<CostFile, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError::new(format!("--cost {}: cannot read it: {e}", path.display())))?;
    let f: CostFile = toml::from_str(&text).map_err(|e| {
        // toml's message is a framed excerpt over several lines: keep where and what.
        let text = e.to_string();
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let place = lines
            .first()
            .map(|l| l.trim_start_matches("TOML parse error at "))
            .unwrap_or("");
        let what = lines.last().copied().unwrap_or("");
        UsageError::new(format!("--cost {}: {place}: {what}", path.display()))
    })?;
    f.check(path)?;
    Ok(f)
}

impl CostFile {
    pub fn check(&self, path: &Path) -> Result<(), UsageError> {
        let bad = |what: String| UsageError::new(format!("--cost {}: {what}", path.display()));
        if self.machines.is_empty() {
            return Err(bad("no [[machine]]: expected at least one".into()));
        }
        if !(self.demand.ops_per_s > 0.0 && self.demand.dataset_gb >= 0.0) {
            return Err(bad(
                "[demand] ops_per_s must be > 0 and dataset_gb ≥ 0".into()
            ));
        }
        let s = &self.site;
        if !(s.pue >= 1.0 && s.usd_per_kwh >= 0.0 && (0.0..=1.0).contains(&s.utilization)) {
            return Err(bad(
                "[site] expected pue ≥ 1, usd_per_kwh ≥ 0, utilization from 0 to 1".into(),
            ));
        }
        for m in &self.machines {
            let name = &m.name;
            if m.capacity_ops_per_s.is_none() == m.capacity_from.is_none() {
                return Err(bad(format!(
                    "machine '{name}': give capacity_ops_per_s or capacity_from, one of them"
                )));
            }
            if m.power_scope != "wall" && m.wall_multiplier.is_none() {
                return Err(bad(format!(
                    "machine '{name}': power_scope '{}' is not the wall: give wall_multiplier (wall watts per watt of that scope; RAPL's package zone leaves out memory, disks, fans and the PSU)",
                    m.power_scope
                )));
            }
            if !(m.memory_gb > 0.0
                && m.power_load_w > 0.0
                && m.lifetime_years > 0.0
                && m.price_usd >= 0.0)
            {
                return Err(bad(format!("machine '{name}': memory_gb, power_load_w and lifetime_years must be > 0, price_usd ≥ 0")));
            }
        }
        Ok(())
    }
}

/// A capacity experiment's capacity (ops/s): the figure, and the interval it lies in with
/// what kind of bound it is when the search did not bracket it to one figure.
struct Capacity {
    value: f64,
    interval: (f64, f64),
    bound: Option<String>,
}

fn capacity_of(dir: &Path) -> Result<Capacity, UsageError> {
    let path = dir.join("capacity.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| UsageError::new(format!("capacity_from {}: {e}", path.display())))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| UsageError::new(format!("capacity_from {}: {e}", path.display())))?;
    let lo = v["capacity_ops_per_s"].as_f64();
    let hi = v["upper_bound_ops_per_s"].as_f64();
    let positive = |x: f64| x.is_finite() && x > 0.0;
    match (lo, hi) {
        (Some(l), Some(h)) if positive(l) && h >= l => Ok(Capacity {
            value: l,
            interval: (l, h),
            bound: Some("bracketed".into()),
        }),
        (Some(l), None) if positive(l) => Ok(Capacity {
            value: l,
            interval: (l, f64::INFINITY),
            bound: Some("lower".into()),
        }),
        (None, Some(h)) if positive(h) => Ok(Capacity {
            value: h,
            interval: (0.0, h),
            bound: Some("upper".into()),
        }),
        _ => Err(UsageError::new(format!(
            "capacity_from {}: the search found no capacity ({})",
            path.display(),
            v["note"].as_str().unwrap_or("")
        ))),
    }
}

const HOURS_PER_YEAR: f64 = 365.25 * 24.0;

/// One machine at one capacity per node: nodes, energy $, TCO $.
fn at(f: &CostFile, m: &Machine, cap: f64) -> (u64, f64, f64, f64) {
    let by_memory = (f.demand.dataset_gb / m.memory_gb).ceil().max(1.0);
    let by_throughput = (f.demand.ops_per_s / cap).ceil().max(1.0);
    let nodes = by_memory.max(by_throughput);
    let wall = m.wall_multiplier.unwrap_or(1.0);
    let load_w = m.power_load_w * wall;
    let idle_w = m.power_idle_w.unwrap_or(m.power_load_w) * wall;
    let avg_w = idle_w + (load_w - idle_w) * f.site.utilization;
    let hours = m.lifetime_years * HOURS_PER_YEAR;
    let energy_kwh = nodes * avg_w * f.site.pue * hours / 1000.0;
    let energy_usd = energy_kwh * f.site.usd_per_kwh;
    let tco_usd = nodes * m.price_usd + energy_usd;
    // A capacity of zero (an upper bound's open end) needs unboundedly many nodes.
    let n = if nodes.is_finite() {
        nodes as u64
    } else {
        u64::MAX
    };
    (n, energy_kwh, energy_usd, tco_usd)
}

/// Evaluates every machine; `base` resolves `capacity_from` paths.
pub fn evaluate(f: &CostFile, base: &Path) -> Result<Vec<MachineCost>, UsageError> {
    let mut out: Vec<MachineCost> = vec![];
    for m in &f.machines {
        let cap = match (m.capacity_ops_per_s, &m.capacity_from) {
            (Some(c), _) => Capacity {
                value: c,
                interval: (c, c),
                bound: None,
            },
            (None, Some(d)) => capacity_of(&base.join(d))?,
            (None, None) => unreachable!("checked"),
        };
        let by_memory = (f.demand.dataset_gb / m.memory_gb).ceil().max(1.0) as u64;
        let (nodes, energy_kwh, energy_usd, tco_usd) = at(f, m, cap.value);
        let load_w = m.power_load_w * m.wall_multiplier.unwrap_or(1.0);
        let hours = m.lifetime_years * HOURS_PER_YEAR;
        let ops = f.demand.ops_per_s * f.site.utilization * hours * 3600.0;
        let per_billion = |tco: f64| {
            if ops > 0.0 {
                tco / (ops / 1e9)
            } else {
                f64::NAN
            }
        };
        // Fewest nodes at the interval's high end, most at its low end.
        let ranges = cap.bound.as_ref().map(|_| {
            let (cl, ch) = cap.interval;
            let (n_lo, _, e_lo, t_lo) = at(f, m, ch);
            let (n_hi, _, e_hi, t_hi) = at(f, m, cl);
            let nf = |n: u64| {
                if n == u64::MAX {
                    f64::INFINITY
                } else {
                    n as f64
                }
            };
            Ranges {
                capacity_per_node_ops_per_s: (cl, ch),
                nodes: (nf(n_lo), nf(n_hi)),
                capacity_ops_per_s: (nf(n_lo) * cl, nf(n_hi) * ch),
                power_load_w: (nf(n_lo) * load_w, nf(n_hi) * load_w),
                ops_per_s_per_w: (cl / load_w, ch / load_w),
                energy_usd: (e_lo, e_hi),
                tco_usd: (t_lo, t_hi),
                usd_per_billion_ops: (per_billion(t_lo), per_billion(t_hi)),
            }
        });
        out.push(MachineCost {
            name: m.name.clone(),
            nodes,
            bound_by: if by_memory >= nodes {
                "memory"
            } else {
                "throughput"
            }
            .into(),
            capacity_ops_per_s: nodes as f64 * cap.value,
            power_load_w: nodes as f64 * load_w,
            ops_per_s_per_w: cap.value / load_w,
            energy_kwh,
            energy_usd,
            capex_usd: nodes as f64 * m.price_usd,
            tco_usd,
            usd_per_billion_ops: per_billion(tco_usd),
            break_even_price_usd: None,
            estimate: m.power_estimate,
            capacity_bound: cap.bound,
            ranges,
            break_even: "reference".into(),
        });
    }
    break_even(&mut out);
    Ok(out)
}

/// The node price at which each machine's TCO equals the first machine's: the reference's
/// TCO over the machine's nodes, less one node's energy. It falls as nodes rise, so over
/// intervals its ends come from the reference's lowest TCO with the most nodes and the
/// highest with the fewest.
fn break_even(out: &mut [MachineCost]) {
    let range = |c: &MachineCost| {
        c.ranges
            .as_ref()
            .map(|r| (r.nodes, r.tco_usd))
            .unwrap_or(((c.nodes as f64, c.nodes as f64), (c.tco_usd, c.tco_usd)))
    };
    let (_, (r_lo, r_hi)) = range(&out[0]);
    let reference_bound = out[0].capacity_bound.is_some() && r_lo < r_hi;
    for c in out.iter_mut().skip(1) {
        let ((n_lo, n_hi), _) = range(c);
        let energy_per_node = c.energy_usd / c.nodes as f64;
        let lo = r_lo / n_hi - energy_per_node;
        let hi = r_hi / n_lo - energy_per_node;
        let bounded = reference_bound || n_lo < n_hi;
        c.break_even = if hi <= 0.0 {
            "none: its energy alone costs more than the reference's whole TCO".into()
        } else if lo < 0.0 {
            format!(
                "inconclusive: between none and {hi:.0}, the capacity being only {}",
                bound_words(c.capacity_bound.as_deref().or(out_bound(reference_bound)))
            )
        } else if bounded {
            range_text((lo, hi), 0)
        } else {
            format!("{lo:.0}")
        };
        c.break_even_price_usd = (lo >= 0.0 && !bounded).then_some(lo);
    }
}

fn out_bound(reference_bound: bool) -> Option<&'static str> {
    reference_bound.then_some("reference")
}

fn bound_words(b: Option<&str>) -> &'static str {
    match b {
        Some("lower") => "a lower bound (a search with every rate passing)",
        Some("upper") => "an upper bound (a search with every rate failing)",
        Some("reference") => "a bound for the reference machine",
        _ => "known between two rates",
    }
}

/// A machine's figures as printed: ranges where its capacity is a bound.
pub struct Texts {
    pub nodes: String,
    pub capacity: String,
    pub power_w: String,
    pub ops_per_s_per_w: String,
    pub energy_usd: String,
    pub tco_usd: String,
    pub usd_per_billion_ops: String,
    pub break_even: String,
}

pub fn texts(c: &MachineCost) -> Texts {
    let one = |x: f64| (x, x);
    let r = c.ranges.clone().unwrap_or(Ranges {
        capacity_per_node_ops_per_s: one(0.0),
        nodes: one(c.nodes as f64),
        capacity_ops_per_s: one(c.capacity_ops_per_s),
        power_load_w: one(c.power_load_w),
        ops_per_s_per_w: one(c.ops_per_s_per_w),
        energy_usd: one(c.energy_usd),
        tco_usd: one(c.tco_usd),
        usd_per_billion_ops: one(c.usd_per_billion_ops),
    });
    Texts {
        nodes: range_text(r.nodes, 0),
        capacity: range_text(r.capacity_ops_per_s, 0),
        power_w: range_text(r.power_load_w, 0),
        ops_per_s_per_w: range_text(r.ops_per_s_per_w, 0),
        energy_usd: range_text(r.energy_usd, 0),
        tco_usd: range_text(r.tco_usd, 0),
        usd_per_billion_ops: range_text(r.usd_per_billion_ops, 3),
        break_even: if c.break_even.starts_with("inconclusive") {
            "inconclusive".into()
        } else if c.break_even.starts_with("none") {
            "none".into()
        } else {
            c.break_even.clone()
        },
    }
}

/// The result as text, every assumption first.
pub fn render(f: &CostFile, r: &[MachineCost]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cost model: demand {} ops/s at the SLO, {} GB in memory; PUE {}, ${}/kWh, average load {:.0} % of the demand",
        f.demand.ops_per_s, f.demand.dataset_gb, f.site.pue, f.site.usd_per_kwh, f.site.utilization * 100.0
    );
    for m in &f.machines {
        let _ = writeln!(
            out,
            "  {}: {} GB, {} W at load{} ({}{}), ${} per node, {} years{}",
            m.name,
            m.memory_gb,
            m.power_load_w,
            m.power_idle_w
                .map(|w| format!(", {w} W idle"))
                .unwrap_or_default(),
            m.power_scope,
            m.wall_multiplier
                .map(|x| format!(" × {x} to the wall"))
                .unwrap_or_default(),
            m.price_usd,
            m.lifetime_years,
            if m.power_estimate {
                "; power is an ESTIMATE"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        out,
        "  {:<28} {:>6} {:>11} {:>13} {:>10} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "machine",
        "nodes",
        "bound by",
        "capacity/s",
        "power W",
        "ops/s/W",
        "energy $",
        "TCO $",
        "$/1e9 ops",
        "break-even $"
    );
    for c in r {
        let t = texts(c);
        let _ = writeln!(
            out,
            "  {:<28} {:>6} {:>11} {:>13} {:>10} {:>10} {:>12} {:>12} {:>10} {:>12}{}",
            c.name,
            t.nodes,
            c.bound_by,
            t.capacity,
            t.power_w,
            t.ops_per_s_per_w,
            t.energy_usd,
            t.tco_usd,
            t.usd_per_billion_ops,
            t.break_even,
            if c.estimate { "  ESTIMATE" } else { "" }
        );
    }
    for c in r.iter().filter(|c| c.capacity_bound.is_some()) {
        let _ = writeln!(
            out,
            "  {}: its capacity is {} ({} ops/s per node), so its figures are ranges over it",
            c.name,
            bound_words(c.capacity_bound.as_deref()),
            c.ranges
                .as_ref()
                .map(|r| range_text(r.capacity_per_node_ops_per_s, 0))
                .unwrap_or_default()
        );
    }
    out
}

#[cfg(test)]
mod tests;
