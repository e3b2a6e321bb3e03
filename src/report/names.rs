//! What a reader sees in place of a key: every figure's axis and legend names a metric,
//! column or parameter through this one table (`run.throughput_ops_per_s` is drawn as
//! "throughput (ops/s)"), so that a key is spelled out the same way everywhere, and a key
//! missing from the table is still readable (underscores become spaces; units stay).

/// Metric and column keys, and their names on a figure.
pub const NAMES: &[(&str, &str)] = &[
    // Summary metrics (summary.json, sweep.json, an experiment's figures).
    ("throughput_ops_per_s", "throughput (ops/s)"),
    ("throughput_mb_per_s", "throughput (MB/s)"),
    ("achieved_ops_per_s", "achieved load (ops/s)"),
    ("offered_ops_per_s", "offered load (ops/s)"),
    ("latency_avg_us", "mean latency (µs)"),
    ("latency_p50_us", "median latency (µs)"),
    ("latency_p99_us", "p99 latency (µs)"),
    ("latency_p99_9_us", "p99.9 latency (µs)"),
    ("intended_avg_us", "mean latency from intended start (µs)"),
    ("intended_p99_us", "p99 from intended start (µs)"),
    ("intended_p99_9_us", "p99.9 from intended start (µs)"),
    ("ops_per_joule", "operations per joule"),
    ("joules_per_op", "joules per operation"),
    ("ipc", "instructions per cycle"),
    ("branch_miss_ratio", "branch miss ratio"),
    ("llc_miss_ratio", "last-level cache miss ratio"),
    ("kvmeter_cpu_pct", "kvmeter CPU (% of one CPU)"),
    ("server_cpu_pct", "server CPU (% of one CPU)"),
    ("capacity_ops_per_s", "capacity (ops/s)"),
    ("write_amplification", "write amplification (kernel)"),
    ("read_amplification", "read amplification (kernel)"),
    (
        "write_amplification_over_kvmeter_bytes",
        "write amplification (kernel over kvmeter's bytes)",
    ),
    (
        "store_write_amplification",
        "write amplification (store's own counters)",
    ),
    ("cache_hit_ratio", "cache hit ratio"),
    ("on_disk_mb", "size on disk (MB)"),
    (
        "space_amplification",
        "space amplification (keys not counted)",
    ),
    ("storage_write_mb", "storage bytes written, kernel (MB)"),
    ("kvmeter_write_mb", "bytes kvmeter sent to be written (MB)"),
    (
        "kernel_over_store",
        "kernel's storage bytes over the store's own",
    ),
    // Interval, timeline and telemetry columns.
    ("ops_per_s", "operations/s"),
    ("ok_per_s", "successful operations/s"),
    ("p50_us", "median latency (µs)"),
    ("p99_us", "p99 latency (µs)"),
    ("p99_9_us", "p99.9 latency (µs)"),
    ("max_us", "max latency (µs)"),
    ("mean_us", "mean latency (µs)"),
    ("cpu_busy_pct", "CPU busy (% of all CPUs)"),
    ("cpu_iowait_pct", "CPU iowait (% of all CPUs)"),
    ("proc_cpu_pct", "kvmeter CPU (% of one CPU)"),
    ("disk_util_pct", "disk utilization (%)"),
    ("disk_read_mb_per_s", "disk read (MB/s)"),
    ("disk_write_mb_per_s", "disk write (MB/s)"),
    ("disk_read_iops", "disk read IOPS"),
    ("disk_write_iops", "disk write IOPS"),
    ("disk_queue_depth", "disk queue depth"),
    ("mem_used_mb", "memory used (MB)"),
    ("power_w", "power (W)"),
    ("normalized_pressure", "normalized pressure"),
    // Sweep parameters.
    ("threads", "client threads"),
    ("threads-per-cpu", "client threads per CPU"),
    ("connections", "connections"),
    ("rate", "offered load (ops/s)"),
    ("value-size", "value size (bytes)"),
    ("store-opt.block_cache_mb", "block cache (MiB)"),
    ("store-opt.cluster", "cluster members"),
    ("store-opt.cpus", "server CPU set (point)"),
];

/// The name of `key` on a figure. A `phase.metric` key is named by its metric (the legend or
/// the title says which phase); an unknown key is shown with its underscores as spaces and
/// a unit suffix written out.
pub fn name(key: &str) -> String {
    if let Some((_, n)) = NAMES.iter().find(|(k, _)| *k == key) {
        return n.to_string();
    }
    // A store option or a workload property is the store's own name, never a metric's.
    let param = key.starts_with("store-opt.") || key.starts_with("p.");
    if let Some((_, metric)) = key.rsplit_once('.').filter(|_| !param) {
        if let Some((_, n)) = NAMES.iter().find(|(k, _)| *k == metric) {
            return n.to_string();
        }
    }
    readable(key)
}

/// A key without a table entry, made readable: `foo_bar_us` → "foo bar (µs)".
fn readable(key: &str) -> String {
    let key = key.rsplit_once('.').map(|(_, m)| m).unwrap_or(key);
    for (suffix, unit) in [
        ("_ops_per_s", "ops/s"),
        ("_mb_per_s", "MB/s"),
        ("_per_s", "/s"),
        ("_pct", "%"),
        ("_us", "µs"),
        ("_ms", "ms"),
        ("_mb", "MB"),
        ("_w", "W"),
    ] {
        if let Some(stem) = key.strip_suffix(suffix) {
            return format!("{} ({unit})", stem.replace(['_', '-'], " "));
        }
    }
    key.replace(['_', '-'], " ")
}

#[cfg(test)]
mod tests {
    use super::name;

    #[test]
    fn keys_become_names() {
        assert_eq!(name("run.throughput_ops_per_s"), "throughput (ops/s)");
        assert_eq!(name("load.latency_p99_9_us"), "p99.9 latency (µs)");
        assert_eq!(name("store-opt.block_cache_mb"), "block cache (MiB)");
        assert_eq!(name("threads"), "client threads");
        // Not in the table: still no key on the axis.
        assert_eq!(name("run.queue_wait_us"), "queue wait (µs)");
        assert_eq!(name("store-opt.memtable_mb"), "memtable (MB)");
        assert_eq!(name("p.fieldcount"), "fieldcount");
        assert_eq!(name("store-opt.threads"), "threads");
    }
}
