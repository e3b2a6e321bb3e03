//! YCSB's record (a field map) in one reusable flat buffer, the embedded-store encoding, and
//! which fields a read asks for. A leaf: the workload builds records and the stores encode
//! them, so both import it and neither imports the other (store re-exports it).
//!
//! A worker owns one `Record` for values it writes and one for values it reads, and reuses
//! them for every operation: pushing fields appends to a byte buffer whose capacity survives
//! `clear()`, so the steady state allocates nothing.
//!
//! Encoding (embedded stores keep a record as one value under the key, as YCSB's RocksDB
//! binding does): repeated `[u16 LE name length][name][u32 LE value length][value]`.
//!
//! Reads return a `RecordView`: field spans over bytes the session owns (RocksDB: the pinned
//! block-cache slice itself), valid until the session's next call. Nothing is copied, so a
//! read measures the store, not a memcpy of the value (db_bench does not copy either).

/// Which fields a read or scan asks for: YCSB's `null` (all) or a set of one name.
#[derive(Clone, Copy, Debug)]
pub enum Fields<'a> {
    All,
    One(&'a [u8]),
}

impl Fields<'_> {
    #[inline]
    pub fn wants(&self, name: &[u8]) -> bool {
        match self {
            Fields::All => true,
            Fields::One(n) => *n == name,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    name_start: u32,
    name_len: u32,
    value_start: u32,
    value_len: u32,
}

impl Span {
    /// A field at these byte positions of the bytes a `RecordView` is made over.
    #[inline]
    pub fn new(name: std::ops::Range<usize>, value: std::ops::Range<usize>) -> Span {
        Span {
            name_start: name.start as u32,
            name_len: (name.end - name.start) as u32,
            value_start: value.start as u32,
            value_len: (value.end - value.start) as u32,
        }
    }

    /// Bytes of the name and the value.
    pub fn data_len(&self) -> u64 {
        (self.name_len + self.value_len) as u64
    }

    pub fn value_range(&self) -> std::ops::Range<usize> {
        self.value_start as usize..(self.value_start + self.value_len) as usize
    }
}

#[derive(Default, Clone, Debug)]
pub struct Record {
    buf: Vec<u8>,
    spans: Vec<Span>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl Record {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Starts a field: writes the name and returns the buffer to append the value to; call
    /// `end_field` once the value is written.
    #[inline]
    pub fn begin_field(&mut self, name: &[u8]) -> &mut Vec<u8> {
        let name_start = self.buf.len() as u32;
        self.buf.extend_from_slice(name);
        self.spans.push(Span {
            name_start,
            name_len: name.len() as u32,
            value_start: self.buf.len() as u32,
            value_len: 0,
        });
        &mut self.buf
    }

    #[inline]
    pub fn end_field(&mut self) {
        let end = self.buf.len() as u32;
        if let Some(s) = self.spans.last_mut() {
            s.value_len = end - s.value_start;
        }
    }

    #[inline]
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        self.begin_field(name).extend_from_slice(value);
        self.end_field();
    }

    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans.iter().map(move |s| {
            (
                &self.buf[s.name_start as usize..(s.name_start + s.name_len) as usize],
                &self.buf[s.value_start as usize..(s.value_start + s.value_len) as usize],
            )
        })
    }

    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// This record as a read result.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            bytes: &self.buf,
            spans: &self.spans,
        }
    }

    /// Bytes of user data (names and values), for MB/s figures.
    pub fn data_bytes(&self) -> u64 {
        self.buf.len() as u64
    }

    pub fn encoded_len(&self) -> usize {
        self.spans.len() * 6 + self.buf.len()
    }

    /// Appends the encoding of this record to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        for (name, value) in self.iter() {
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
    }

    /// Replaces this record with the decoding of `bytes`, keeping only the fields `keep`
    /// accepts.
    pub fn decode_from(
        &mut self,
        bytes: &[u8],
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), DecodeError> {
        self.clear();
        let mut p = 0usize;
        let take = |p: &mut usize, n: usize| -> Result<std::ops::Range<usize>, DecodeError> {
            let r = *p..*p + n;
            if r.end > bytes.len() {
                return Err(DecodeError(format!(
                    "record truncated at byte {} of {}",
                    *p,
                    bytes.len()
                )));
            }
            *p = r.end;
            Ok(r)
        };
        while p < bytes.len() {
            let nl = take(&mut p, 2)?;
            let nlen = u16::from_le_bytes([bytes[nl.start], bytes[nl.start + 1]]) as usize;
            let name = take(&mut p, nlen)?;
            let vl = take(&mut p, 4)?;
            let vlen = u32::from_le_bytes(bytes[vl.clone()].try_into().unwrap()) as usize;
            let value = take(&mut p, vlen)?;
            if keep(&bytes[name.clone()]) {
                self.push(&bytes[name], &bytes[value]);
            }
        }
        Ok(())
    }

    /// Copies a view into this record.
    pub fn copy_from(&mut self, v: RecordView<'_>) {
        self.clear();
        for (n, val) in v.iter() {
            self.push(n, val);
        }
    }

    /// `self` becomes `base` with the fields of `update` replacing or adding to it: YCSB's
    /// update semantics for stores that keep a record as one value.
    pub fn merge_from(&mut self, base: &Record, update: &Record) {
        self.clear();
        for (n, v) in update.iter() {
            self.push(n, v);
        }
        for (n, v) in base.iter() {
            if update.get(n).is_none() {
                self.push(n, v);
            }
        }
    }
}

