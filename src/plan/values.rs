//! Values the flags and options share a syntax for: durations (30s, 2m, or plain seconds),
//! sizes with binary units (4k, 512KiB, 10GiB) and CPU lists (1, 0-3, 0/2/5).

use crate::error::UsageError;
use std::time::Duration;

/// `cpus=1`, `cpus=0-3` or `cpus=0/2/5`.
pub fn parse_cpus(v: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in v.split('/') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A size such as 4k, 512KiB, 10G, 10GiB (binary units) or plain bytes.
pub fn parse_size(flag: &str, s: &str) -> Result<u64, UsageError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => 0,
    };
    match num.parse::<f64>() {
        Ok(n) if mult > 0 && n > 0.0 => Ok((n * mult as f64) as u64),
        _ => Err(UsageError::new(format!(
            "{flag} '{s}': expected a size such as 4k, 512KiB or 10GiB"
        ))),
    }
}

pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, UsageError> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s).map_err(|_| {
        UsageError::new(format!(
            "{flag} '{s}': expected a duration such as 30s, 2m or 1m30s (a plain number means seconds)"
        ))
    })
}
