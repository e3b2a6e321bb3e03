//! `null`: does nothing and answers OK, like YCSB's `BasicDB` with verbose off. Its throughput
//! is the harness's own ceiling.

use super::*;

pub static KIND: StoreKind = StoreKind {
    name: "null",
    summary: "does nothing, answers OK: the harness's own ceiling",
    options: &[],
    capabilities: Capabilities {
        scan: true,
        persistent: false,
        stores_data: false,
    },
    version: || env!("CARGO_PKG_VERSION").to_string(),
    probe: || Ok(()),
    check: |_| Ok(()),
    open: |_dir, _opts| Ok(Box::new(NullStore)),
    server: None,
    engine: None,
    scans_refused: super::scans_always_served,
    stats: &[],
    profile_symbols: &[],
};

struct NullStore;
struct NullSession;

impl Store for NullStore {
    fn session(&self) -> anyhow::Result<Box<dyn Session>> {
        Ok(Box::new(NullSession))
    }
    fn close(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }
}

impl Session for NullSession {
    #[inline]
    fn read(&mut self, _: &str, _: &[u8], _: Fields) -> (Status, RecordView<'_>) {
        (Status::Ok, RecordView::EMPTY)
    }
    #[inline]
    fn scan(&mut self, _: &str, _: &[u8], _: usize, _: Fields, out: &mut ScanOut) -> Status {
        out.clear();
        Status::Ok
    }
    #[inline]
    fn update(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
        Status::Ok
    }
    #[inline]
    fn insert(&mut self, _: &str, _: &[u8], _: &Record) -> Status {
        Status::Ok
    }
    #[inline]
    fn delete(&mut self, _: &str, _: &[u8]) -> Status {
        Status::Ok
    }
}
