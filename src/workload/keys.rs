//! Key names, field values and the hashes behind them (ycsb-workload-spec §3, §4).
//!
//! Everything here writes into caller-owned buffers so that the per-operation path allocates
//! nothing: a worker keeps one key buffer and one record and reuses them for every operation.

use super::rng::Rng;

const FNV_OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 1_099_511_628_211;

/// `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of `v`, then a wrapping absolute
/// value (so `i64::MIN` can come out; spec §3.2).
#[inline]
pub fn fnvhash64(v: i64) -> i64 {
    let mut h = FNV_OFFSET_BASIS;
    for octet in v.to_le_bytes() {
        h ^= octet as u64;
        h = h.wrapping_mul(FNV_PRIME);
    }
    (h as i64).wrapping_abs()
}

/// `buildKeyName`: "user", zero padding to `zeropadding` digits, then the (hashed unless
/// `ordered`) key number in decimal.
#[inline]
pub fn build_key_name(keynum: i64, zeropadding: usize, ordered: bool, out: &mut Vec<u8>) {
    let n = if ordered { keynum } else { fnvhash64(keynum) };
    let mut fmt = itoa::Buffer::new();
    let digits = fmt.format(n).as_bytes();
    // One fill for the padding, not a push per '0': 1-2 % of the null store's time per
    // operation with YCSB keys padded to db_bench's 23 bytes (zeropadding=19; BENCHMARKS.md).
    let pad = zeropadding.saturating_sub(digits.len());
    out.clear();
    out.extend_from_slice(b"user");
    out.resize(4 + pad, b'0');
    out.extend_from_slice(digits);
}

/// Java `String.hashCode` over ASCII bytes, continuing from `h`.
#[inline]
pub fn java_string_hash_from(mut h: i32, bytes: &[u8]) -> i32 {
    for &c in bytes {
        h = h.wrapping_mul(31).wrapping_add(c as i32);
    }
    h
}

pub fn java_string_hash(bytes: &[u8]) -> i32 {
    java_string_hash_from(0, bytes)
}

/// The data-integrity value of (key, field), `size` bytes long (spec §4.3), appended to `out`.
pub fn deterministic_value(key: &[u8], field: &[u8], size: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(key);
    out.push(b':');
    out.extend_from_slice(field);
    // The hash of the whole string so far is maintained incrementally: appending bytes to a
    // Java string extends its hash by the same recurrence.
    let mut h = java_string_hash(&out[start..]);
    let mut fmt = itoa::Buffer::new();
    while out.len() - start < size {
        out.push(b':');
        h = java_string_hash_from(h, b":");
        let digits = fmt.format(h).as_bytes();
        out.extend_from_slice(digits);
        h = java_string_hash_from(h, digits);
    }
    out.truncate(start + size);
}

/// The six bytes one random int yields in `RandomByteIterator` (spec §4.2 byte formula).
#[inline]
pub fn six_bytes(r: i32) -> [u8; 6] {
    [
        0x20 + (r & 0x1F) as u8,
        0x20 + ((r >> 5) & 0x3F) as u8,
        0x20 + ((r >> 10) & 0x5F) as u8,
        0x20 + ((r >> 15) & 0x1F) as u8,
        0x20 + ((r >> 20) & 0x3F) as u8,
        0x20 + ((r >> 25) & 0x5F) as u8,
    ]
}

