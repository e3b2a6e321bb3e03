//! The coordinator's polling of one phase (`dist run`, coordinator.rs): the reports that
//! verify and sit under their own key, losses of agents whose lease expired, and the in-order
//! merge of every interval each live agent has posted or will never post.

use super::*;

/// One phase's reports as the coordinator polls them.
pub(super) struct PhasePoll {
    pub(super) p: usize,
    pub(super) name: String,
    pub(super) t0: u64,
    /// Interval index → agent → its report, not merged yet.
    pub(super) posts: BTreeMap<usize, BTreeMap<usize, IntervalPost>>,
    pub(super) dones: BTreeMap<usize, PhaseDone>,
    pub(super) last_merged: BTreeMap<usize, usize>,
    pub(super) next_k: usize,
    /// Intervals some agent posted through etcd (deleted there once merged).
    pub(super) via_etcd: BTreeSet<usize>,
    /// Bytes of the reports held, by interval (what waiting for a late agent costs).
    pub(super) held_bytes: BTreeMap<usize, usize>,
    /// Whether this phase already said it merged intervals without a late agent.
    pub(super) forced_said: bool,
    /// Second copies of reports held, dropped.
    pub(super) duplicates: u64,
    /// Agents any of whose reports came through etcd.
    pub(super) etcd_agents: BTreeSet<usize>,
}

/// Reports the coordinator holds at most while it waits for an agent that is late but whose
/// lease has not expired: past this, the oldest interval is merged without it. At 1,000 agents
/// a lease of 10 s at 1 s intervals holds ~40 MB (bench/dist-scale.sh); this bounds a longer
/// lease, shorter intervals or bigger reports.
pub(super) const MAX_HELD_BYTES: usize = 256 << 20;

impl PhasePoll {
    /// Live agents with no report of interval `k` that have not ended before it.
    fn missing(&self, k: usize, live: &BTreeSet<usize>) -> Vec<usize> {
        let have = self.posts.get(&k);
        live.iter()
            .filter(|a| {
                !have.is_some_and(|h| h.contains_key(a))
                    && self.dones.get(a).is_none_or(|d| d.intervals > k)
            })
            .copied()
            .collect()
    }

    /// Holds `post` (`bytes` as received) until its interval is merged: one report per
    /// (phase, interval, agent). A second copy is dropped — never merged, never counted
    /// toward the bytes held (`MAX_HELD_BYTES`) — and says false.
    pub(super) fn hold(&mut self, post: IntervalPost, bytes: usize) -> bool {
        let (k, a) = (post.index, post.agent);
        let held = self.posts.entry(k).or_default();
        if held.contains_key(&a) {
            return false;
        }
        held.insert(a, post);
        *self.held_bytes.entry(k).or_default() += bytes;
        true
    }

    /// The interval to merge next, with the live agents it goes without: `next_k` once every
    /// live agent posted it or ended before it; else, when the reports held exceed `limit`,
    /// the oldest one held.
    pub(super) fn next_to_merge(
        &self,
        live: &BTreeSet<usize>,
        limit: usize,
    ) -> Option<(usize, Vec<usize>)> {
        if self.posts.contains_key(&self.next_k) && self.missing(self.next_k, live).is_empty() {
            return Some((self.next_k, vec![]));
        }
        if self.held_bytes.values().sum::<usize>() > limit {
            let k = *self.posts.keys().next()?;
            return Some((k, self.missing(k, live)));
        }
        None
    }
}

