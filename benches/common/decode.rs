//! DECODE=1 for the direct loops: each value read is indexed as kvmeter's adapters index it
//! inside their read call (`store::record::index_encoded`, every field wanted) and its user bytes
//! counted. YCSB's bindings do the same inside the timed call (the RocksDB binding deserializes
//! the value into a map before it returns), so a floor for a YCSB-exact harness includes it; the
//! bare loops only take the value's length and never touch its memory.

use kvmeter::store::record::{index_encoded, Span};
use kvmeter::store::RecordView;

/// The record's user bytes (names and values), or `None` when DECODE is off.
pub struct Decode {
    spans: Vec<Span>,
}

impl Decode {
    pub fn from_env() -> Option<Decode> {
        crate::knobs::flag("DECODE").then(|| Decode { spans: Vec::new() })
    }

    #[inline(always)]
    pub fn data_bytes(d: &mut Option<Decode>, bytes: &[u8]) -> usize {
        match d {
            Some(d) => {
                index_encoded(bytes, |_| true, &mut d.spans).expect("kvmeter's encoding");
                RecordView::new(bytes, &d.spans).data_bytes() as usize
            }
            None => 0,
        }
    }
}
