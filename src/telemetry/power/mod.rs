//! Power and energy (papers/000 §III-D measured PSU-side power, papers/002 wall meters and
//! PDUs, papers/003 a Yokogawa meter at the wall). Every meter answers one question — joules
//! since it started — so a phase's energy is the difference between two readings and a
//! sample's power is the difference over its interval.
//!
//! Sources, in the order `--power auto` tries them: RAPL through powercap sysfs (never double
//! counting: psys alone if present, else packages plus DRAM; core/uncore are inside the
//! package; mmio zones duplicate packages), the perf `power` PMU, and finally the CPU-
//! utilisation estimate, which is labelled `estimate` wherever it appears. IPMI DCMI, Redfish,
//! a command that prints watts and a CSV written by an external meter are chosen explicitly.
//! A source that reads as zero or cannot be read is `unavailable: <why>`, never 0 W.

use super::procfs::Root;
use crate::error::UsageError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod estimate;
mod file;
mod perf;
mod polled;
mod rapl;

pub use estimate::*;
pub use file::*;
pub use perf::*;
pub use polled::*;
pub use rapl::*;

/// `--power`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    Auto,
    Rapl,
    Perf,
    Ipmi,
    Redfish,
    Cmd(Vec<String>),
    File(PathBuf),
    Estimate,
    None,
}

impl Choice {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        Ok(match s {
            "auto" => Choice::Auto,
            "rapl" => Choice::Rapl,
            "perf" => Choice::Perf,
            "ipmi" => Choice::Ipmi,
            "redfish" => Choice::Redfish,
            "estimate" => Choice::Estimate,
            "none" => Choice::None,
            _ => {
                if let Some(cmd) = s.strip_prefix("cmd:") {
                    let argv: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                    if argv.is_empty() {
                        return Err(UsageError::new(
                            "--power cmd:<program args>: the command is empty",
                        ));
                    }
                    Choice::Cmd(argv)
                } else if let Some(f) = s.strip_prefix("file:") {
                    Choice::File(PathBuf::from(f))
                } else {
                    return Err(UsageError::new(format!(
                        "--power '{s}': expected auto, rapl, perf, ipmi, redfish, cmd:<program args>, file:<csv>, estimate or none"
                    )));
                }
            }
        })
    }
}

/// The estimate model P = idle + (max − idle)·u, with where its constants came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub idle_w: f64,
    pub max_w: f64,
    pub origin: String,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            idle_w: 92.0,
            max_w: 127.0,
            origin: "default: one RAMCloud server node at the wall, 92 W lightly loaded and 127 W under 30 clients (papers/002 §III-A); almost certainly wrong for this machine: run 'kvmeter calibrate' with a power source or give --power-model idle=W,max=W".into(),
        }
    }
}

impl Model {
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        let mut idle = None;
        let mut max = None;
        for part in s.split(',') {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let v: Option<f64> = v.parse().ok().filter(|x: &f64| x.is_finite() && *x >= 0.0);
            match (k, v) {
                ("idle", Some(v)) => idle = Some(v),
                ("max", Some(v)) => max = Some(v),
                _ => {
                    return Err(UsageError::new(format!(
                        "--power-model '{s}': expected idle=WATTS,max=WATTS (for example idle=60,max=180)"
                    )))
                }
            }
        }
        match (idle, max) {
            (Some(i), Some(m)) if m >= i => Ok(Model {
                idle_w: i,
                max_w: m,
                origin: "--power-model".into(),
            }),
            _ => Err(UsageError::new(format!(
                "--power-model '{s}': expected idle=WATTS,max=WATTS with max ≥ idle"
            ))),
        }
    }

    /// Where the constants came from, in a few words for a one-line note: papers/002's
    /// RAMCloud node (the default), `--power-model`, or the calibration that measured them.
    pub fn origin_name(&self) -> String {
        if self.origin.starts_with("default:") {
            "papers/002's RAMCloud server node, the default, not this machine".into()
        } else {
            // "kvmeter calibrate on <time>: ..." (the time holds ':' but not ": ").
            let o = self.origin.split_once(": ").map_or(&*self.origin, |x| x.0);
            o.to_string()
        }
    }

    pub fn watts(&self, busy_fraction: f64) -> f64 {
        self.idle_w + (self.max_w - self.idle_w) * busy_fraction.clamp(0.0, 1.0)
    }
}

/// What a meter measures, for every figure that carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PowerInfo {
    /// rapl, perf, ipmi, redfish, command, file or estimate.
    pub source: String,
    /// package, package+dram, psys, wall, ...
    pub scope: String,
    /// True for the utilisation model: never a measurement.
    pub estimate: bool,
    pub detail: String,
}

pub trait Meter: Send {
    fn info(&self) -> &PowerInfo;
    /// Joules since the meter started.
    fn joules(&mut self) -> Result<f64, String>;
    /// Joules since the meter started, and the instant on the meter's own clock that they
    /// run up to. Power is energy over the meter's time, never over the time a caller read it
    /// (a sampler preempted between the two divided 3 ms of energy by 10 ms of its own time,
    /// and the next sample by the rest: 26.6 W then 15,936 W from a 92–127 W model).
    fn reading(&mut self) -> Result<(f64, std::time::Instant), String> {
        let j = self.joules()?;
        Ok((j, std::time::Instant::now()))
    }
}

