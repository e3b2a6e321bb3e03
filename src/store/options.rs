//! `--store-opt key=value` parsing and validation against each adapter's declared options.
//! The plan holds them typed and checked (`StoreKind::check`) before anything is created.

use crate::error::UsageError;
use std::collections::{BTreeMap, BTreeSet};

/// The largest size a `_mb` option takes: 1 PiB.
const MAX_MIB: u64 = 1 << 30;

/// One option an adapter accepts, with its default and help (shown by `kvmeter stores`).
pub struct OptSpec {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Validated options: every declared option present, defaults filled in.
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    store: String,
    values: BTreeMap<String, String>,
    /// The names the user gave (`--store-opt`), as opposed to defaults and what the driver
    /// sets (a managed server's `addr`).
    given: BTreeSet<String>,
    /// Options that configure nothing in this run (a managed server's, with the user's own
    /// server at `addr=`): kept for the code that reads them, left out of what is recorded.
    not_applied: BTreeSet<String>,
}

/// Serialized as the map of the value of every option that applied (manifest.json's plan).
impl serde::Serialize for StoreOptions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.applied().serialize(s)
    }
}

impl StoreOptions {
    pub fn parse(store: &str, specs: &[OptSpec], items: &[String]) -> Result<Self, UsageError> {
        let mut values: BTreeMap<String, String> = specs
            .iter()
            .map(|s| (s.name.to_string(), s.default.to_string()))
            .collect();
        let mut given = BTreeSet::new();
        for item in items {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                UsageError::new(format!(
                    "--store-opt '{item}': expected key=value (for example block_cache_mb=64)"
                ))
            })?;
            if !values.contains_key(k) {
                let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
                return Err(UsageError::new(format!(
                    "--store-opt '{k}': unknown option for store '{store}'; known: {} (see 'kvmeter stores')",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                )));
            }
            // The last one would win unseen: a script's default and the user's own, say.
            if !given.insert(k.to_string()) {
                return Err(UsageError::new(format!(
                    "--store-opt {k}: given twice ({}, then {v}); give it once",
                    values[k]
                )));
            }
            values.insert(k.to_string(), v.to_string());
        }
        Ok(StoreOptions {
            store: store.to_string(),
            values,
            given,
            not_applied: BTreeSet::new(),
        })
    }

    /// The `--store` value these options are for.
    pub fn store(&self) -> &str {
        &self.store
    }

    /// Sets a value the driver decides (a managed server's address).
    pub fn set(&mut self, key: &str, value: &str) {
        self.values.insert(key.to_string(), value.to_string());
    }

    /// Whether the user gave `key` (`--store-opt key=…`), whatever its value.
    pub fn is_given(&self, key: &str) -> bool {
        self.given.contains(key)
    }

    pub fn resolved(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    /// Marks options that configure nothing in this run; none of them may have been given.
    pub(super) fn set_not_applied(&mut self, names: &[&str]) {
        debug_assert!(names.iter().all(|n| !self.is_given(n)));
        self.not_applied = names.iter().map(|n| n.to_string()).collect();
    }

    /// Every option's value except those that configured nothing: what a run records.
    pub fn applied(&self) -> BTreeMap<String, String> {
        let applied = self
            .values
            .iter()
            .filter(|(k, _)| !self.not_applied.contains(*k));
        applied.map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn str(&self, key: &str) -> &str {
        self.values.get(key).map(String::as_str).unwrap_or("")
    }

    fn bad(&self, key: &str, expected: &str) -> UsageError {
        UsageError::new(format!(
            "--store-opt {key}={}: expected {expected} (store '{}')",
            self.str(key),
            self.store
        ))
    }

    pub fn u64(&self, key: &str) -> Result<u64, UsageError> {
        self.str(key)
            .parse()
            .map_err(|_| self.bad(key, "a whole number ≥ 0"))
    }

    pub fn positive(&self, key: &str) -> Result<u64, UsageError> {
        match self.u64(key)? {
            0 => Err(self.bad(key, "a whole number ≥ 1")),
            n => Ok(n),
        }
    }

    /// A size in MiB, at most 1 PiB (2^30 MiB): a bound no store here can use, well below
    /// where `<< 20` would wrap and hand the store a garbage size.
    pub fn mib(&self, key: &str) -> Result<u64, UsageError> {
        match self.u64(key) {
            Ok(n) if n <= MAX_MIB => Ok(n),
            _ => Err(self.bad(key, "a size in MiB from 0 to 1073741824 (1 PiB)")),
        }
    }

    /// As `mib`, at least 1.
    pub fn positive_mib(&self, key: &str) -> Result<u64, UsageError> {
        match self.u64(key) {
            Ok(n) if (1..=MAX_MIB).contains(&n) => Ok(n),
            _ => Err(self.bad(key, "a size in MiB from 1 to 1073741824 (1 PiB)")),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, UsageError> {
        match self.str(key) {
            "true" | "on" | "1" | "yes" => Ok(true),
            "false" | "off" | "0" | "no" => Ok(false),
            _ => Err(self.bad(key, "true or false")),
        }
    }

    pub fn choice<'a>(&self, key: &str, choices: &[&'a str]) -> Result<&'a str, UsageError> {
        let v = self.str(key);
        choices
            .iter()
            .find(|c| **c == v)
            .copied()
            .ok_or_else(|| self.bad(key, &format!("one of {}", choices.join(", "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const SPECS: &[OptSpec] = &[
        OptSpec {
            name: "a",
            default: "1",
            help: "",
        },
        OptSpec {
            name: "b",
            default: "false",
            help: "",
        },
    ];

    #[test]
    fn defaults_overrides_and_errors() {
        let o = StoreOptions::parse("s", SPECS, &["a=5".into()]).unwrap();
        assert_eq!(o.u64("a").unwrap(), 5);
        assert!(!o.bool("b").unwrap());
        let e = StoreOptions::parse("s", SPECS, &["zz=1".into()]).unwrap_err();
        assert!(
            e.to_string().contains("unknown option for store 's'"),
            "{e}"
        );
        assert!(e.to_string().contains("known: a, b"));
        let e = StoreOptions::parse("s", SPECS, &["a=1".into(), "a=2".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--store-opt a: given twice (1, then 2); give it once"
        );
        let e = StoreOptions::parse("s", SPECS, &["a".into()]).unwrap_err();
        assert!(e.to_string().contains("expected key=value"));
        let o = StoreOptions::parse("s", SPECS, &["a=x".into()]).unwrap();
        assert!(o
            .u64("a")
            .unwrap_err()
            .to_string()
            .contains("--store-opt a=x"));
    }

    #[test]
    fn what_was_given_and_what_applied() {
        let mut o = StoreOptions::parse("s", SPECS, &["a=5".into()]).unwrap();
        assert!(o.is_given("a") && !o.is_given("b"));
        o.set_not_applied(&["b"]);
        assert_eq!(
            o.str("b"),
            "false",
            "still there for the code that reads it"
        );
        let recorded = serde_json::to_value(&o).unwrap();
        assert_eq!(recorded, serde_json::json!({"a": "5"}));
        assert_eq!(o.applied().len(), 1);
    }

    #[test]
    fn sizes_in_mib_stop_at_one_pib() {
        let at = |v: &str| StoreOptions::parse("s", SPECS, &[format!("a={v}")]).unwrap();
        assert_eq!(at("1073741824").mib("a").unwrap(), 1 << 30);
        assert_eq!(at("0").mib("a").unwrap(), 0);
        let err = at("1073741825").mib("a").unwrap_err().to_string();
        assert!(
            err.contains("a=1073741825: expected a size in MiB from 0 to 1073741824"),
            "{err}"
        );
        assert!(at("0").positive_mib("a").is_err());
        assert_eq!(at("1073741824").positive_mib("a").unwrap(), 1 << 30);
    }
}
