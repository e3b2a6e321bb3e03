//! The benches' settings come from the environment (`bench/compare.sh` sets them; `cargo
//! bench` passes no arguments through): a whole number with a default, or a 0/1 switch. A value
//! that is set but neither is one line naming it and exit 2, rather than a figure measured with
//! a setting nobody asked for (`THREADS=two` silently running one thread).

pub fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| bad(name, &v, "a whole number")),
    }
}

/// A count that must be at least 1 (THREADS, OPS, RECORDS).
pub fn count(name: &str, default: u64) -> u64 {
    match env(name, default) {
        0 => bad(name, "0", "at least 1"),
        n => n,
    }
}

/// A switch: unset or 0 is off, 1 is on.
pub fn flag(name: &str) -> bool {
    match std::env::var(name) {
        Err(_) => false,
        Ok(v) => match v.trim() {
            "0" | "" => false,
            "1" => true,
            _ => bad(name, &v, "0 or 1"),
        },
    }
}

pub fn bad(name: &str, value: &str, want: &str) -> ! {
    eprintln!("{name}={value}: expected {want}");
    std::process::exit(2)
}
