//! `kvmeter stores [plugin:PATH ...]`: every store, whether it works here, its options.

use crate::error::EXIT_OK;

/// `kvmeter stores [plugin:PATH ...]`: every built-in store, or the named plug-ins only.
pub(super) fn stores(plugins: &[String]) -> anyhow::Result<i32> {
    if plugins.is_empty() {
        out!("{}", stores_report());
        return Ok(EXIT_OK);
    }
    let mut kinds = Vec::new();
    for p in plugins {
        if !crate::store::plugin::is_plugin(p) {
            return Err(crate::error::UsageError::new(format!(
                "kvmeter stores '{p}': expected plugin:PATH to a store plug-in (without arguments every built-in store is listed)"
            ))
            .into());
        }
        kinds.push(crate::store::plugin::kind(p)?);
    }
    let mut out = String::new();
    for k in kinds {
        describe_store(&mut out, k);
    }
    out!("{out}");
    Ok(EXIT_OK)
}

pub fn stores_report() -> String {
    let mut out = String::new();
    for k in crate::store::built_in() {
        describe_store(&mut out, k);
    }
    for (name, feature) in crate::store::not_built() {
        out += &format!(
            "{name:<10} {:<12} NOT in this build: rebuild with --features {feature} (scripts/run-suite.sh builds every store)\n\n",
            "-"
        );
    }
    out += "Store plug-ins: --store plugin:/path/libfoo.so (docs/plugins.md); 'kvmeter stores plugin:PATH' lists one.\n";
    out
}

fn describe_store(out: &mut String, k: &crate::store::StoreKind) {
    let usable = match (k.probe)() {
        Ok(()) => "usable here".to_string(),
        Err(why) => format!("NOT usable here: {why}"),
    };
    *out += &format!(
        "{:<10} {:<12} {}  [{}]\n           scan: {}, persistent: {}{}\n",
        k.name,
        crate::store::version_of(k),
        k.summary,
        usable,
        if k.capabilities.scan {
            "yes"
        } else {
            "no (reported N/A)"
        },
        if k.capabilities.persistent {
            "yes"
        } else {
            "no"
        },
        match k.server {
            Some(s) => format!(
                ", server: '{}' started on loopback unless --store-opt addr= is given",
                s.binary
            ),
            None => String::new(),
        },
    );
    for o in k.options {
        *out += &format!(
            "           --store-opt {}={:<8} {}\n",
            o.name, o.default, o.help
        );
    }
    if k.stats.is_empty() && crate::store::plugin::is_plugin(k.name) {
        *out += "           statistics: none (the plug-in exports no kvmeter_store_stats: include/kvmeter_store.h)\n";
    } else {
        *out += &statistics_line(k.stats);
    }
    out.push('\n');
}

/// The statistics a store reports about itself (store_stats.csv's columns), wrapped; what
/// each means is in docs/run-directory.md.
fn statistics_line(stats: &[crate::store::stats::StatSpec]) -> String {
    if stats.is_empty() {
        return "           statistics: none reported yet (store_stats.csv is not written)\n"
            .into();
    }
    let mut out = String::from("           statistics (store_stats.csv):");
    let mut width = out.len();
    for (i, s) in stats.iter().enumerate() {
        let word = format!(" {}{}", s.name, if i + 1 < stats.len() { "," } else { "" });
        if width + word.len() > 100 {
            out += "\n             ";
            width = 13;
        }
        width += word.len();
        out += &word;
    }
    out + "\n"
}
