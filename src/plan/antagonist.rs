//! `--antagonist` specifications (docs/interference.md): co-located I/O, memory-bandwidth and
//! CPU loads that run during every run phase (papers/000 §memory bandwidth, papers/004).

use crate::error::UsageError;
use crate::values::{parse_cpus, parse_size};
use serde::Serialize;

/// A co-located antagonist (`--antagonist`), running during every run phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Antagonist {
    /// `io:bs=4k,wr=0.3,rr=0.5,n=2`: n O_DIRECT instances.
    Io {
        block_size: usize,
        write_ratio: f64,
        random_ratio: f64,
        instances: usize,
    },
    /// `membw:threads=2,gbps=5` (or `share=0.5` of the calibrated peak, `cpus=0-1` to pin):
    /// memory streaming, throttled when a rate is given.
    Membw {
        threads: usize,
        gb_per_s: Option<f64>,
        share: Option<f64>,
        cpus: Vec<usize>,
    },
    /// `cpu:threads=1,duty=0.5,cpus=1`: busy threads at a duty cycle.
    Cpu {
        threads: usize,
        duty: f64,
        cpus: Vec<usize>,
    },
}

/// The most `--antagonist` specs a plan may hold: each may pin to a list of up to
/// `MAX_CPU` CPUs, so a published plan with thousands of them would cost gigabytes to parse.
pub const MAX_ANTAGONISTS: usize = 64;

impl Antagonist {
    /// Every `--antagonist` of a request, at most [`MAX_ANTAGONISTS`].
    pub fn parse_all(specs: &[String]) -> Result<Vec<Self>, UsageError> {
        if specs.len() > MAX_ANTAGONISTS {
            return Err(UsageError::new(format!(
                "--antagonist: {} given; at most {MAX_ANTAGONISTS}",
                specs.len()
            )));
        }
        specs.iter().map(|a| Self::parse(a)).collect()
    }

    pub fn parse(s: &str) -> Result<Self, UsageError> {
        let bad = |why: &str| UsageError::new(format!("--antagonist '{s}': {why}"));
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut kv = std::collections::HashMap::new();
        for part in rest.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad("expected key=value pairs"))?;
            kv.insert(k.to_string(), v.to_string());
        }
        let num = |k: &str, d: f64, lo: f64, hi: f64| -> Result<f64, UsageError> {
            match kv.get(k) {
                None => Ok(d),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| (lo..=hi).contains(x))
                    .ok_or_else(|| bad(&format!("{k}={v}: expected a number from {lo} to {hi}"))),
            }
        };
        let cpus =
            |kv: &std::collections::HashMap<String, String>| -> Result<Vec<usize>, UsageError> {
                match kv.get("cpus") {
                    None => Ok(vec![]),
                    Some(v) => parse_cpus(v).ok_or_else(|| {
                        bad(&format!(
                            "cpus={v}: expected 1, 0-3 or 0/2/5 with CPU ids below {}",
                            crate::values::MAX_CPU
                        ))
                    }),
                }
            };
        let known = |keys: &[&str]| -> Result<(), UsageError> {
            match kv.keys().find(|k| !keys.contains(&k.as_str())) {
                Some(k) => Err(bad(&format!(
                    "unknown key '{k}'; expected {}",
                    keys.join(", ")
                ))),
                None => Ok(()),
            }
        };
        match kind {
            "io" => {
                known(&["bs", "wr", "rr", "n"])?;
                let bs = match kv.get("bs") {
                    Some(v) => parse_size("--antagonist io:bs", v)? as usize,
                    None => 4096,
                };
                if bs % 512 != 0 || bs > crate::antagonist::io::MAX_BLOCK {
                    return Err(bad("bs: expected a multiple of 512 bytes up to 4 MiB"));
                }
                Ok(Antagonist::Io {
                    block_size: bs,
                    write_ratio: num("wr", 0.0, 0.0, 1.0)?,
                    random_ratio: num("rr", 0.5, 0.0, 1.0)?,
                    instances: num("n", 1.0, 1.0, 64.0)? as usize,
                })
            }
            "membw" => {
                known(&["threads", "gbps", "share", "cpus"])?;
                if kv.contains_key("gbps") && kv.contains_key("share") {
                    return Err(bad("give gbps or share, not both"));
                }
                Ok(Antagonist::Membw {
                    threads: num("threads", 1.0, 1.0, 1024.0)? as usize,
                    gb_per_s: match kv.get("gbps") {
                        Some(_) => Some(num("gbps", 1.0, 0.001, 10000.0)?),
                        None => None,
                    },
                    share: match kv.get("share") {
                        Some(_) => Some(num("share", 1.0, 0.001, 1.0)?),
                        None => None,
                    },
                    cpus: cpus(&kv)?,
                })
            }
            "cpu" => {
                known(&["threads", "duty", "cpus"])?;
                Ok(Antagonist::Cpu {
                    threads: num("threads", 1.0, 1.0, 1024.0)? as usize,
                    duty: num("duty", 1.0, 0.0, 1.0)?,
                    cpus: cpus(&kv)?,
                })
            }
            _ => Err(bad("expected io:..., membw:... or cpu:...")),
        }
    }
}
