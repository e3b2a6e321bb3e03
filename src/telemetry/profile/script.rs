//! Reads `perf script -F comm,pid,tid,time,ip,sym,dso` text, one sample at a time, under
//! bounds: a line longer than `MAX_LINE` is cut, a sample deeper than `MAX_FRAMES` keeps its
//! innermost frames, and a frame's name is cut at `MAX_NAME` bytes.
//!
//! Written by hand rather than with inferno's `collapse::perf::Folder`: the folder folds each
//! sample's time and thread away, and kvmeter needs both (the phase's measured window, the
//! thread group a sample is charged to). The format is perf's own, fixed by `-F`:
//!
//! ```text
//! kvm-worker-0 17172/17215 78959.710210:
//! \tffffffff8165dc30 get_vma_policy ([kernel.kallsyms])
//! \t          4d1c64 <kvmeter::store::rocksdb::RocksSession as ...>::read (/path/kvmeter)
//! (blank line)
//! ```

use std::io::{BufRead, Read};

pub(super) const MAX_LINE: usize = 64 * 1024;
pub(super) const MAX_FRAMES: usize = 256;
pub(super) const MAX_NAME: usize = 512;

/// One frame of a call stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Frame {
    /// The symbol, or `[unknown]` when perf found none.
    pub(super) sym: String,
    /// The object the address lies in: a path, `[kernel.kallsyms]`, `[vdso]` or `[unknown]`.
    pub(super) dso: String,
}

impl Frame {
    pub(super) fn kernel(&self) -> bool {
        self.dso.starts_with("[kernel") || self.dso.starts_with("[guest.kernel")
    }
}

/// One sample: its thread, its time on CLOCK_MONOTONIC (perf's `-k monotonic`) and its frames,
/// innermost first.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Sample {
    pub(super) comm: String,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) time_ns: u64,
    pub(super) frames: Vec<Frame>,
}

/// Parses a sample's first line: `<comm> <pid>/<tid> <secs>.<frac>:` (the name may hold
/// spaces, so the fields are taken from the right).
pub(super) fn parse_head(line: &str) -> Option<(String, u32, u32, u64)> {
    let line = line.trim_end();
    let line = line.strip_suffix(':')?;
    let (rest, time) = line.rsplit_once(' ')?;
    let (comm, ids) = rest.trim_end().rsplit_once(' ')?;
    let (pid, tid) = ids.split_once('/')?;
    let (secs, frac) = time.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: u64 = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    Some((
        comm.trim().to_string(),
        pid.parse().ok()?,
        tid.parse().ok()?,
        secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)?,
    ))
}

/// Parses a frame line: `<hex address> <symbol> (<dso>)`.
pub(super) fn parse_frame(line: &str) -> Option<Frame> {
    let line = line.trim();
    let (addr, rest) = line.split_once(' ')?;
    if !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let rest = rest.trim_start();
    let (sym, dso) = match rest.strip_suffix(')').and_then(|r| r.rsplit_once(" (")) {
        Some((sym, dso)) => (sym.trim(), dso),
        None => (rest, "[unknown]"),
    };
    Some(Frame {
        sym: cut(sym),
        dso: cut(dso),
    })
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_NAME {
        return s.to_string();
    }
    let mut end = MAX_NAME;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Reads samples from perf script's output until it ends, handing each to `each`. Lines that
/// are neither a head nor a frame (perf's warnings) are skipped and counted.
pub(super) fn read_samples(mut input: impl BufRead, mut each: impl FnMut(Sample)) -> u64 {
    let mut skipped = 0;
    let mut cur: Option<Sample> = None;
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let n: usize = input
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
            .unwrap_or_default();
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') && n == MAX_LINE {
            // A cut line: drop the rest of it (read through the buffer, never held whole).
            let _ = input.skip_until(b'\n');
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            if let Some(s) = cur.take() {
                each(s);
            }
        } else if line.starts_with(['\t', ' ']) {
            match (cur.as_mut(), parse_frame(line)) {
                (Some(s), Some(f)) if s.frames.len() < MAX_FRAMES => s.frames.push(f),
                (Some(_), Some(_)) => {}
                _ => skipped += 1,
            }
        } else {
            if let Some(s) = cur.take() {
                each(s);
            }
            match parse_head(line) {
                Some((comm, pid, tid, time_ns)) => {
                    cur = Some(Sample {
                        comm,
                        pid,
                        tid,
                        time_ns,
                        frames: Vec::new(),
                    })
                }
                None => skipped += 1,
            }
        }
    }
    if let Some(s) = cur.take() {
        each(s);
    }
    skipped
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "kvm-worker-0 17172/17215 78959.710210: \n\
\tffffffff8165dc30 get_vma_policy ([kernel.kallsyms])\n\
\t          4d1c64 <kvmeter::store::rocksdb::RocksSession as kvmeter::store::Session>::read (/work/kvmeter)\n\
\t           f838f __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\
\tffffffffffffffff [unknown] ([unknown])\n\
\n\
rocksdb:low 17172/17220 78959.72: \n\
\t          fbf1c7 rocksdb::InlineSkipList<rocksdb::MemTableRep::KeyComparator const&>::FindGreaterOrEqual (/work/kvmeter)\n\
\n\
a name with spaces 9/10 1.000000001: \n\
\t 12 [unknown] (/usr/bin/memcached)\n";

    #[test]
    fn samples_frames_and_times_as_perf_prints_them() {
        let mut got = vec![];
        let skipped = read_samples(TEXT.as_bytes(), |s| got.push(s));
        assert_eq!(skipped, 0);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].comm, "kvm-worker-0");
        assert_eq!((got[0].pid, got[0].tid), (17172, 17215));
        assert_eq!(got[0].time_ns, 78_959_710_210_000);
        assert_eq!(got[0].frames.len(), 4);
        assert!(got[0].frames[0].kernel());
        assert_eq!(got[0].frames[0].sym, "get_vma_policy");
        assert_eq!(
            got[0].frames[1].sym,
            "<kvmeter::store::rocksdb::RocksSession as kvmeter::store::Session>::read"
        );
        assert_eq!(got[0].frames[1].dso, "/work/kvmeter");
        assert_eq!(got[1].comm, "rocksdb:low");
        assert_eq!(got[1].time_ns, 78_959_720_000_000);
        assert!(got[1].frames[0].sym.contains("KeyComparator const&"));
        assert_eq!(got[2].comm, "a name with spaces");
        assert_eq!(got[2].time_ns, 1_000_000_001);
        assert_eq!(got[2].frames[0].dso, "/usr/bin/memcached");
        assert_eq!(got[2].frames[0].sym, "[unknown]");
    }

    #[test]
    fn bounds_hold_on_hostile_text() {
        let mut text = String::from("x 1/2 3.5:\n");
        for _ in 0..(MAX_FRAMES + 50) {
            text.push_str(&format!("\tab {} (/lib)\n", "f".repeat(MAX_NAME * 2)));
        }
        text.push_str(&"y".repeat(MAX_LINE * 2));
        text.push_str("\nnot a head\n");
        let mut got = vec![];
        let skipped = read_samples(text.as_bytes(), |s| got.push(s));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].frames.len(), MAX_FRAMES);
        assert_eq!(got[0].frames[0].sym.len(), MAX_NAME);
        assert_eq!(skipped, 2);
        assert_eq!(parse_head("x 1/2 3.1234567890:"), None);
        assert_eq!(parse_head("x 1/2 99999999999999999999.1:"), None);
    }
}
