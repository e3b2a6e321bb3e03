//! `kvmeter calibrate`: the machine constants energy and interference figures need —
//! idle and busy power where a measured power source exists (the estimate model's constants),
//! and memory bandwidth STREAM-triad style with one thread and with all threads (papers/000
//! Table II). Saved to a calibration file that later runs load and record in their manifest.

use crate::telemetry::power::{self, Choice, Model};
use crate::telemetry::procfs::Root;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Bandwidth {
    pub threads: usize,
    pub gb_per_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Calibration {
    pub schema: String,
    pub created_at: String,
    pub hostname: String,
    pub cpu_model: String,
    /// The measured source the power figures came from, or why there was none.
    pub power_source: String,
    pub idle_w: Option<f64>,
    pub busy_w: Option<f64>,
    /// The estimate model these constants give (only when measured).
    pub model: Option<Model>,
    /// STREAM triad, a[i] = b[i] + s·c[i], 24 bytes per element.
    pub memory_bandwidth: Vec<Bandwidth>,
    pub array_mib: usize,
}

/// `$XDG_CONFIG_HOME/kvmeter/calibration.json`, else `~/.config/kvmeter/calibration.json`.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("kvmeter").join("calibration.json")
}

/// Loads a calibration made on this machine; `Err` explains why one is not used.
pub fn load(path: &Path, machine: &crate::machine::Machine) -> Result<Calibration, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let c: Calibration = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a kvmeter calibration: {e}", path.display()))?;
    if c.hostname != machine.hostname || c.cpu_model != machine.cpu_model {
        return Err(format!(
            "{} was made on {} ({}), not this machine: run 'kvmeter calibrate' here",
            path.display(),
            c.hostname,
            c.cpu_model
        ));
    }
    Ok(c)
}

/// STREAM triad over `n` elements per array with `threads` threads; best of `reps`, GB/s.
pub fn triad(n: usize, threads: usize, reps: usize) -> f64 {
    let mut a = vec![0.0f64; n];
    let b = vec![1.0f64; n];
    let c = vec![2.0f64; n];
    let s = 3.0f64;
    let chunk = n.div_ceil(threads);
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        std::thread::scope(|sc| {
            for ((ac, bc), cc) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                sc.spawn(move || {
                    for i in 0..ac.len() {
                        ac[i] = bc[i] + s * cc[i];
                    }
                });
            }
        });
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&a);
    24.0 * n as f64 / best / 1e9
}

/// Average power while `busy` threads spin for `d` (0 threads: idle).
fn measure_power(meter: &mut dyn power::Meter, busy: usize, d: Duration) -> Result<f64, String> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        for _ in 0..busy {
            sc.spawn(|| {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            });
        }
        let r = (|| {
            std::thread::sleep(Duration::from_millis(200)); // let the spinners start
            let j0 = meter.joules()?;
            let t = Instant::now();
            std::thread::sleep(d);
            let j1 = meter.joules()?;
            Ok((j1 - j0) / t.elapsed().as_secs_f64())
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r
    })
}

pub fn run(path: Option<PathBuf>, seconds: u64, power: Option<String>) -> anyhow::Result<i32> {
    let machine = crate::machine::machine();
    let cpus = machine.logical_cpus;
    let choice = match power.as_deref() {
        Some(p) => Choice::parse(p)?,
        None => Choice::Auto,
    };
    let measured = measure_idle_and_busy(&choice, cpus, seconds)?;
    let bw = memory_bandwidth(cpus);
    let model = match (measured.idle_w, measured.busy_w) {
        (Some(i), Some(b)) => Some(Model {
            idle_w: i,
            max_w: b.max(i),
            origin: format!(
                "kvmeter calibrate on {}: idle and all-CPUs-busy power measured with {}",
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
                measured.source
            ),
        }),
        _ => None,
    };
    let cal = Calibration {
        schema: "kvmeter-calibration/1".into(),
        created_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        hostname: machine.hostname.clone(),
        cpu_model: machine.cpu_model.clone(),
        power_source: measured.source,
        idle_w: measured.idle_w,
        busy_w: measured.busy_w,
        model,
        memory_bandwidth: bw,
        array_mib: 64,
    };
    let path = path.unwrap_or_else(default_path);
    save(&path, &cal)?;
    print(&cal, &path);
    Ok(0)
}

/// Power idle and with every CPU busy, or why there is none.
struct Measured {
    source: String,
    idle_w: Option<f64>,
    busy_w: Option<f64>,
}