impl Session {
    /// Reads the phase's ends and reports: only values that verify, sit under their own key
    /// and come from a registered agent count. Returns the bytes and number of new reports.
    pub(super) fn collect(
        &mut self,
        ph: &mut PhasePoll,
        regs: &BTreeMap<usize, Registration>,
    ) -> (u64, u64) {
        let p = ph.p;
        // Ends first: an agent posts its intervals before its end, so every interval of an
        // end seen here is in the listing that follows (and, over the channel, in the same
        // or an earlier batch: one agent's frames arrive in order).
        let (done_prefix, iv_prefix) = (format!("done/{p}/"), format!("iv/{p}/"));
        let pushed = self.pushed();
        let mut dones = self.listed(&done_prefix);
        let mut ivs: Vec<(String, String, bool)> = Vec::new();
        for (k, v) in pushed {
            if k.starts_with(&done_prefix) {
                dones.push((k, v));
            } else if k.starts_with(&iv_prefix) {
                ivs.push((k, v, false));
            }
            // Anything else is another phase's: a lost agent's straggler, not merged.
        }
        ivs.extend(
            self.listed(&iv_prefix)
                .into_iter()
                .map(|(k, v)| (k, v, true)),
        );
        for (k, v) in dones {
            match parse::<PhaseDone>("phase end", &v) {
                Some(d)
                    if k == format!("done/{p}/{:04}", d.agent)
                        && d.phase_index == p
                        && regs.contains_key(&d.agent) =>
                {
                    ph.dones.insert(d.agent, d);
                }
                Some(_) => self.warn(&k, "a phase end that does not match its key"),
                None => {}
            }
        }
        // Reports taken before an agent's end showed its count: drop any past it.
        for (a, d) in &ph.dones {
            for (_, have) in ph.posts.range_mut(d.intervals..) {
                have.remove(a);
            }
        }
        ph.posts.retain(|_, have| !have.is_empty());
        let posts = &ph.posts;
        ph.held_bytes.retain(|k, _| posts.contains_key(k));
        let (mut bytes, mut count) = (0, 0);
        for (k, v, from_etcd) in ivs {
            let Some(post) = parse::<IntervalPost>("interval", &v) else {
                continue;
            };
            if k != format!("iv/{p}/{:06}/{:04}", post.index, post.agent)
                || post.phase_index != p
                || !regs.contains_key(&post.agent)
            {
                self.warn(&k, "an interval that does not match its key");
                continue;
            }
            // An agent's end says how many intervals it wrote: an index past it is not one.
            let beyond_end = ph
                .dones
                .get(&post.agent)
                .is_some_and(|d| post.index >= d.intervals);
            if beyond_end {
                self.warn(
                    &k,
                    "an interval past the agent's own count of its intervals",
                );
                continue;
            }
            if post.index >= ph.next_k {
                if from_etcd {
                    ph.via_etcd.insert(post.index);
                    ph.etcd_agents.insert(post.agent);
                }
                if ph.hold(post, k.len() + v.len()) {
                    bytes += (k.len() + v.len()) as u64;
                    count += 1;
                } else if !from_etcd {
                    // etcd lists what is not merged yet at every poll; the channel never
                    // repeats a frame, so this came twice from a key holder.
                    ph.duplicates += 1;
                    self.warn(&k, "a second copy of a report held: dropped");
                }
            }
        }
        (bytes, count)
    }

    /// The agents whose lease is alive, listed at most once a second (`None` between).
    /// Listed *before* the reports are collected: an agent ends its phase, has every report
    /// read (channel) or put (etcd), and only then gives its lease up, so an agent missing
    /// here whose end is not among the reports collected after is lost, never merely done.
    pub(super) fn alive(&mut self) -> Option<BTreeSet<usize>> {
        if self
            .liveness_checked
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return None;
        }
        self.liveness_checked = Some(Instant::now());
        let listed = self
            .coord
            .list("agent/")
            .map_err(|e| errln!("warning: dist: etcd: {e}"))
            .ok()?;
        let _ = self.coord.take_rejected();
        Some(
            listed
                .iter()
                .filter_map(|(k, v)| {
                    parse::<Registration>("registration", v)
                        .filter(|r| *k == format!("agent/{:04}", r.index))
                })
                .map(|r| r.index)
                .collect(),
        )
    }

    /// Agents whose lease expired (not in `alive`, listed before this poll's reports were
    /// collected) without ending the phase are lost.
    pub(super) fn losses(
        &mut self,
        ph: &mut PhasePoll,
        alive: BTreeSet<usize>,
        live: &mut BTreeSet<usize>,
        merger: &mut Merger,
        abort_on_loss: bool,
        aborted: &mut Option<String>,
    ) {
        for a in live.clone() {
            if alive.contains(&a) || ph.dones.contains_key(&a) {
                continue;
            }
            live.remove(&a);
            let at_s = (crate::distributed::unix_ns().saturating_sub(ph.t0)) as f64 / 1e9;
            errln!(
                "dist: agent {a} lost {at_s:.1} s into phase {} (its lease expired); {} agents go on",
                ph.name,
                live.len()
            );
            merger.info.lost.push(Loss {
                agent: a,
                phase: ph.name.clone(),
                at_s,
                last_interval: ph.last_merged.get(&a).copied(),
            });
            merger.info.degraded = true;
            if abort_on_loss && aborted.is_none() {
                *aborted = Some(format!(
                    "agent {a} was lost {at_s:.1} s into phase {}; --on-agent-loss abort stopped the run",
                    ph.name
                ));
                let _ = self.coord.put("abort", "agent lost", Some(self.lease));
            }
        }
    }

    /// Merges every interval each live agent has posted or will never post, in order.
    pub(super) fn merge_ready(
        &mut self,
        ph: &mut PhasePoll,
        live: &BTreeSet<usize>,
        merger: &mut Merger,
    ) -> anyhow::Result<()> {
        while let Some((k, missing)) = ph.next_to_merge(live, MAX_HELD_BYTES) {
            if !missing.is_empty() && !ph.forced_said {
                ph.forced_said = true;
                let w = format!(
                    "phase {}: from interval {k} on, intervals were merged without late agents (first: {missing:?}) once the reports held waiting for them passed {} MiB; their own run directories have every interval ('kvmeter dist merge')",
                    ph.name,
                    MAX_HELD_BYTES >> 20
                );
                errln!("warning: dist: {w}");
                merger.info.warnings.push(w);
                merger.info.degraded = true;
            }
            let have = ph.posts.remove(&k).unwrap_or_default();
            ph.held_bytes.remove(&k);
            let list: Vec<&IntervalPost> = have.values().collect();
            merger.interval(&list)?;
            for a in have.keys() {
                ph.last_merged.insert(*a, k);
            }
            if ph.via_etcd.remove(&k) {
                let _ = self.coord.delete_all(&format!("iv/{}/{k:06}/", ph.p));
            }
            ph.next_k = k + 1;
        }
        Ok(())
    }
}

