//! Meters read by polling another program: IPMI DCMI (`ipmitool`), Redfish (through curl) and
//! any command that prints watts. Each reading is held until the next (a step function).

use super::*;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Integrates a watts reading held until the next one (a step function).
#[derive(Default)]
struct Integral {
    joules: f64,
    last: Option<(Instant, f64)>,
    error: Option<String>,
}

impl Integral {
    fn add(&mut self, at: Instant, watts: f64) {
        if let Some((t, w)) = self.last {
            self.joules += w * at.duration_since(t).as_secs_f64();
        }
        self.last = Some((at, watts));
    }
    fn now(&self, at: Instant) -> Option<f64> {
        self.last
            .map(|(t, w)| self.joules + w * at.saturating_duration_since(t).as_secs_f64())
    }
}

/// Runs `argv` without a shell, with a timeout; its stdout.
pub fn run_with_timeout(
    argv: &[String],
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<String, String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
    if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        let _ = w.write_all(text.as_bytes());
    }
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                if let Some(mut o) = child.stdout.take() {
                    let _ = o.read_to_string(&mut out);
                }
                if !status.success() {
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    return Err(format!("{} exited with {status}: {}", argv[0], err.trim()));
                }
                return Ok(out);
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not answer within {timeout:?}", argv[0]));
            }
        }
    }
}

/// Watts from `ipmitool dcmi power reading`.
pub fn parse_ipmi(text: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.contains("Instantaneous power reading"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Watts from a Redfish Power resource: PowerControl[0].PowerConsumedWatts.
pub fn parse_redfish(text: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v["PowerControl"][0]["PowerConsumedWatts"].as_f64()
}

/// A first number on the first non-empty line (a command that prints watts).
pub fn parse_watts(text: &str) -> Option<f64> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .and_then(|l| l.split(|c: char| c.is_whitespace() || c == ',').next())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|w| w.is_finite() && *w >= 0.0)
}

pub struct Polled {
    info: PowerInfo,
    state: Arc<Mutex<Integral>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Polled {
    /// Polls `read` every `period` on a thread of its own (a slow BMC never stalls the other
    /// samplers). The first reading must succeed.
    pub fn start(
        info: PowerInfo,
        period: Duration,
        read: Box<dyn Fn() -> Result<f64, String> + Send>,
    ) -> Result<Self, String> {
        let first = read()?;
        let state = Arc::new(Mutex::new(Integral::default()));
        state.lock().unwrap().add(Instant::now(), first);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("kvm-power".into())
            .spawn(move || {
                while !sp.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(period);
                    let r = read();
                    let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
                    match r {
                        Ok(w) => g.add(Instant::now(), w),
                        Err(e) => g.error = Some(e),
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Polled { info, state, stop })
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Meter for Polled {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        self.reading().map(|(j, _)| j)
    }
    fn reading(&mut self) -> Result<(f64, Instant), String> {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, _)) = g.last {
            // A reading older than 10 s is not a measurement of now.
            if t.elapsed() > Duration::from_secs(10) {
                return Err(g
                    .error
                    .clone()
                    .unwrap_or_else(|| "no reading for 10 s".into()));
            }
        }
        let now = Instant::now();
        g.now(now)
            .map(|j| (j, now))
            .ok_or_else(|| "no reading yet".into())
    }
}

pub fn ipmi() -> Result<Polled, String> {
    let argv: Vec<String> = ["ipmitool", "dcmi", "power", "reading"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Polled::start(
        PowerInfo {
            source: "ipmi".into(),
            scope: "wall (BMC, DCMI)".into(),
            estimate: false,
            detail: "ipmitool dcmi power reading, about 1 Hz".into(),
        },
        Duration::from_secs(1),
        Box::new(move || {
            let out = run_with_timeout(&argv, None, Duration::from_secs(5))?;
            parse_ipmi(&out)
                .ok_or_else(|| "ipmitool printed no 'Instantaneous power reading'".into())
        }),
    )
}

/// Redfish through curl: the URL from KVMETER_REDFISH_URL, credentials from
/// KVMETER_REDFISH_USER/_PASSWORD, passed on curl's standard input so they never appear in a
/// process list or a log.
pub fn redfish() -> Result<Polled, String> {
    let url = std::env::var("KVMETER_REDFISH_URL").map_err(|_| {
        "set KVMETER_REDFISH_URL to the chassis Power resource (https://BMC/redfish/v1/Chassis/1/Power), and KVMETER_REDFISH_USER / KVMETER_REDFISH_PASSWORD".to_string()
    })?;
    let user = std::env::var("KVMETER_REDFISH_USER").unwrap_or_default();
    let pass = std::env::var("KVMETER_REDFISH_PASSWORD").unwrap_or_default();
    let config =
        format!("url = \"{url}\"\nuser = \"{user}:{pass}\"\nsilent\nshow-error\ninsecure\n");
    let argv: Vec<String> = ["curl", "--config", "-", "--max-time", "5"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Polled::start(
        PowerInfo {
            source: "redfish".into(),
            scope: "wall (BMC, Redfish PowerConsumedWatts)".into(),
            estimate: false,
            detail: url.clone(),
        },
        Duration::from_secs(1),
        Box::new(move || {
            let out = run_with_timeout(&argv, Some(&config), Duration::from_secs(6))?;
            parse_redfish(&out).ok_or_else(|| {
                "the Redfish answer has no PowerControl[0].PowerConsumedWatts".into()
            })
        }),
    )
}

pub fn command(argv: Vec<String>, period: Duration) -> Result<Polled, String> {
    let detail = argv.join(" ");
    Polled::start(
        PowerInfo {
            source: "command".into(),
            scope: "as the command measures".into(),
            estimate: false,
            detail,
        },
        period,
        Box::new(move || {
            let out = run_with_timeout(&argv, None, Duration::from_secs(2))?;
            parse_watts(&out)
                .ok_or_else(|| format!("'{}' printed no watts on its first line", argv[0]))
        }),
    )
}

// -------------------------------------------------------------- an external meter's CSV
