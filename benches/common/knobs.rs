//! The benches' settings come from the environment (`cargo bench` passes no arguments through
//! `bench/compare.sh`): a number, or its default when unset or not a number.

pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
