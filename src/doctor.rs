//! `kvmeter doctor`: every measurement source, whether it works here, why not, and how to
//! enable it — before a long run rather than after.

use crate::telemetry::procfs::{self, Root};
use crate::telemetry::{counters, power};

fn line(out: &mut String, what: &str, status: Result<String, String>) {
    let (mark, text) = match status {
        Ok(t) => ("ok  ", t),
        Err(t) => ("--  ", t),
    };
    out.push_str(&format!("{mark}{what:<22} {text}\n"));
}

pub fn report(data_dir: Option<&std::path::Path>) -> String {
    let root = Root::system();
    let mut out = String::new();
    let (_, clock) = crate::measure::clock::Clock::auto(true);
    line(&mut out, "latency clock", Ok(clock));
    line(
        &mut out,
        "cpu (/proc/stat)",
        root.read("proc/stat")
            .ok()
            .and_then(|t| procfs::parse_stat(&t))
            .map(|(_, cpus)| format!("{} CPUs", cpus.len()))
            .ok_or_else(|| "unavailable: /proc/stat cannot be read".into()),
    );
    let place = crate::machine::placement(data_dir.unwrap_or(&std::env::temp_dir()));
    let disk = place.block_device.clone().unwrap_or(place.device.clone());
    let disk = procfs::whole_disk(&root, &disk);
    let stats = root.read("proc/diskstats").unwrap_or_default();
    line(
        &mut out,
        "disk (/proc/diskstats)",
        match procfs::parse_diskstats(&stats, &disk) {
            Some(_) => Ok(format!("{disk} under {} ({})", place.path, place.filesystem)),
            None => Err(format!("unavailable: {} is on {} ({}), not a block device in /proc/diskstats; give --disk DEV", place.path, place.device, place.filesystem)),
        },
    );
    line(
        &mut out,
        "process (/proc/self)",
        root.read("proc/self/io")
            .map(|_| "CPU, RSS, context switches, I/O bytes, per-thread CPU".to_string())
            .map_err(|e| format!("unavailable: /proc/self/io: {e}")),
    );
    for p in ["cpu", "io", "memory"] {
        line(
            &mut out,
            &format!("pressure ({p})"),
            root.read(&format!("proc/pressure/{p}"))
                .map(|_| "stall shares".to_string())
                .map_err(|_| format!("unavailable: /proc/pressure/{p} is missing (kernel without CONFIG_PSI, or booted with psi=0)")),
        );
    }
    power_lines(&mut out, &root);
    let c = counters::Counters::open();
    for ev in counters::Event::ALL {
        line(
            &mut out,
            &format!("counter {}", ev.name()),
            match c.unavailable.get(ev.name()) {
                Some(why) => Err(why.clone()),
                None => Ok(if c.include_kernel {
                    "user and kernel"
                } else {
                    "user only"
                }
                .to_string()),
            },
        );
    }
    line(
        &mut out,
        "profile (--profile)",
        crate::telemetry::profile::probe(),
    );
    let cal = crate::calibrate::default_path();
    line(
        &mut out,
        "calibration",
        crate::calibrate::load(&cal, &crate::machine::machine())
            .map(|c| {
                format!(
                    "{} from {}: power {}, {} bandwidth figures",
                    cal.display(),
                    c.created_at,
                    c.power_source,
                    c.memory_bandwidth.len()
                )
            })
            .map_err(|e| format!("none: {e} (run 'kvmeter calibrate')")),
    );
    out
}

/// Each power source: usable here, or why not.
fn power_lines(out: &mut String, root: &Root) {
    let info = |m: Box<dyn power::Meter>| format!("{} — {}", m.info().scope, m.info().detail);
    line(
        out,
        "power: rapl",
        power::Rapl::discover(root)
            .map(|m| info(Box::new(m)))
            .map_err(|e| format!("unavailable: {e}")),
    );
    line(
        out,
        "power: perf",
        power::PerfPower::open()
            .map(|m| info(Box::new(m)))
            .map_err(|e| format!("unavailable: {e}")),
    );
    line(
        out,
        "power: ipmi",
        match which("ipmitool") {
            false => Err("unavailable: ipmitool is not installed (apt-get install ipmitool; needs a BMC with DCMI)".into()),
            true => power::ipmi().map(|m| info(Box::new(m))).map_err(|e| format!("unavailable: {e}")),
        },
    );
    line(
        out,
        "power: redfish",
        match (which("curl"), std::env::var_os("KVMETER_REDFISH_URL")) {
            (false, _) => Err("unavailable: curl is not installed".into()),
            (true, None) => Err("unavailable: set KVMETER_REDFISH_URL (and _USER, _PASSWORD) to the BMC's Power resource".into()),
            (true, Some(_)) => power::redfish().map(|m| info(Box::new(m))).map_err(|e| format!("unavailable: {e}")),
        },
    );
    line(
        out,
        "power: cmd / file",
        Ok("--power cmd:<program args> (prints watts) or file:<csv> (timestamp,watts)".into()),
    );
    let model = power::Model::default();
    line(
        out,
        "power: estimate",
        Ok(format!(
            "always; labelled 'estimate': {} W idle, {} W busy ({})",
            model.idle_w, model.max_w, model.origin
        )),
    );
}

fn which(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}
