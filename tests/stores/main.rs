//! Stores: the conformance suite against every adapter, whole runs on every store and
//! server, plug-ins, durability, and etcd with TLS and authentication.
//! One test binary (`--test stores`), one module per concern (issue 42: a binary links the
//! crate with its C stores, so fewer binaries build faster).

#[path = "../common/mod.rs"]
mod common;
#[path = "../plugin_build/mod.rs"]
mod plugin_build;

mod conformance;
mod durability;
mod embedded_stats;
mod plugins;
mod profile;
mod reply_wait;
mod runs;
mod secure_etcd;
mod server_stats;
mod storage_io;
mod store_stats;
