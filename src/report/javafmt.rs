//! Java's number formats, for the YCSB text report (ycsb-workload-spec §8.7, §8.8, §12.10):
//! `Double.toString`, `DecimalFormat("#.##")` and the status line's remaining-time format.

/// Java `Double.toString` (JDK 19+ shortest round-trip digits).
pub fn double_to_string(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{:e}", x.abs());
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    let a = x.abs();
    if (1e-3..1e7).contains(&a) {
        let point = exp + 1; // digits before the decimal point
        let s = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{s}")
    } else {
        let frac = if digits.len() > 1 { &digits[1..] } else { "0" };
        format!("{sign}{}.{}E{}", &digits[..1], frac, exp)
    }
}

/// `DecimalFormat("#.##")`: at most two fraction digits, HALF_EVEN on the exact binary value,
/// no trailing zeros, `∞` for infinity.
pub fn two_decimals(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞".into() } else { "-∞".into() };
    }
    // Rust formats the exact binary value; exact ties (representable x.xx5) round to even.
    let s = format!("{:.2}", x);
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "-0".into()
    } else {
        s
    }
}

/// `RemainingFormatter` (§8.7), with its one-digit "second" quirk.
pub fn remaining(secs: u64) -> String {
    let days = secs / 86_400;
    let hours = (secs % 86_400) / 3_600;
    let minutes = (secs % 3_600) / 60;
    let seconds = secs % 60;
    let mut s = String::new();
    let unit = |n: u64, one: &str| {
        if n == 1 {
            format!("{n} {one} ")
        } else {
            format!("{n} {one}s ")
        }
    };
    if days > 0 {
        s += &unit(days, "day");
    }
    if hours > 0 {
        s += &unit(hours, "hour");
    }
    if days == 0 && minutes > 0 {
        s += &unit(minutes, "minute");
    }
    if s.is_empty() {
        let n = seconds;
        s = if n < 10 {
            format!("{n} second ")
        } else {
            format!("{n} seconds ")
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_to_string_12_10() {
        assert_eq!(double_to_string(0.0), "0.0");
        assert_eq!(double_to_string(1.0), "1.0");
        assert_eq!(double_to_string(123.0), "123.0");
        assert_eq!(
            double_to_string(1000.0 * 1000.0 / 1234.0),
            "810.3727714748784"
        );
        assert_eq!(double_to_string(1.0e7), "1.0E7");
        assert_eq!(double_to_string(9999999.0), "9999999.0");
        assert_eq!(double_to_string(12345678.9), "1.23456789E7");
        assert_eq!(double_to_string(0.001), "0.001");
        assert_eq!(double_to_string(0.0009), "9.0E-4");
        assert_eq!(double_to_string(50.5), "50.5");
        assert_eq!(double_to_string(f64::NAN), "NaN");
        assert_eq!(double_to_string(7000.0 / 3.0), "2333.3333333333335");
        assert_eq!(double_to_string(1964.6365422396857), "1964.6365422396857");
        assert_eq!(double_to_string(0.49902912621359224), "0.49902912621359224");
    }

    #[test]
    fn two_decimals_12_10() {
        assert_eq!(two_decimals(0.0), "0");
        assert_eq!(two_decimals(0.005), "0.01");
        assert_eq!(two_decimals(0.015), "0.01");
        assert_eq!(two_decimals(1.0), "1");
        assert_eq!(two_decimals(1234.5678), "1234.57");
        assert_eq!(two_decimals(1234567.891), "1234567.89");
        assert_eq!(two_decimals(2.675), "2.67");
        assert_eq!(two_decimals(f64::INFINITY), "∞");
        assert_eq!(two_decimals(f64::NAN), "NaN");
    }

    #[test]
    fn remaining_12_10() {
        let cases = [
            (0, "0 second "),
            (1, "1 second "),
            (59, "59 seconds "),
            (60, "1 minute "),
            (61, "1 minute "),
            (3599, "59 minutes "),
            (3600, "1 hour "),
            (3661, "1 hour 1 minute "),
            (86399, "23 hours 59 minutes "),
            (86400, "1 day "),
            (90061, "1 day 1 hour "),
            (200000, "2 days 7 hours "),
        ];
        for (s, want) in cases {
            assert_eq!(remaining(s), want, "{s}");
        }
    }
}
