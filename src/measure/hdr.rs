//! Bounded decoding of HdrHistogram bytes that come from outside: run directories
//! (`latency/*.hlog`), `dist/intervals.jsonl` and intervals posted to etcd by agents.
//!
//! hdrhistogram's `Deserializer` trusts the V2 header: it zero-fills a buffer of the header's
//! `payload_len` (up to 4 GiB) before it finds the data missing, so a 56-character base64
//! histogram costs 4 GiB. This module reads the header first and refuses a payload the input
//! cannot hold; for the compressed form it inflates at most [`MAX_INFLATED`] bytes and checks
//! the inner header the same way. Only then does the deserializer see the bytes, so its
//! allocation is bounded by the input (or by `MAX_INFLATED`) — plus the histogram's own counts
//! array, which hdrhistogram bounds itself (at most 5 significant digits over 64 bits).

use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use std::io::Read;

/// V2 (uncompressed) and V2 compressed cookies, as hdrhistogram writes them.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Cookie, payload length, normalizing offset, digits, low, high, int-to-double ratio.
const V2_HEADER: usize = 40;

/// The most bytes a compressed histogram may inflate to. kvmeter's own histograms (1 ns to
/// one hour, 3 digits) have about 23,000 counts, at most 9 bytes each; 16 MiB is 80 times
/// that, and small enough to decode anywhere.
pub const MAX_INFLATED: usize = 16 << 20;

/// Decodes one histogram (V2 or V2 compressed), refusing headers that promise more than the
/// bytes hold. The error says what was wrong, without echoing the input.
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, String> {
    match cookie(bytes, 0)? {
        V2_COOKIE => {
            check_v2(bytes)?;
            deserialize(bytes)
        }
        V2_COMPRESSED_COOKIE => {
            let len = cookie(bytes, 4)? as usize;
            let body = bytes.get(8..).unwrap_or_default();
            if len > body.len() {
                return Err(format!(
                    "compressed length {len} is more than the {} bytes given",
                    body.len()
                ));
            }
            let mut inflated = Vec::new();
            flate2::read::ZlibDecoder::new(&body[..len])
                .take(MAX_INFLATED as u64 + 1)
                .read_to_end(&mut inflated)
                .map_err(|e| format!("compressed payload does not inflate: {e}"))?;
            if inflated.len() > MAX_INFLATED {
                return Err(format!("inflates to more than {MAX_INFLATED} bytes"));
            }
            if cookie(&inflated, 0)? != V2_COOKIE {
                return Err("compressed payload is not a V2 histogram".into());
            }
            check_v2(&inflated)?;
            deserialize(&inflated)
        }
        c => Err(format!("unknown cookie {c:#010x}")),
    }
}

/// Base64 text (the log and wire form) to a histogram.
pub fn decode_base64(text: &str) -> Result<Histogram<u64>, String> {
    use base64::Engine as _;
    // Base64 is 4/3 the size of the bytes, so the buffer is bounded by the text.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    decode(&bytes)
}

/// The big-endian u32 at `at`.
fn cookie(bytes: &[u8], at: usize) -> Result<u32, String> {
    bytes
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("{} bytes: too short for a histogram header", bytes.len()))
}

/// An uncompressed V2 histogram: the payload the header declares must be in the bytes.
fn check_v2(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < V2_HEADER {
        return Err(format!(
            "{} bytes: too short for a histogram header",
            bytes.len()
        ));
    }
    let payload = cookie(bytes, 4)? as usize;
    let room = bytes.len() - V2_HEADER;
    if payload > room {
        return Err(format!(
            "header declares {payload} payload bytes but {room} follow"
        ));
    }
    Ok(())
}

fn deserialize(bytes: &[u8]) -> Result<Histogram<u64>, String> {
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("does not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};

    /// The review's F4(a) bomb: V2, payload_len 0xFFFFFFFF, nothing after the header.
    const BOMB: &str = "HISTE/////8AAAAAAAAAAwAAAAAAAAABAAAAAAAAAAI/8AAAAAAAAA==";

    #[test]
    fn the_56_character_bomb_is_refused_without_allocating() {
        let t = std::time::Instant::now();
        let e = decode_base64(BOMB).unwrap_err();
        assert!(e.contains("4294967295 payload bytes but 0 follow"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_millis(100));
    }

    #[test]
    fn a_compressed_header_that_lies_is_refused() {
        let mut h = crate::measure::new_histogram();
        h.record(1000).unwrap();
        let mut buf = Vec::new();
        V2DeflateSerializer::new().serialize(&h, &mut buf).unwrap();
        assert_eq!(decode(&buf).unwrap(), h);
        // Compressed length beyond the input.
        let mut lying = buf.clone();
        lying[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode(&lying).unwrap_err().contains("compressed length"));
        // A valid deflate stream whose inner V2 header promises 4 GiB.
        let mut inner = Vec::new();
        V2Serializer::new().serialize(&h, &mut inner).unwrap();
        assert_eq!(decode(&inner).unwrap(), h);
        inner[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let z = zlib(&inner);
        let mut outer = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        outer.extend((z.len() as u32).to_be_bytes());
        outer.extend(z);
        assert!(decode(&outer).unwrap_err().contains("payload bytes but"));
        // A zlib bomb: 64 MiB of zeros behind a valid cookie.
        let mut big = V2_COOKIE.to_be_bytes().to_vec();
        big.resize(64 << 20, 0);
        let z = zlib(&big);
        let mut outer = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        outer.extend((z.len() as u32).to_be_bytes());
        outer.extend(z);
        assert!(decode(&outer)
            .unwrap_err()
            .contains("inflates to more than"));
    }

    #[test]
    fn short_and_unknown_inputs_are_errors() {
        for b in [&b""[..], b"HIS", b"\x1c\x84\x93\x13\0\0\0\0", b"abcdefgh"] {
            assert!(decode(b).is_err());
        }
    }

    fn zlib(b: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(b).unwrap();
        z.finish().unwrap()
    }
}
