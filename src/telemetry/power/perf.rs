//! The perf `power` PMU (energy-pkg, energy-ram, energy-psys), where the kernel exposes RAPL
//! through perf rather than powercap.

use super::*;

use std::path::Path;
use std::time::Duration;

pub struct PerfPower {
    info: PowerInfo,
    counters: Vec<(perf_event::Counter, f64)>,
}

impl PerfPower {
    pub fn open() -> Result<Self, String> {
        let dir = Path::new("/sys/bus/event_source/devices/power");
        if !dir.exists() {
            return Err(
                "no perf power PMU (/sys/bus/event_source/devices/power is missing)".into(),
            );
        }
        let cpu: usize = std::fs::read_to_string(dir.join("cpumask"))
            .ok()
            .and_then(|s| {
                s.trim()
                    .split([',', '-'])
                    .next()
                    .and_then(|c| c.parse().ok())
            })
            .unwrap_or(0);
        let has = |e: &str| dir.join("events").join(e).exists();
        let events: Vec<&str> = if has("energy-psys") && !has("energy-pkg") {
            vec!["energy-psys"]
        } else {
            ["energy-pkg", "energy-ram"]
                .into_iter()
                .filter(|e| has(e))
                .collect()
        };
        if events.is_empty() {
            return Err(
                "the perf power PMU has no energy-pkg, energy-ram or energy-psys event".into(),
            );
        }
        let mut counters = Vec::new();
        for e in &events {
            let mut b = perf_event::events::Dynamic::builder("power").map_err(|e| e.to_string())?;
            b.event(e).map_err(|err| format!("power/{e}/: {err}"))?;
            let scale = b.scale().ok().flatten().unwrap_or(1.0);
            let ev = b.build().map_err(|err| format!("power/{e}/: {err}"))?;
            // The RAPL PMU rejects exclusion bits, which the builder sets by default.
            let mut c = perf_event::Builder::new(ev)
                .one_cpu(cpu)
                .any_pid()
                .include_kernel()
                .include_hv()
                .build()
                .map_err(|err| match err.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => format!(
                        "power/{e}/: permission denied (system-wide counting needs root or CAP_PERFMON, or perf_event_paranoid ≤ 0; it is {})",
                        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default().trim()
                    ),
                    _ => format!("power/{e}/: {err}"),
                })?;
            c.enable().map_err(|err| format!("power/{e}/: {err}"))?;
            counters.push((c, scale));
        }
        let scope = if events == ["energy-psys"] {
            "psys (platform)"
        } else if events.len() == 2 {
            "package+dram"
        } else {
            "package"
        };
        let mut m = PerfPower {
            info: PowerInfo {
                source: "perf".into(),
                scope: scope.into(),
                estimate: false,
                detail: events
                    .iter()
                    .map(|e| format!("power/{e}/"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
            counters,
        };
        // A virtualised PMU may exist and count nothing: check before trusting it.
        std::thread::sleep(Duration::from_millis(150));
        if m.joules()? <= 0.0 {
            return Err(format!(
                "the perf power PMU ({}) counts no energy here (virtualised or unsupported); 0 W would be a wrong figure",
                m.info.detail
            ));
        }
        Ok(m)
    }
}

impl Meter for PerfPower {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let mut j = 0.0;
        for (c, scale) in &mut self.counters {
            j += c.read().map_err(|e| e.to_string())? as f64 * *scale;
        }
        Ok(j)
    }
}

// ------------------------------------------------------- polled watts (cmd, ipmi, redfish)
