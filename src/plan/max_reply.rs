//! `max_reply=auto`: the bound on what a network store's server may send for one request,
//! derived from the workload (docs/stores.md, "Hostile servers"), so a hostile or broken
//! server's declared length is refused rather than allocated.

use super::PhasePlan;
use crate::store::StoreOptions;

/// `max_reply=auto` of a network store becomes twice the most bytes one request of any phase
/// reads (a record, a scan's longest run of records, or a pipelined batch) plus 64 KiB, at
/// least 1 MiB; written into the plan, so the manifest shows the bound the run used. A
/// store without the option, or a plan without a workload (pressure), keeps what it has.
pub(super) fn fill(opts: &mut StoreOptions, phases: &[PhasePlan]) {
    if opts.str("max_reply") != "auto" {
        return;
    }
    let pipeline = opts.u64("pipeline").unwrap_or(1).max(1);
    let most = phases
        .iter()
        .filter_map(|p| p.workload.as_ref())
        .map(|w| {
            w.largest_record()
                .saturating_mul(w.records_per_read().max(pipeline))
        })
        .max();
    if let Some(most) = most {
        let bytes = most
            .saturating_mul(2)
            .saturating_add(64 << 10)
            .clamp(1 << 20, crate::store::net::MAX_MAX_REPLY as u64);
        opts.set("max_reply", &bytes.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::super::{build, Request};

    fn max_reply(store: &str, workload: &str, props: &[&str], opts: &[&str]) -> String {
        let r = Request {
            command: "run".into(),
            store: store.into(),
            workload_files: vec![workload.into()],
            props: props.iter().map(|p| p.to_string()).collect(),
            store_opts: opts.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        };
        build(&r)
            .unwrap()
            .store_options
            .str("max_reply")
            .to_string()
    }

    #[test]
    fn auto_is_twice_what_one_request_reads() {
        // Workload C's 1 KB records: the 1 MiB floor.
        assert_eq!(max_reply("redis", "workloadc", &[], &[]), "1048576");
        // Workload E scans up to 100 records of 10 fields of 10,000 bytes: each record
        // 10 x (10,000 + 25 + 32) + 24 + 256 = 100,850 bytes, times 100, twice, + 64 KiB.
        let e = max_reply("memcached", "workloade", &["fieldlength=10000"], &[]);
        assert_eq!(e, (2 * 100 * 100_850 + 65_536).to_string());
        // A pipelined batch counts like a scan.
        let p = max_reply(
            "redis",
            "workloadc",
            &["fieldlength=10000"],
            &["pipeline=50"],
        );
        assert_eq!(p, (2 * 50 * 100_850 + 65_536).to_string());
        // A size given is kept; a store without the option has none.
        assert_eq!(
            max_reply("etcd", "workloade", &[], &["max_reply=4MiB"]),
            "4MiB"
        );
        assert_eq!(max_reply("null", "workloadc", &[], &[]), "");
    }
}