/// YCSB's update for stores that keep a record as one value: decode the stored record, put
/// the updated fields over it, encode the result. Holds its two records so the steady state
/// allocates nothing.
#[derive(Default)]
pub struct Merge {
    current: Record,
    merged: Record,
}

impl Merge {
    /// Writes into `out` (replacing it) the encoding of `stored` with `update` applied.
    pub fn apply(
        &mut self,
        stored: &[u8],
        update: &Record,
        out: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        self.current.decode_from(stored, |_| true)?;
        self.merged.merge_from(&self.current, update);
        out.clear();
        self.merged.encode_into(out);
        Ok(())
    }
}

/// Indexes an encoded record in place: `spans` receives the fields `keep` accepts, as
/// positions in `bytes`. Nothing is copied.
pub fn index_encoded(
    bytes: &[u8],
    mut keep: impl FnMut(&[u8]) -> bool,
    spans: &mut Vec<Span>,
) -> Result<(), DecodeError> {
    spans.clear();
    let mut p = 0usize;
    let err = |p: usize| DecodeError(format!("record truncated at byte {p} of {}", bytes.len()));
    while p < bytes.len() {
        if p + 2 > bytes.len() {
            return Err(err(p));
        }
        let nlen = u16::from_le_bytes([bytes[p], bytes[p + 1]]) as usize;
        let name_start = p + 2;
        let vl = name_start + nlen;
        if vl + 4 > bytes.len() {
            return Err(err(p));
        }
        let vlen = u32::from_le_bytes(bytes[vl..vl + 4].try_into().unwrap()) as usize;
        let value_start = vl + 4;
        if value_start + vlen > bytes.len() {
            return Err(err(p));
        }
        if keep(&bytes[name_start..vl]) {
            spans.push(Span {
                name_start: name_start as u32,
                name_len: nlen as u32,
                value_start: value_start as u32,
                value_len: vlen as u32,
            });
        }
        p = value_start + vlen;
    }
    Ok(())
}

/// A read result: fields over bytes the session owns, valid until its next call.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    spans: &'a [Span],
}

impl<'a> RecordView<'a> {
    pub const EMPTY: RecordView<'static> = RecordView {
        bytes: &[],
        spans: &[],
    };

    /// A view of `bytes` through spans made by `index_encoded` over the same bytes.
    pub fn new(bytes: &'a [u8], spans: &'a [Span]) -> Self {
        RecordView { bytes, spans }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let bytes = self.bytes;
        self.spans.iter().map(move |s| {
            (
                &bytes[s.name_start as usize..(s.name_start + s.name_len) as usize],
                &bytes[s.value_start as usize..(s.value_start + s.value_len) as usize],
            )
        })
    }

    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Bytes of user data returned (names and values).
    pub fn data_bytes(&self) -> u64 {
        self.spans
            .iter()
            .map(|s| (s.name_len + s.value_len) as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_filter() {
        let mut r = Record::new();
        r.push(b"field0", b"abc");
        r.push(b"field1", b"");
        r.push(b"field2", &[0xff; 300]);
        let mut enc = Vec::new();
        r.encode_into(&mut enc);
        assert_eq!(enc.len(), r.encoded_len());
        // Independent layout check of the first field.
        assert_eq!(&enc[..2], &6u16.to_le_bytes());
        assert_eq!(&enc[2..8], b"field0");
        assert_eq!(&enc[8..12], &3u32.to_le_bytes());
        assert_eq!(&enc[12..15], b"abc");
        let mut d = Record::new();
        d.decode_from(&enc, |_| true).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d.get(b"field2").unwrap(), &[0xff; 300][..]);
        d.decode_from(&enc, |n| n == b"field1").unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d.get(b"field1").unwrap(), b"");
        assert!(d.decode_from(&enc[..enc.len() - 1], |_| true).is_err());

        // The same through a zero-copy view.
        let mut spans = Vec::new();
        index_encoded(&enc, |_| true, &mut spans).unwrap();
        let v = RecordView::new(&enc, &spans);
        assert_eq!(v.len(), 3);
        assert_eq!(v.get(b"field0"), Some(&b"abc"[..]));
        assert_eq!(v.data_bytes(), r.data_bytes());
        index_encoded(&enc, |n| n == b"field2", &mut spans).unwrap();
        let v = RecordView::new(&enc, &spans);
        assert_eq!(v.len(), 1);
        assert_eq!(v.get(b"field2").map(|x| x.len()), Some(300));
        for cut in [1, 5, 13, enc.len() - 1] {
            assert!(
                index_encoded(&enc[..cut], |_| true, &mut spans).is_err(),
                "{cut}"
            );
        }
        let mut back = Record::new();
        back.copy_from(r.view());
        assert_eq!(back.get(b"field2"), r.get(b"field2"));
    }

    #[test]
    fn merge_replaces_and_keeps() {
        let mut base = Record::new();
        base.push(b"a", b"1");
        base.push(b"b", b"2");
        let mut up = Record::new();
        up.push(b"b", b"20");
        up.push(b"c", b"30");
        let mut m = Record::new();
        m.merge_from(&base, &up);
        assert_eq!(m.get(b"a"), Some(&b"1"[..]));
        assert_eq!(m.get(b"b"), Some(&b"20"[..]));
        assert_eq!(m.get(b"c"), Some(&b"30"[..]));
        assert_eq!(m.len(), 3);
    }
}
