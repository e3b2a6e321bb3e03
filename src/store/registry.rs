//! The stores kvmeter knows, listed once: name, the cargo feature that builds it (none for
//! stores always built) and the adapter when this build has it. `kvmeter stores`, `--store`
//! and the "rebuild with --features" message all read this table.

use super::StoreKind;

pub struct Entry {
    pub name: &'static str,
    /// The cargo feature that adds it; `None`: in every build.
    pub feature: Option<&'static str>,
    /// The adapter, when this build has it.
    pub kind: Option<&'static StoreKind>,
}

/// `Some(&KIND)` when the feature is on, else `None` (the module is not compiled).
macro_rules! built {
    ($feature:literal, $kind:path) => {{
        #[cfg(feature = $feature)]
        let k = Some(&$kind);
        #[cfg(not(feature = $feature))]
        let k = None;
        k
    }};
}

/// Every store, in the order `kvmeter stores` lists them (the papers' order, then `null`).
pub fn entries() -> [Entry; 9] {
    let always = |name, kind| Entry {
        name,
        feature: None,
        kind: Some(kind),
    };
    let optional = |name, kind| Entry {
        name,
        feature: Some(name),
        kind,
    };
    [
        optional("rocksdb", built!("rocksdb", super::rocksdb::KIND)),
        optional("wiredtiger", built!("wiredtiger", super::wiredtiger::KIND)),
        optional("lmdb", built!("lmdb", super::lmdb::KIND)),
        optional("leveldb", built!("leveldb", super::leveldb::KIND)),
        optional("sqlite", built!("sqlite", super::sqlite::KIND)),
        always("memcached", &super::memcached::KIND),
        always("redis", &super::redis::KIND),
        always("etcd", &super::etcd::KIND),
        always("null", &super::null::KIND),
    ]
}

/// The adapters in this build (plug-ins are not listed: `store::find` loads those).
pub fn built_in() -> Vec<&'static StoreKind> {
    entries().into_iter().filter_map(|e| e.kind).collect()
}

/// A built-in adapter by name; `store::find` is the one `--store` uses (plug-ins too).
pub fn find_built_in(name: &str) -> Option<&'static StoreKind> {
    built_in().into_iter().find(|k| k.name == name)
}

pub fn names() -> Vec<&'static str> {
    built_in().iter().map(|k| k.name).collect()
}

/// Stores this build leaves out, with the cargo feature that adds each.
pub fn not_built() -> Vec<(&'static str, &'static str)> {
    entries()
        .into_iter()
        .filter(|e| e.kind.is_none())
        .filter_map(|e| Some((e.name, e.feature?)))
        .collect()
}

/// The feature that adds `name`, when this build leaves it out.
pub fn feature_of(name: &str) -> Option<&'static str> {
    not_built()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f)
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_match_adapters() {
        for e in super::entries() {
            if let Some(k) = e.kind {
                assert_eq!(k.name, e.name);
            }
        }
        assert!(super::find_built_in("null").is_some());
        assert!(super::feature_of("null").is_none());
    }
}
