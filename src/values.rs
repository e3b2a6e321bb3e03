//! Values the flags and options share a syntax for: durations (30s, 2m, or plain seconds),
//! sizes with binary units (4k, 512KiB, 10GiB) and CPU lists (1, 0-3, 0/2/5). A leaf (it
//! imports only `error`), so the planner and the store adapters share it without a circle.
//!
//! Every value here can come from a file, a flag or a published plan, so each is bounded
//! before use: a duration above [`MAX_DURATION`] (which no `Instant` arithmetic can overflow)
//! and a CPU id at or above [`MAX_CPU`] are refused, never expanded or converted.

use crate::error::UsageError;
use std::time::Duration;

/// The longest duration any flag, option or file may give: 100 years. Far beyond any run,
/// and small enough that `Instant::now() + d` (and sums of a few such durations) cannot
/// overflow, so the driver's deadline arithmetic needs no checks on the hot path.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// CPU ids must be below this (Linux's largest NR_CPUS is 8192; 65,536 leaves room), and a
/// list holds at most this many ids, so `cpus=0-18446744073709551615` is refused without
/// expanding it.
pub const MAX_CPU: usize = 1 << 16;

/// `cpus=1`, `cpus=0-3` or `cpus=0/2/5`; `None` for anything else, including ids at or above
/// [`MAX_CPU`] or a list longer than that.
pub fn parse_cpus(v: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in v.split('/') {
        let (a, b): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let a = part.parse().ok()?;
                (a, a)
            }
        };
        if a > b || b >= MAX_CPU || out.len() + (b - a) >= MAX_CPU {
            return None;
        }
        out.extend(a..=b);
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

/// A duration: plain seconds (`1.5`) or humantime (`30s`, `2m`, `1m30s`), at most
/// [`MAX_DURATION`]. NaN, infinity, negative and overflowing values are one clear line.
pub fn parse_duration(flag: &str, s: &str) -> Result<Duration, UsageError> {
    let d = match s.parse::<f64>() {
        // A plain number: `try_` because from_secs_f64 panics at 2^64 s and above.
        Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::try_from_secs_f64(secs).ok(),
        Ok(_) => None,
        Err(_) => humantime::parse_duration(s).ok(),
    };
    match d {
        Some(d) if d <= MAX_DURATION => Ok(d),
        Some(_) => Err(UsageError::new(format!(
            "{flag} '{s}': a duration of at most 100 years (3153600000 s) is expected"
        ))),
        None => Err(UsageError::new(format!(
            "{flag} '{s}': expected a duration such as 30s, 2m or 1m30s (a plain number means seconds)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_that_overflow_are_refused_not_panics() {
        for s in [
            "1e20",
            "1e19",
            "18446744073709551616",
            "18446744073709551615",
            "18446744073709551615s",
            "3153600001",
            "200years",
            "NaN",
            "inf",
            "-1",
            "-0.5s",
            "",
        ] {
            let e = parse_duration("--duration", s).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--duration '{s}': ")), "{s}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(
            parse_duration("--duration", "3153600000").unwrap(),
            MAX_DURATION
        );
        assert_eq!(
            parse_duration("--duration", "1.5").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            parse_duration("--duration", "2m").unwrap(),
            Duration::from_secs(120)
        );
        // The bound leaves Instant arithmetic room to spare.
        let t = std::time::Instant::now();
        assert!(t.checked_add(MAX_DURATION * 4).is_some());
    }

    #[test]
    fn cpu_lists_are_bounded_before_they_are_expanded() {
        assert_eq!(parse_cpus("0-3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpus("0/2/5"), Some(vec![0, 2, 5]));
        assert_eq!(parse_cpus("7"), Some(vec![7]));
        assert_eq!(parse_cpus("65535").map(|v| v.len()), Some(1));
        for bad in [
            "0-18446744073709551615",
            "0-100000000",
            "65536",
            "3-1",
            "0-65535/0-65535",
            "",
            "1/",
            "a-b",
        ] {
            assert_eq!(parse_cpus(bad), None, "{bad}");
        }
    }
}
