//! The fault thread: fires each `--fault` at its time on the member its target names then,
//! follows up (restart after a kill, continue after a stop), and watches the cluster until it
//! reports a new leader or primary. Every event goes to the caller's sink the moment it
//! happens (the run writes it to `events.csv`, so a crash of kvmeter keeps the ones so far)
//! and into the phase's summary.
//!
//! Only members of a cluster kvmeter started are ever signalled (`Cluster` holds only
//! children of this process).

use crate::plan::fault::{Action, Fault};
use crate::store::cluster::Cluster;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One thing that happened to the cluster.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Event {
    /// Seconds after the phase started.
    pub t_s: f64,
    /// Which `--fault` (0-based) it belongs to.
    pub fault: usize,
    /// kill, stop, restart, answered (a restarted member serves), continue, leader or primary
    /// (the cluster names a new one), waited (for replicas to be in sync), skipped.
    pub event: String,
    pub target: String,
    pub member: String,
    pub pid: Option<u32>,
    /// What the cluster reported right after.
    pub cluster: String,
}

/// Where each event goes the moment it happens (events.csv: `report::fault_files::append_event`).
pub type EventSink = Box<dyn FnMut(&Event) + Send>;

/// What the schedule has to do at a time: its queue's entries.
enum Pending {
    Fire(usize),
    /// Start member `i` again (after a kill).
    Restart(usize, usize),
    /// SIGCONT member `i` (after a stop).
    Resume(usize, usize),
    /// Poll until the target role names another member than the victim, or the victim in a
    /// later life than the one hit (a restarted member elected again), until the deadline.
    Watch(usize, usize, u32, Duration),
}

pub struct Schedule {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<Event>>>,
}

