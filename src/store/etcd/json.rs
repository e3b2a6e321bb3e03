//! The JSON of etcd's v3 gateway, read and written in place: keys and values are base64
//! strings inside a JSON object. A reply is searched for the few fields kvmeter needs (a
//! range's `"kvs"`, each `"key"` and `"value"`) instead of being parsed into a tree: a read's
//! reply is decoded on the measured path, and serde_json would allocate the tree each time.
//! Shared by the worker's client (`mod.rs`) and the engine's codec (`codec.rs`).

use crate::store::kv::RawError;
use crate::store::{net, ErrorKind};
use base64::Engine;

pub(super) const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The range of the JSON string value that follows `prefix` (e.g. `"value":"`).
pub(super) fn json_str(body: &[u8], prefix: &[u8]) -> Option<std::ops::Range<usize>> {
    let at = find(body, prefix)? + prefix.len();
    let end = at + net::memchr(b'"', &body[at..])?;
    Some(at..end)
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether a 200 body without `"kvs":[` is etcd's empty range response (a JSON object with
/// its `"header"`), as opposed to garbage or another server's page: only the former is a
/// miss; the rest is a protocol error (security review, minor findings).
pub(super) fn is_range_reply(body: &[u8]) -> bool {
    let t = body.trim_ascii();
    // The opening brace spelled \x7b: one in a literal misleads brace-counting tools.
    let header = b"\"header\":\x7b";
    t.first() == Some(&b'{') && t.last() == Some(&b'}') && find(t, header).is_some()
}

/// The error for a 200 range reply that is not a range response.
pub(super) fn not_a_range(body: &[u8]) -> RawError {
    RawError::new(
        ErrorKind::Protocol,
        false,
        format!(
            "etcd range: a 200 reply that is not a range response ({} bytes)",
            body.len()
        ),
    )
}

/// Appends `"name":"<base64 of b>"`.
pub(super) fn b64_field(json: &mut Vec<u8>, name: &[u8], b: &[u8]) {
    json.push(b'"');
    json.extend_from_slice(name);
    json.extend_from_slice(b"\":\"");
    let at = json.len();
    json.resize(at + b.len().div_ceil(3) * 4, 0);
    let n = B64
        .encode_slice(b, &mut json[at..])
        .expect("sized for base64");
    json.truncate(at + n);
    json.push(b'"');
}

/// Decodes base64 `src` into `out` (replacing it).
pub(super) fn b64_decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), RawError> {
    out.resize(src.len() / 4 * 3 + 3, 0);
    match B64.decode_slice(src, out) {
        Ok(n) => {
            out.truncate(n);
            Ok(())
        }
        Err(e) => Err(RawError::new(
            ErrorKind::Corruption,
            false,
            format!("etcd: undecodable base64 in reply: {e}"),
        )),
    }
}