/// Measures idle and all-CPUs-busy power for `seconds` each with the chosen (measured) source.
fn measure_idle_and_busy(choice: &Choice, cpus: usize, seconds: u64) -> anyhow::Result<Measured> {
    let d = Duration::from_secs(seconds.max(1));
    // The estimate cannot calibrate itself: auto means the measured sources only.
    let meter = match choice {
        Choice::Auto => power::Rapl::discover(&Root::system())
            .map(|m| Some(Box::new(m) as Box<dyn power::Meter>))
            .or_else(|rapl| {
                power::PerfPower::open()
                    .map(|m| Some(Box::new(m) as Box<dyn power::Meter>))
                    .map_err(|perf| {
                        format!("no measured power source (rapl: {rapl}; perf: {perf})")
                    })
            }),
        c => power::open(
            c,
            &Model::default(),
            &Root::system(),
            Duration::from_millis(200),
        ),
    };
    let none = |source: String| Measured {
        source,
        idle_w: None,
        busy_w: None,
    };
    Ok(match meter {
        Ok(Some(mut m)) if !m.info().estimate => {
            let src = format!("{} ({})", m.info().source, m.info().scope);
            errln!("power: measuring idle for {seconds} s with {src} ...");
            let idle = measure_power(m.as_mut(), 0, d)
                .map_err(|e| anyhow::anyhow!("power source failed: {e}"))?;
            errln!("power: measuring all {cpus} CPUs busy for {seconds} s ...");
            let busy = measure_power(m.as_mut(), cpus, d)
                .map_err(|e| anyhow::anyhow!("power source failed: {e}"))?;
            Measured {
                source: src,
                idle_w: Some(idle),
                busy_w: Some(busy),
            }
        }
        Ok(Some(m)) => none(format!(
            "unavailable: no measured power source ({})",
            m.info().detail
        )),
        Ok(None) => none("unavailable: --power none".into()),
        Err(e) => none(format!("unavailable: {e}")),
    })
}

/// STREAM triad with one thread and with every CPU.
fn memory_bandwidth(cpus: usize) -> Vec<Bandwidth> {
    // Arrays of 64 MiB each: far larger than any last-level cache here.
    let n = 8 << 20;
    errln!("memory bandwidth: STREAM triad, 3 × 64 MiB arrays, 1 and {cpus} threads ...");
    let mut bw = vec![Bandwidth {
        threads: 1,
        gb_per_s: triad(n, 1, 5),
    }];
    if cpus > 1 {
        bw.push(Bandwidth {
            threads: cpus,
            gb_per_s: triad(n, cpus, 5),
        });
    }
    bw
}

fn save(path: &std::path::Path, cal: &Calibration) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            crate::error::UsageError::new(format!(
                "--calibration {}: cannot create its directory: {e}",
                path.display()
            ))
        })?;
    }
    std::fs::write(path, serde_json::to_string_pretty(cal)? + "\n").map_err(|e| {
        crate::error::UsageError::new(format!(
            "--calibration {}: cannot write it: {e}",
            path.display()
        ))
    })?;
    Ok(())
}

fn print(cal: &Calibration, path: &std::path::Path) {
    outln!("power:            {}", cal.power_source);
    if let (Some(i), Some(b)) = (cal.idle_w, cal.busy_w) {
        outln!("idle power:       {i:.1} W\nall CPUs busy:    {b:.1} W");
    }
    for b in &cal.memory_bandwidth {
        outln!(
            "memory bandwidth: {:.2} GB/s with {} thread{}",
            b.gb_per_s,
            b.threads,
            if b.threads == 1 { "" } else { "s" }
        );
    }
    outln!(
        "saved:            {} (later runs on this machine use it)",
        path.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triad_measures_a_plausible_bandwidth() {
        let gb = triad(1 << 20, 1, 3);
        assert!(gb > 0.1 && gb < 1000.0, "{gb}");
    }

    #[test]
    fn calibrations_from_another_machine_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("c.json");
        let m = crate::machine::machine();
        let mut c = Calibration {
            schema: "kvmeter-calibration/1".into(),
            created_at: "x".into(),
            hostname: m.hostname.clone(),
            cpu_model: m.cpu_model.clone(),
            power_source: "unavailable: test".into(),
            idle_w: None,
            busy_w: None,
            model: None,
            memory_bandwidth: vec![],
            array_mib: 64,
        };
        std::fs::write(&p, serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(load(&p, &m).unwrap(), c);
        c.hostname = "elsewhere".into();
        std::fs::write(&p, serde_json::to_string(&c).unwrap()).unwrap();
        assert!(load(&p, &m).unwrap_err().contains("not this machine"));
        std::fs::write(&p, "{}").unwrap();
        assert!(load(&p, &m)
            .unwrap_err()
            .contains("not a kvmeter calibration"));
    }
}
