//! Distributed runs against a real etcd: coordinator and agents, their footprint in etcd,
//! scale, and what an attacker without the plan key can do.
//! One test binary (`--test dist`), one module per concern (issue 42: a binary links the
//! crate with its C stores, so fewer binaries build faster).

#[path = "../common/mod.rs"]
mod common;

mod footprint;
mod input;
mod profile;
mod runs;
mod scale;
mod security;
