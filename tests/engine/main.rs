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
