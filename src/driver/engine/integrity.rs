//! The data-integrity check of a read's reply on the engine (ycsb-workload-spec §4.3), as the
//! worker's measured call makes it: with `dataintegrity=true` every value read must be the one
//! derived from the key it was asked for, so a reply matched to the wrong request fails.

use super::Loop;
use crate::measure::Metric;
use crate::record::RecordView;
use crate::store::Status;

impl Loop<'_, '_> {
    /// The data-integrity check of a read's reply (spec §4.3), timed; `None` when off.
    pub(super) fn verify(
        &mut self,
        ci: usize,
        status: Status,
        view_base: usize,
    ) -> Option<(bool, u64)> {
        let wl = self.sh.workload;
        let c = &self.conns[ci];
        let slot = c.oldest()?;
        if !wl.cfg.dataintegrity || slot.metric != Metric::Read || !status.is_ok() {
            return None;
        }
        let t0 = self.clock.now();
        let bytes = match self.codec.decoded() {
            Some(d) => d,
            None => &c.unparsed()[view_base..],
        };
        let view = RecordView::new(bytes, &self.spans);
        let one_unnamed = !slot.field.is_empty()
            && view.len() == 1
            && view.iter().next().is_some_and(|(n, _)| n.is_empty());
        let good = if one_unnamed {
            // HGET's reply is the value alone: pair it with the field asked for.
            let value = view.iter().next().map(|(_, v)| v).unwrap_or_default();
            self.one.clear();
            self.one.push(&slot.field, value);
            wl.verify(&slot.key, self.one.view(), &mut self.scratch)
        } else {
            wl.verify(&slot.key, view, &mut self.scratch)
        };
        Some((good, self.clock.now().saturating_sub(t0)))
    }
}
