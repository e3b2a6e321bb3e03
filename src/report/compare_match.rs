//! `kvmeter compare`'s like-with-like check: the manifest fields that must match for a fair
//! comparison (store and version, options, the server measured, workload, threads, machine,
//! clock), and each one that differs between the runs, named with its values.

use serde_json::Value;
use std::collections::BTreeMap;

/// The manifest fields that must match for a fair comparison.
fn identity(m: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut put = |k: &str, v: &Value| {
        out.insert(k.to_string(), v.to_string());
    };
    put("store", &m["store"]["name"]);
    put("store version", &m["store"]["version"]);
    if let Some(o) = m["store"]["options"].as_object() {
        for (k, v) in o {
            if k != "addr" {
                put(&format!("store option {k}"), v);
            }
        }
    }
    // A server kvmeter started listens on a port of the moment: its address says nothing.
    // Another's address is which server was measured: two runs against two servers of one
    // version are not like with like.
    let server = &m["store"]["server"];
    if server["managed"] == Value::Bool(false) {
        put("server address", &server["addr"]);
    }
    put("server version", &server["version"]);
    put("machine cpu", &m["machine"]["cpu_model"]);
    put("machine cpus", &m["machine"]["logical_cpus"]);
    put("machine kernel", &m["machine"]["kernel"]);
    put("clock", &m["measurement"]["clock"]);
    put("kvmeter", &m["kvmeter_version"]);
    for ph in m["plan"]["phases"].as_array().cloned().unwrap_or_default() {
        let name = ph["name"].as_str().unwrap_or("?").to_string();
        put(&format!("phase {name} threads"), &ph["threads"]);
        put(&format!("phase {name} operations"), &ph["operations"]);
        put(&format!("phase {name} duration"), &ph["duration"]);
        put(&format!("phase {name} target"), &ph["target"]);
        if let Some(w) = ph["workload"].as_object() {
            for (k, v) in w {
                put(&format!("phase {name} workload {k}"), v);
            }
        }
    }
    out
}

pub(super) fn mismatches(a: &[Value], b: &[Value]) -> Vec<String> {
    let ids_a: Vec<_> = a.iter().map(identity).collect();
    let ids_b: Vec<_> = b.iter().map(identity).collect();
    let mut keys: Vec<&String> = ids_a.iter().chain(&ids_b).flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = vec![];
    for k in keys {
        let vals = |ids: &[BTreeMap<String, String>]| -> Vec<String> {
            let mut v: Vec<String> = ids
                .iter()
                .map(|m| m.get(k).cloned().unwrap_or_else(|| "(absent)".into()))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let (va, vb) = (vals(&ids_a), vals(&ids_b));
        if va != vb || va.len() > 1 {
            out.push(format!("{k}: A {} — B {}", va.join(" | "), vb.join(" | ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::mismatches;
    use serde_json::json;

    fn manifest(managed: bool, addr: &str) -> serde_json::Value {
        json!({
            "store": {"name": "memcached", "version": "1.6.18",
                "options": {"addr": addr, "threads": "4"},
                "server": {"managed": managed, "addr": addr, "version": "1.6.18"}},
            "machine": {"cpu_model": "x", "logical_cpus": 2, "kernel": "6.1"},
            "measurement": {"clock": "tsc"},
            "kvmeter_version": "0.1.0",
            "plan": {"phases": [{"name": "run", "threads": 1, "workload": {"readproportion": 1}}]}
        })
    }

    #[test]
    fn two_servers_of_one_version_are_a_difference() {
        let (a, b) = (
            manifest(false, "10.0.0.1:11211"),
            manifest(false, "10.0.0.2:11211"),
        );
        assert_eq!(
            mismatches(std::slice::from_ref(&a), &[b]),
            ["server address: A \"10.0.0.1:11211\" — B \"10.0.0.2:11211\""]
        );
        let same = a.clone();
        assert!(mismatches(&[a], &[same]).is_empty());
    }

    #[test]
    fn a_started_servers_port_of_the_moment_is_not() {
        let (a, b) = (
            manifest(true, "127.0.0.1:40001"),
            manifest(true, "127.0.0.1:40777"),
        );
        assert!(mismatches(&[a], &[b]).is_empty());
    }
}
