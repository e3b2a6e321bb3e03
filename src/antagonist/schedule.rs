//! The pressure scale's schedule (papers/004 §2) and its normalized pressure.
//!
//! w0: no antagonist. w1–w4: one to four instances, read-only. w5–w25: the four instances'
//! write ratios rise one instance at a time, round-robin, through 0.1, 0.2, 0.3, 0.5, 0.7 and
//! 1.0 (w5–w8 take 0.1, w9–w12 0.2, ..., w21–w24 0.7, w25 takes the first instance to 1.0).

pub const INSTANCES: usize = 4;
pub const STEPS: usize = 26;
const LEVELS: [f64; 6] = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0];

/// The write ratio of each instance in step `w` (None: not running).
pub fn step(w: usize) -> [Option<f64>; INSTANCES] {
    let mut s = [None; INSTANCES];
    if w == 0 {
        return s;
    }
    if w <= INSTANCES {
        for x in s.iter_mut().take(w) {
            *x = Some(0.0);
        }
        return s;
    }
    let k = w - INSTANCES - 1; // 0 for w5
    let level = k / INSTANCES;
    let raised = k % INSTANCES; // instances 0..=raised are at LEVELS[level]
    for (i, x) in s.iter_mut().enumerate() {
        *x = Some(if i <= raised {
            LEVELS[level]
        } else if level == 0 {
            0.0
        } else {
            LEVELS[level - 1]
        });
    }
    s
}

/// (ρ(w0) − ρ(wi)) / ρ(w0).
pub fn normalized_pressure(rho0: f64, rho: f64) -> f64 {
    if rho0 > 0.0 {
        (rho0 - rho) / rho0
    } else {
        0.0
    }
}

/// Step indices ordered by decreasing pressure (the pressure scale, Def. 2), ties by index.
pub fn scale(pressures: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..pressures.len()).collect();
    idx.sort_by(|a, b| pressures[*b].total_cmp(&pressures[*a]).then(a.cmp(b)));
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_matches_the_paper() {
        assert_eq!(step(0), [None; 4]);
        assert_eq!(step(1), [Some(0.0), None, None, None]);
        assert_eq!(step(3), [Some(0.0), Some(0.0), Some(0.0), None]);
        assert_eq!(step(4), [Some(0.0); 4]);
        assert_eq!(step(5), [Some(0.1), Some(0.0), Some(0.0), Some(0.0)]);
        assert_eq!(step(8), [Some(0.1); 4]);
        assert_eq!(step(9), [Some(0.2), Some(0.1), Some(0.1), Some(0.1)]);
        assert_eq!(step(12), [Some(0.2); 4]);
        assert_eq!(step(16), [Some(0.3); 4]);
        assert_eq!(step(17), [Some(0.5), Some(0.3), Some(0.3), Some(0.3)]);
        assert_eq!(step(20), [Some(0.5); 4]);
        assert_eq!(step(24), [Some(0.7); 4]);
        assert_eq!(step(25), [Some(1.0), Some(0.7), Some(0.7), Some(0.7)]);
        // Each step from w5 on changes exactly one instance, upwards.
        for w in 5..STEPS {
            let (a, b) = (step(w - 1), step(w));
            let changed: Vec<usize> = (0..4).filter(|&i| a[i] != b[i]).collect();
            assert_eq!(changed.len(), 1, "w{w}");
            assert!(b[changed[0]].unwrap() > a[changed[0]].unwrap());
        }
    }

    #[test]
    fn pressure_and_scale() {
        assert_eq!(normalized_pressure(100.0, 70.0), 0.3);
        assert_eq!(normalized_pressure(100.0, 110.0), -0.1);
        assert_eq!(normalized_pressure(0.0, 5.0), 0.0);
        assert_eq!(scale(&[0.0, 0.3, 0.1, 0.3]), vec![1, 3, 2, 0]);
    }
}
