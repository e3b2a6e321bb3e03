//! The `--fault` spec (papers/002: what a crash costs while clients keep going):
//! `--fault 'at=30s,kill=leader,restart_after=5s'`, repeatable, parsed and checked against the
//! cluster the store options ask for, before anything starts. It sits in `plan` beside the
//! `--antagonist` spec; `crate::fault` runs it (the schedule thread, the recovery analysis).
//!
//! Actions: kill (SIGKILL, optionally restarted `restart_after` later), stop (SIGSTOP for
//! `for`, then SIGCONT), restart (a clean stop and start). Targets by role, resolved when the
//! fault fires: leader, follower, primary, replica[:i], member:i, master:i, sentinel:i, server.
//! kvmeter never signals a process it did not start: a fault on a user's server (`addr=`) is
//! refused with the rest of the input.

use crate::error::UsageError;
use crate::store::cluster::Shape;
use crate::values::parse_duration;
use serde::Serialize;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Kill,
    Stop,
    Restart,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Kill => "kill",
            Action::Stop => "stop",
            Action::Restart => "restart",
        }
    }
}

/// One `--fault`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fault {
    /// The text as given (events name it).
    pub spec: String,
    /// After the run phase's start (warm-up included).
    #[serde(serialize_with = "secs")]
    pub at: Duration,
    pub action: Action,
    pub target: String,
    /// kill: start the member again this long after.
    #[serde(serialize_with = "opt_secs")]
    pub restart_after: Option<Duration>,
    /// stop: continue it this long after.
    #[serde(rename = "for", serialize_with = "opt_secs")]
    pub duration: Option<Duration>,
    /// Wait until every replica reports it is in sync before firing (default true).
    pub wait_sync: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

impl Fault {
    pub fn parse(s: &str) -> Result<Fault, UsageError> {
        let bad = |why: String| UsageError::new(format!("--fault '{s}': {why}"));
        let mut at = None;
        let mut action = None;
        let mut restart_after = None;
        let mut duration = None;
        let mut wait_sync = true;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("'{part}': expected key=value")))?;
            let dur = |v: &str| parse_duration(&format!("--fault {k}"), v);
            match k {
                "at" => at = Some(dur(v)?),
                "kill" | "stop" | "restart" => {
                    if action.is_some() {
                        return Err(bad("give one action: kill=, stop= or restart=".into()));
                    }
                    let a = match k {
                        "kill" => Action::Kill,
                        "stop" => Action::Stop,
                        _ => Action::Restart,
                    };
                    if v.is_empty() {
                        return Err(bad(format!(
                            "{k}=: expected a target (leader, primary, replica:0, member:1, …)"
                        )));
                    }
                    action = Some((a, v.to_string()));
                }
                "restart_after" => restart_after = Some(dur(v)?),
                "for" => duration = Some(dur(v)?),
                "wait_sync" => {
                    wait_sync = match v {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad(format!("wait_sync={v}: expected true or false"))),
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "unknown key '{k}' (at, kill, stop, restart, restart_after, for, wait_sync)"
                    )))
                }
            }
        }
        let at =
            at.ok_or_else(|| bad("at= is missing (when the fault fires, e.g. at=30s)".into()))?;
        let (action, target) = action
            .ok_or_else(|| bad("no action: give kill=, stop= or restart= with a target".into()))?;
        if restart_after.is_some() && action != Action::Kill {
            return Err(bad("restart_after= goes with kill=".into()));
        }
        match (action, duration) {
            (Action::Stop, None) => {
                return Err(bad(
                    "stop= needs for= (how long the member stays stopped)".into()
                ))
            }
            (Action::Kill | Action::Restart, Some(_)) => {
                return Err(bad("for= goes with stop=".into()))
            }
            _ => {}
        }
        Ok(Fault {
            spec: s.to_string(),
            at,
            action,
            target,
            restart_after,
            duration,
            wait_sync,
        })
    }

    /// Checks the target against the members the options ask for.
    pub fn check_target(&self, shape: &Shape) -> Result<(), UsageError> {
        let bad = |why: String| UsageError::new(format!("--fault '{}': {why}", self.spec));
        let t = self.target.as_str();
        if shape.dynamic.contains(&t) {
            return Ok(());
        }
        let (role, index) = match t.split_once(':') {
            Some((r, i)) => (
                r,
                i.parse::<usize>()
                    .map_err(|_| bad(format!("'{t}': expected role:number")))?,
            ),
            None => (t, 0),
        };
        let have = shape
            .members
            .iter()
            .filter(|(r, _)| r.name() == role)
            .count();
        if have == 0 || index >= have {
            return Err(bad(format!(
                "the cluster has no '{t}'; it has {}",
                shape.targets().join(", ")
            )));
        }
        Ok(())
    }

    /// When the last action of this fault (restart, continue) happens.
    pub fn ends_at(&self) -> Duration {
        self.at + self.restart_after.or(self.duration).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cluster::Role;

    #[test]
    fn parses_the_issue_example() {
        let f = Fault::parse("at=30s,kill=leader,restart_after=5s").unwrap();
        assert_eq!(f.at, Duration::from_secs(30));
        assert_eq!(f.action, Action::Kill);
        assert_eq!(f.target, "leader");
        assert_eq!(f.restart_after, Some(Duration::from_secs(5)));
        assert_eq!(f.ends_at(), Duration::from_secs(35));
        let s = Fault::parse("at=2s,stop=replica:1,for=500ms").unwrap();
        assert_eq!(s.duration, Some(Duration::from_millis(500)));
    }

    #[test]
    fn refuses_bad_specs_with_the_reason() {
        for (spec, says) in [
            ("kill=leader", "at= is missing"),
            ("at=1s", "no action"),
            ("at=1s,stop=primary", "needs for="),
            ("at=1s,kill=leader,for=1s", "for= goes with stop="),
            (
                "at=1s,restart=leader,restart_after=1s",
                "restart_after= goes with kill=",
            ),
            ("at=1s,kill=leader,bogus=1", "unknown key 'bogus'"),
            ("at=soon,kill=leader", "soon"),
        ] {
            let e = Fault::parse(spec).unwrap_err().to_string();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }

    #[test]
    fn targets_must_exist_in_the_cluster() {
        let shape = Shape {
            members: vec![(Role::Primary, 0), (Role::Replica, 0), (Role::Replica, 1)],
            dynamic: &[],
        };
        let ok = |t: &str| {
            Fault::parse(&format!("at=1s,kill={t}"))
                .unwrap()
                .check_target(&shape)
        };
        assert!(ok("primary").is_ok());
        assert!(ok("replica:1").is_ok());
        assert!(ok("replica").is_ok());
        let e = ok("replica:2").unwrap_err().to_string();
        assert!(
            e.contains("has no 'replica:2'") && e.contains("replica:0..1"),
            "{e}"
        );
        assert!(ok("leader").is_err());
    }
}