impl Schedule {
    pub fn start(
        faults: Vec<Fault>,
        cluster: Arc<Mutex<Cluster>>,
        t0: Instant,
        sink: EventSink,
    ) -> Schedule {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("kvm-faults".into())
            .spawn(move || {
                let mut r = Runner {
                    faults,
                    cluster,
                    t0,
                    stop: s,
                    events: vec![],
                    sink,
                    victims: vec![],
                };
                r.run();
                r.events
            })
            .expect("spawn the fault thread");
        Schedule {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the schedule (pending restarts and continues happen now) and returns the events.
    pub fn finish(mut self) -> Vec<Event> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

struct Runner {
    faults: Vec<Fault>,
    cluster: Arc<Mutex<Cluster>>,
    t0: Instant,
    stop: Arc<AtomicBool>,
    events: Vec<Event>,
    sink: EventSink,
    /// Per fault: the member it hit.
    victims: Vec<Option<usize>>,
}

impl Runner {
    fn run(&mut self) {
        self.victims = vec![None; self.faults.len()];
        let mut queue: Vec<(Duration, Pending)> = self
            .faults
            .iter()
            .enumerate()
            .map(|(k, f)| (f.at, Pending::Fire(k)))
            .collect();
        while !queue.is_empty() {
            let next = (0..queue.len())
                .min_by_key(|&i| queue[i].0)
                .expect("non-empty");
            let when = queue[next].0;
            if !self.sleep_until(when) {
                break;
            }
            let (_, job) = queue.swap_remove(next);
            self.step(job, &mut queue);
        }
        // The phase ended: what a fault left stopped or down is put back, so later phases
        // (and the durability check) find the cluster whole.
        for (_, job) in queue {
            match job {
                Pending::Restart(i, k) => self.restart(i, k, " (at the end of the phase)"),
                Pending::Resume(i, k) => self.resume(i, k, " (at the end of the phase)"),
                Pending::Fire(_) | Pending::Watch(..) => {}
            }
        }
    }

    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Sleeps until `when` after the start; false when the phase ended first.
    fn sleep_until(&self, when: Duration) -> bool {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = self.now();
            if now >= when {
                return true;
            }
            std::thread::sleep((when - now).min(Duration::from_millis(10)));
        }
    }

    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.cluster.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn event(&mut self, fault: usize, event: &str, member: Option<usize>, extra: &str) {
        let (label, pid, status) = {
            let c = self.cluster();
            let (label, pid) = member
                .map(|i| (c.members[i].label(), Some(c.members[i].server.pid)))
                .unwrap_or_default();
            (label, pid, format!("{}{extra}", c.status()))
        };
        let e = Event {
            t_s: self.now().as_secs_f64(),
            fault,
            event: event.to_string(),
            target: self.faults[fault].target.clone(),
            member: label,
            pid,
            cluster: status,
        };
        (self.sink)(&e);
        errln!(
            "fault: {:.3} s {} {} {}{}",
            e.t_s,
            e.event,
            e.member,
            e.cluster,
            e.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        );
        self.events.push(e);
    }

    fn step(&mut self, next: Pending, queue: &mut Vec<(Duration, Pending)>) {
        match next {
            Pending::Fire(k) => self.fire(k, queue),
            Pending::Restart(i, k) => self.restart(i, k, ""),
            Pending::Resume(i, k) => self.resume(i, k, ""),
            Pending::Watch(k, victim, life, until) => {
                let target = self.faults[k].target.clone();
                let now_at = self.cluster().resolve(&target);
                let lives = self.cluster().members[victim].server.lives;
                match now_at {
                    Ok(j) if j != victim => self.event(k, &target, Some(j), ""),
                    // The member hit, restarted and elected again: a new leader all the same.
                    Ok(j) if lives > life => {
                        self.event(k, &target, Some(j), "; the restarted member, elected again")
                    }
                    _ if self.now() < until => {
                        queue.push((
                            self.now() + Duration::from_millis(50),
                            Pending::Watch(k, victim, life, until),
                        ));
                    }
                    _ => {}
                }
            }
        }
    }

    fn fire(&mut self, k: usize, queue: &mut Vec<(Duration, Pending)>) {
        let f = self.faults[k].clone();
        if f.wait_sync {
            let t = Instant::now();
            let r = self.cluster().wait_in_sync(Duration::from_secs(10));
            let waited = t.elapsed();
            if let Err(e) = r {
                self.event(
                    k,
                    "skipped",
                    None,
                    &format!("; replicas not in sync after 10 s: {e}"),
                );
                return;
            }
            if waited > Duration::from_millis(200) {
                self.event(
                    k,
                    "waited",
                    None,
                    &format!(
                        "; {:.1} s for the replicas to be in sync",
                        waited.as_secs_f64()
                    ),
                );
            }
        }
        let resolved = self.cluster().resolve(&f.target);
        let i = match resolved {
            Ok(i) => i,
            Err(e) => {
                self.event(
                    k,
                    "skipped",
                    None,
                    &format!("; target '{}' not found: {e}", f.target),
                );
                return;
            }
        };
        self.victims[k] = Some(i);
        let pid = self.cluster().members[i].server.pid;
        let life = self.cluster().members[i].server.lives;
        let done = {
            let mut c = self.cluster();
            let m = &mut c.members[i].server;
            match f.action {
                Action::Kill => m.kill(),
                Action::Stop => m.pause(),
                Action::Restart => m.stop().map(|_| ()).and_then(|_| m.restart()),
            }
        };
        // The event names the pid that was hit.
        let extra = match &done {
            Ok(()) => String::new(),
            Err(e) => format!("; failed: {e:#}"),
        };
        self.event(k, f.action.name(), Some(i), &extra);
        if let Some(e) = self.events.last_mut() {
            e.pid = Some(pid);
        }
        if done.is_err() {
            return;
        }
        let now = self.now();
        match f.action {
            Action::Kill => {
                if let Some(ra) = f.restart_after {
                    queue.push((now + ra, Pending::Restart(i, k)));
                }
            }
            Action::Stop => {
                queue.push((now + f.duration.unwrap_or_default(), Pending::Resume(i, k)))
            }
            Action::Restart => self.wait_answer(i, k),
        }
        if matches!(f.target.as_str(), "leader" | "primary") {
            queue.push((
                now + Duration::from_millis(50),
                Pending::Watch(k, i, life, now + Duration::from_secs(60)),
            ));
        }
    }

    fn restart(&mut self, i: usize, k: usize, when: &str) {
        let r = self.cluster().members[i].server.restart();
        match r {
            Ok(()) => {
                self.event(k, "restart", Some(i), when);
                self.wait_answer(i, k);
            }
            Err(e) => self.event(k, "restart", Some(i), &format!("{when}; failed: {e:#}")),
        }
    }

    fn resume(&mut self, i: usize, k: usize, when: &str) {
        let r = self.cluster().members[i].server.resume();
        let extra = match r {
            Ok(()) => when.to_string(),
            Err(e) => format!("{when}; failed: {e:#}"),
        };
        self.event(k, "continue", Some(i), &extra);
    }

    /// Waits up to 30 s for a (re)started member `i` to answer, and records when it did.
    fn wait_answer(&mut self, i: usize, k: usize) {
        let t = Instant::now();
        let r = self.cluster().wait_member(i, Duration::from_secs(30));
        let (event, extra) = match r {
            Ok(()) => (
                "answered",
                format!("; {:.2} s after its start", t.elapsed().as_secs_f64()),
            ),
            Err(e) => ("unanswered", format!("; not within 30 s: {e}")),
        };
        self.event(k, event, Some(i), &extra);
    }
}
