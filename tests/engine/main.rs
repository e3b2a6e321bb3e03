//! The event-driven engine (`--connections`): its loop against real memcached, Redis and
//! etcd, its protocols and transports (UDP, TLS, Unix sockets).
//! One test binary (`--test engine`), one module per concern (issue 42: a binary links the
//! crate with its C stores, so fewer binaries build faster).

#[path = "../common/mod.rs"]
mod common;

mod basics;
mod etcd;
mod open_loop;
mod protocols;
mod transports;

use common::servers::{Launch, Proc};
use std::process::Command;

/// A memcached on loopback that takes `conns` connections.
fn memcached(conns: usize) -> (Proc, u16) {
    Launch::memcached()
        .args(&["-c", &conns.to_string()])
        .start()
}

/// kvmeter, for a test that spawns it and stops its server meanwhile.
fn kvmeter_cmd() -> Command {
    let mut c = Command::new(common::bin());
    c.env("NO_COLOR", "1");
    c
}
