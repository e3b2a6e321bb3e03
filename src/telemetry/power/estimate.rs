//! The utilisation model P = idle + (max − idle)·CPU busy: an estimate, labelled as one
//! wherever it appears, for machines without a measured source (this VM).

use super::*;
use crate::telemetry::procfs::{parse_stat, CpuShare, CpuTimes, Root};
use std::time::Instant;

pub struct Estimate {
    pub(super) info: PowerInfo,
    pub(super) model: Model,
    pub(super) root: Root,
    pub(super) last: Option<(Instant, CpuTimes)>,
    pub(super) joules: f64,
}

impl Estimate {
    pub fn new(model: Model, root: Root) -> Self {
        Estimate {
            info: PowerInfo {
                source: "estimate".into(),
                scope: "whole machine (model, not a measurement)".into(),
                estimate: true,
                detail: format!(
                    "P = {} W + ({} W − {} W) × CPU busy fraction; {}",
                    model.idle_w, model.max_w, model.idle_w, model.origin
                ),
            },
            model,
            root,
            last: None,
            joules: 0.0,
        }
    }
}

impl Meter for Estimate {
    fn info(&self) -> &PowerInfo {
        &self.info
    }
    fn joules(&mut self) -> Result<f64, String> {
        self.reading().map(|(j, _)| j)
    }
    fn reading(&mut self) -> Result<(f64, Instant), String> {
        let now = Instant::now();
        let cpu = self
            .root
            .read("proc/stat")
            .ok()
            .and_then(|t| parse_stat(&t))
            .map(|c| c.0);
        let Some(cpu) = cpu else {
            return Err("the estimate needs /proc/stat".into());
        };
        if let Some((t, prev)) = &self.last {
            let busy = CpuShare::between(prev, &cpu)
                .map(|s| s.busy / 100.0)
                .unwrap_or(0.0);
            self.joules += self.model.watts(busy) * now.duration_since(*t).as_secs_f64();
        }
        self.last = Some((now, cpu));
        Ok((self.joules, now))
    }
}