impl Session {
    /// The reports pushed to the coordinator since the last poll (verified by the inbox);
    /// a dropped connection is said once per peer and reason.
    fn pushed(&mut self) -> Vec<(String, String)> {
        let Some(inbox) = &self.inbox else {
            return vec![];
        };
        let (got, rejected) = (inbox.take(), inbox.take_rejected());
        for (who, why) in rejected {
            // Said once each, and at most 20 lines: whoever writes them chooses their text.
            let line = format!("warning: dist: dropped a report connection from {who}: {why}");
            if self.relay_warnings < 20 && self.warned.insert(line.clone()) {
                self.relay_warnings += 1;
                errln!("{}", clip(&line));
                if self.relay_warnings == 20 {
                    errln!("warning: dist: further dropped report connections are not shown");
                }
            }
        }
        got
    }
}

/// An agent's message, cut to one short line (it is shown, never interpreted).
pub(super) fn clip(s: &str) -> String {
    let one: String = s.chars().filter(|c| !c.is_control()).take(500).collect();
    one
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(agent: usize, index: usize) -> IntervalPost {
        IntervalPost {
            agent,
            phase_index: 0,
            phase: "run".into(),
            index,
            start_s: index as f64,
            end_s: index as f64 + 1.0,
            warmup: false,
            stats: crate::measure::wire::WireStats {
                paced: false,
                lag: None,
                ops: vec![],
            },
        }
    }

    fn poll() -> PhasePoll {
        PhasePoll {
            p: 0,
            name: "run".into(),
            t0: 0,
            posts: BTreeMap::new(),
            dones: BTreeMap::new(),
            last_merged: BTreeMap::new(),
            next_k: 0,
            via_etcd: BTreeSet::new(),
            held_bytes: BTreeMap::new(),
            forced_said: false,
            duplicates: 0,
            etcd_agents: BTreeSet::new(),
        }
    }

    #[test]
    fn a_second_copy_of_a_report_is_neither_held_twice_nor_counted_toward_the_bound() {
        let live: BTreeSet<usize> = [0, 1].into();
        let mut ph = poll();
        assert!(ph.hold(post(0, 0), 1000));
        // Agent 0's interval 0, replayed 10,000 times while agent 1 is late (review F1: each
        // copy used to add its bytes, so the bound forced a merge without agent 1).
        for _ in 0..10_000 {
            assert!(!ph.hold(post(0, 0), 1000));
        }
        assert_eq!(ph.held_bytes.values().sum::<usize>(), 1000);
        assert_eq!(ph.next_to_merge(&live, 256 << 20), None);
        assert!(ph.hold(post(1, 0), 1000));
        assert_eq!(ph.next_to_merge(&live, 256 << 20), Some((0, vec![])));
    }

    #[test]
    fn a_late_agent_holds_intervals_only_up_to_the_bound() {
        let live: BTreeSet<usize> = [0, 1].into();
        let mut ph = poll();
        // Agent 1 is late: agent 0 posted intervals 0..5, 1 KB each.
        for k in 0..5 {
            ph.posts.entry(k).or_default().insert(0, post(0, k));
            ph.held_bytes.insert(k, 1000);
        }
        // Under the bound nothing merges; over it the oldest goes, without agent 1.
        assert_eq!(ph.next_to_merge(&live, 5000), None);
        assert_eq!(ph.next_to_merge(&live, 4999), Some((0, vec![1])));
        // Once agent 1 posts interval 0, it merges in order, whatever the bound.
        ph.posts.get_mut(&0).unwrap().insert(1, post(1, 0));
        assert_eq!(ph.next_to_merge(&live, usize::MAX), Some((0, vec![])));
        // A gap (nobody's interval 0) is skipped only past the bound.
        ph.posts.remove(&0);
        ph.held_bytes.remove(&0);
        assert_eq!(ph.next_to_merge(&live, 3999), Some((1, vec![1])));
        assert_eq!(ph.next_to_merge(&live, 4000), None);
    }
}