/// Average watts between two readings, on the meter's clock.
pub fn watts_between(a: (f64, std::time::Instant), b: (f64, std::time::Instant)) -> Option<f64> {
    let secs = b.1.checked_duration_since(a.1)?.as_secs_f64();
    (secs > 0.0).then(|| (b.0 - a.0).max(0.0) / secs)
}

pub fn permission_hint(path: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "permission denied (run as root, or grant read on {}: chmod o+r or a udev rule)",
            path.display()
        )
    } else {
        format!("cannot read {}: {e}", path.display())
    }
}

// ---------------------------------------------------------------------------- RAPL

/// Reads a sysfs file (injectable, so tests can simulate a permission error as root).
pub type SysRead = Box<dyn Fn(&Path) -> std::io::Result<String> + Send>;
// ------------------------------------------------------------------------ choosing one

/// Opens the meter `choice` asks for. `Err` carries the reason the source is unavailable
/// (for auto: why each measured source was passed over, before falling back to the estimate).
pub fn open(
    choice: &Choice,
    model: &Model,
    root: &Root,
    period: Duration,
) -> Result<Option<Box<dyn Meter>>, String> {
    let boxed = |m: Result<Box<dyn Meter>, String>| m.map(Some);
    match choice {
        Choice::None => Ok(None),
        Choice::Rapl => boxed(Rapl::discover(root).map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Perf => boxed(PerfPower::open().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Ipmi => boxed(ipmi().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Redfish => boxed(redfish().map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Cmd(argv) => boxed(
            command(argv.clone(), period.max(Duration::from_millis(200)))
                .map(|m| Box::new(m) as Box<dyn Meter>),
        ),
        Choice::File(p) => boxed(CsvFile::open(p.clone()).map(|m| Box::new(m) as Box<dyn Meter>)),
        Choice::Estimate => Ok(Some(Box::new(Estimate::new(model.clone(), root.clone())))),
        Choice::Auto => {
            let rapl = match Rapl::discover(root) {
                Ok(m) => return Ok(Some(Box::new(m))),
                Err(e) => e,
            };
            let perf = match PerfPower::open() {
                Ok(m) => return Ok(Some(Box::new(m))),
                Err(e) => e,
            };
            let mut est = Estimate::new(model.clone(), root.clone());
            est.info.detail = format!(
                "no measured source (rapl: {rapl}; perf: {perf}); {}",
                est.info.detail
            );
            Ok(Some(Box::new(est)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, dir: &str, name: &str, energy: u64, max: u64) {
        let d = root.join("sys/class/powercap").join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("energy_uj"), format!("{energy}\n")).unwrap();
        std::fs::write(d.join("max_energy_range_uj"), format!("{max}\n")).unwrap();
    }

    const MAX: u64 = 262_143_328_850;

    fn two_sockets(root: &Path, p0: u64, p1: u64, d0: u64, d1: u64) {
        zone(root, "intel-rapl:0", "package-0", p0, MAX);
        zone(root, "intel-rapl:0:0", "core", 5, MAX);
        zone(root, "intel-rapl:0:1", "dram", d0, 65_712_999_613);
        zone(root, "intel-rapl:1", "package-1", p1, MAX);
        zone(root, "intel-rapl:1:0", "core", 7, MAX);
        zone(root, "intel-rapl:1:1", "dram", d1, 65_712_999_613);
        zone(root, "intel-rapl-mmio:0", "package-0", 123_456, MAX);
    }

    #[test]
    fn rapl_two_sockets_with_dram_and_a_wrap() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        two_sockets(t.path(), MAX - 1_000_000, 10_000_000, 1_000_000, 2_000_000);
        let mut r = Rapl::discover(&root).unwrap();
        assert_eq!(r.info().scope, "package+dram");
        assert_eq!(
            r.zones.len(),
            4,
            "packages and drams; core and mmio zones are not counted"
        );
        assert_eq!(r.joules().unwrap(), 0.0);
        // package-0 wraps: MAX-1e6 → 4e6 is +5e6 µJ; package-1 +20e6; drams +1e6 and +3e6.
        two_sockets(t.path(), 4_000_000, 30_000_000, 2_000_000, 5_000_000);
        let j = r.joules().unwrap();
        assert!((j - 29.0).abs() < 1e-9, "{j}");
        two_sockets(t.path(), 5_000_000, 30_000_000, 2_000_000, 5_000_000);
        assert!((r.joules().unwrap() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn rapl_psys_alone_and_permission_denied() {
        let t = tempfile::tempdir().unwrap();
        let root = Root(t.path().to_path_buf());
        zone(t.path(), "intel-rapl:0", "package-0", 1, MAX);
        zone(t.path(), "intel-rapl:1", "psys", 1, MAX);
        let r = Rapl::discover(&root).unwrap();
        assert_eq!(r.info().scope, "psys (platform)");
        assert_eq!(r.zones.len(), 1);

        let denied = Box::new(|p: &Path| {
            if p.ends_with("energy_uj") {
                Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
            } else {
                std::fs::read_to_string(p)
            }
        });
        let e = Rapl::discover_with(&root, denied).err().unwrap();
        assert!(
            e.starts_with("permission denied (run as root, or grant read on "),
            "{e}"
        );
        assert!(e.contains("intel-rapl:1/energy_uj"), "{e}");

        let none = tempfile::tempdir().unwrap();
        let e = Rapl::discover(&Root(none.path().to_path_buf()))
            .err()
            .unwrap();
        assert!(e.contains("no powercap RAPL zones"), "{e}");
    }

    #[test]
    fn parsers_for_meters() {
        assert_eq!(parse_ipmi("    Instantaneous power reading:                   145 Watts\n    Minimum during sampling period: 80 Watts\n"), Some(145.0));
        assert_eq!(parse_ipmi("nothing"), None);
        assert_eq!(
            parse_redfish(r#"{"PowerControl":[{"PowerConsumedWatts":231.5}]}"#),
            Some(231.5)
        );
        assert_eq!(parse_watts("\n 87.25 W\n"), Some(87.25));
        assert_eq!(parse_watts("87,1\n"), Some(87.0));
        assert_eq!(parse_watts("watts: 3"), None);
        let m = Model::parse("idle=50,max=150").unwrap();
        assert_eq!(m.watts(0.5), 100.0);
        assert_eq!(m.watts(2.0), 150.0);
        assert!(Model::parse("idle=50").is_err());
        assert!(Model::parse("idle=90,max=50").is_err());
        assert!(Choice::parse("cmd:").is_err());
        assert_eq!(
            Choice::parse("cmd:echo 5").unwrap(),
            Choice::Cmd(vec!["echo".into(), "5".into()])
        );
        assert!(Choice::parse("watts")
            .unwrap_err()
            .0
            .contains("--power 'watts'"));
    }

    #[test]
    fn csv_meter_integrates_by_wall_time() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("meter.csv");
        std::fs::write(&p, "").unwrap();
        let mut m = CsvFile::open(p.clone()).unwrap();
        let s = m.start;
        // 100 W from s-5 (before the run: counted from s), 200 W from s+2; a half line last.
        std::fs::write(
            &p,
            format!("{},100\n{},200\n{},30", s - 5.0, s + 2.0, s + 3.0),
        )
        .unwrap();
        let j = m.joules_at(s + 3.0).unwrap();
        assert!((j - (100.0 * 2.0 + 200.0 * 1.0)).abs() < 1e-6, "{j}");
        // The half line completes: 30 W from s+3.
        std::fs::write(
            &p,
            format!("{},100\n{},200\n{},300\n", s - 5.0, s + 2.0, s + 3.0),
        )
        .unwrap();
        let j = m.joules_at(s + 4.0).unwrap();
        assert!((j - (200.0 + 200.0 + 300.0)).abs() < 1e-6, "{j}");
        assert!(m
            .joules_at(s + 30.0)
            .unwrap_err()
            .contains("no reading in the last 10 s"));
    }

    #[test]
    fn command_meter_runs_without_a_shell_and_times_out() {
        let argv = vec!["echo".to_string(), "42.5".to_string()];
        let mut m = command(argv, Duration::from_millis(20)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let j = m.joules().unwrap();
        // About 42.5 W × 0.2 s.
        assert!((j - 8.5).abs() < 2.5, "{j}");
        let e = run_with_timeout(
            &["sleep".into(), "5".into()],
            None,
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(e.contains("did not answer"), "{e}");
        // '$HOME' reaches echo literally: no shell expands it.
        assert_eq!(
            run_with_timeout(
                &["echo".into(), "$HOME".into()],
                None,
                Duration::from_secs(2)
            )
            .unwrap(),
            "$HOME\n"
        );
        assert!(command(vec!["false".into()], Duration::from_millis(20)).is_err());
    }

    #[test]
    fn estimate_is_labelled_and_follows_the_model() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        std::fs::write(t.path().join("proc/stat"), "cpu  0 0 0 100 0 0 0 0 0 0\n").unwrap();
        let model = Model {
            idle_w: 50.0,
            max_w: 150.0,
            origin: "test".into(),
        };
        let mut e = Estimate::new(model, Root(t.path().to_path_buf()));
        assert!(e.info().estimate);
        assert_eq!(e.info().source, "estimate");
        e.joules().unwrap();
        let t0 = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(100));
        // Fully busy in between: 150 W, over however long the sleep took on a loaded machine.
        std::fs::write(t.path().join("proc/stat"), "cpu  100 0 0 100 0 0 0 0 0 0\n").unwrap();
        let j = e.joules().unwrap();
        let dt = t0.elapsed().as_secs_f64();
        assert!((j / dt - 150.0).abs() < 30.0, "{j} J in {dt} s");
    }
}