/// Appends a random value of `len` bytes, bulk path (spec §4.2): one int drawn and discarded
/// (the iterator's construction), then one int per 6 bytes, the last chunk cut short.
///
/// YCSB generates these bytes lazily inside the timed store call; kvmeter generates them
/// before the timer starts (quirk 13), so latencies contain store time only.
#[inline]
pub fn random_value(rng: &mut Rng, len: usize, out: &mut Vec<u8>) {
    let _ = rng.next_i32();
    out.reserve(len);
    // Whole chunks are fixed-size copies (inlined); only the last one is cut short.
    for _ in 0..len / 6 {
        out.extend_from_slice(&six_bytes(rng.next_i32()));
    }
    let rest = len % 6;
    if rest > 0 {
        out.extend_from_slice(&six_bytes(rng.next_i32())[..rest]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_vectors_12_1() {
        let cases: &[(i64, i64)] = &[
            (0, 6284781860667377211),
            (1, 8517097267634966620),
            (2, 1820151046732198393),
            (3, 4052466453699787802),
            (4, 3232700585171816769),
            (5, 1000385178204227360),
            (10, 2408371864701034737),
            (100, 879817313296471393),
            (999, 2071219101098386137),
            (1000, 5952875239596136740),
            (12345, 1792800413050876852),
            (1000000, 1011632231655643464),
            (2147483647, 627943977067101855),
            (4294967296, 634246865027890484),
            (-1, 8289690350564177859),
            (i64::MAX, 8289549613075766851),
            (i64::MIN, 6284922598155788219),
        ];
        for &(input, want) in cases {
            assert_eq!(fnvhash64(input), want, "fnvhash64({input})");
        }
        assert_eq!(fnvhash64(5), 0xde21504f16dc720);
    }

    #[test]
    fn key_name_vectors_12_2() {
        let cases: &[(i64, usize, bool, &str)] = &[
            (0, 1, false, "user6284781860667377211"),
            (1, 1, false, "user8517097267634966620"),
            (2, 1, false, "user1820151046732198393"),
            (999, 1, false, "user2071219101098386137"),
            (5, 1, true, "user5"),
            (5, 8, true, "user00000005"),
            (12345, 3, true, "user12345"),
            (0, 22, false, "user0006284781860667377211"),
            (1, 22, false, "user0008517097267634966620"),
            (0, 1, true, "user0"),
            (9, 1, true, "user9"),
            (10, 1, true, "user10"),
            (100, 4, true, "user0100"),
            (i64::MAX, 1, true, "user9223372036854775807"),
            (-42, 5, true, "user00-42"),
        ];
        let mut buf = Vec::new();
        for &(k, pad, ordered, want) in cases {
            build_key_name(k, pad, ordered, &mut buf);
            assert_eq!(std::str::from_utf8(&buf).unwrap(), want);
        }
    }

    #[test]
    fn deterministic_value_vectors_12_3() {
        let mut v = Vec::new();
        deterministic_value(b"user6284781860667377211", b"field0", 100, &mut v);
        assert_eq!(
            std::str::from_utf8(&v).unwrap(),
            "user6284781860667377211:field0:-56807877:2032869390:-165488160:1762371712:-169193395:-1039977118:-10"
        );
        v.clear();
        deterministic_value(b"user1", b"field9", 100, &mut v);
        assert_eq!(
            std::str::from_utf8(&v).unwrap(),
            "user1:field9:-1268390937:701431326:1606534939:-534149429:-1854609471:-1563934887:1739619784:-7954596"
        );
        v.clear();
        deterministic_value(b"user6284781860667377211", b"field0", 10, &mut v);
        assert_eq!(&v, b"user628478");
        assert_eq!(
            java_string_hash(b"user6284781860667377211:field0:"),
            -56807877
        );
    }

    #[test]
    fn random_byte_vectors_12_4() {
        assert_eq!(six_bytes(0), [0x20; 6]);
        assert_eq!(six_bytes(-1), [0x3f, 0x5f, 0x7f, 0x3f, 0x5f, 0x7f]);
        assert_eq!(six_bytes(0x12345678), *b"8S5(C)");
        assert_eq!(six_bytes(123456789), [0x35, 0x48, 0x73, 0x37, 0x55, 0x23]);
        assert_eq!(six_bytes(i32::MIN), [0x20, 0x20, 0x20, 0x20, 0x20, 0x60]);
        assert_eq!(six_bytes(i32::MAX), [0x3f, 0x5f, 0x7f, 0x3f, 0x5f, 0x3f]);
        // Bulk path, L = 10: r1 gives 6 bytes, r2 the first 4.
        let mut v = Vec::new();
        v.extend_from_slice(&six_bytes(121092338));
        v.extend_from_slice(&six_bytes(263540930)[..4]);
        assert_eq!(
            v,
            [0x32, 0x27, 0x6e, 0x2f, 0x53, 0x23, 0x22, 0x26, 0x74, 0x2a]
        );
    }

    #[test]
    fn random_value_has_requested_length_and_ascii() {
        let mut rng = Rng::for_worker(7, 0);
        for len in [0usize, 1, 5, 6, 7, 100, 1000] {
            let mut v = Vec::new();
            random_value(&mut rng, len, &mut v);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&b| (0x20..0x80).contains(&b)));
        }
    }
}
