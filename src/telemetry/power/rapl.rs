//! RAPL through powercap sysfs: psys alone where present, else packages plus DRAM (core and
//! uncore are inside the package; mmio zones duplicate packages), with counter wrap handled.

use super::*;
use crate::telemetry::procfs::Root;
use std::path::PathBuf;

pub(super) struct Zone {
    path: PathBuf,
    max_range_uj: u64,
    last_uj: u64,
    total_uj: u128,
}

pub struct Rapl {
    pub(super) info: PowerInfo,
    pub(super) zones: Vec<Zone>,
    pub(super) read: SysRead,
}

impl Rapl {
    pub fn discover(root: &Root) -> Result<Self, String> {
        Self::discover_with(root, Box::new(|p| std::fs::read_to_string(p)))
    }

    /// Discovery with an injectable reader (tests simulate permission errors with it).
    pub fn discover_with(root: &Root, read: SysRead) -> Result<Self, String> {
        let base = root.path("sys/class/powercap");
        let entries = std::fs::read_dir(&base)
            .map_err(|_| "no powercap RAPL zones (/sys/class/powercap is missing: no RAPL on this CPU or in this VM)".to_string())?;
        let mut tops: Vec<(String, PathBuf)> = Vec::new();
        let mut drams: Vec<(String, PathBuf)> = Vec::new();
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("rapl") && !n.contains("mmio"))
            .collect();
        names.sort();
        for n in names {
            let dir = base.join(&n);
            let zone_name = read(&dir.join("name"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let depth = n.matches(':').count();
            if depth == 1 && (zone_name.starts_with("package") || zone_name == "psys") {
                tops.push((zone_name, dir));
            } else if depth == 2 && zone_name == "dram" {
                drams.push((format!("dram of {}", n), dir));
            }
        }
        if tops.is_empty() {
            return Err("no RAPL package or psys zone under /sys/class/powercap".into());
        }
        let (chosen, scope): (Vec<(String, PathBuf)>, String) =
            if let Some(psys) = tops.iter().find(|(n, _)| n == "psys") {
                (vec![psys.clone()], "psys (platform)".into())
            } else {
                let pk: Vec<_> = tops
                    .into_iter()
                    .filter(|(n, _)| n.starts_with("package"))
                    .collect();
                let scope = if drams.is_empty() {
                    "package".to_string()
                } else {
                    "package+dram".to_string()
                };
                (pk.into_iter().chain(drams).collect(), scope)
            };
        let mut zones = Vec::new();
        for (_, dir) in &chosen {
            let energy = dir.join("energy_uj");
            let last = read(&energy)
                .map_err(|e| permission_hint(&energy, &e))?
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{} is not a number", energy.display()))?;
            let max_range_uj = read(&dir.join("max_energy_range_uj"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(u64::MAX);
            zones.push(Zone {
                path: energy,
                max_range_uj,
                last_uj: last,
                total_uj: 0,
            });
        }
        let detail = chosen
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Rapl {
            info: PowerInfo {
                source: "rapl".into(),
                scope,
                estimate: false,
                detail,
            },
            zones,
            read,
        })
    }
}

impl Meter for Rapl {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        let mut total = 0u128;
        for z in &mut self.zones {
            let cur: u64 = (self.read)(&z.path)
                .map_err(|e| permission_hint(&z.path, &e))?
                .trim()
                .parse()
                .map_err(|_| format!("{} is not a number", z.path.display()))?;
            // energy_uj wraps at max_energy_range_uj.
            let d = if cur >= z.last_uj {
                cur - z.last_uj
            } else {
                cur + (z.max_range_uj - z.last_uj)
            };
            z.total_uj += d as u128;
            z.last_uj = cur;
            total += z.total_uj;
        }
        Ok(total as f64 / 1e6)
    }
}

// ------------------------------------------------------------------ perf power PMU
