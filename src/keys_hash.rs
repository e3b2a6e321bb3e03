//! Re-export of Java's string hash for the report writers.
pub use crate::workload::keys::java_string_hash;
