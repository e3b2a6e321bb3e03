//! Field lengths from a histogram file (§5.12).

use super::*;

/// `HistogramGenerator(file)` (§5.12), for `fieldlengthdistribution=histogram`.
#[derive(Debug, Clone)]
pub struct HistogramLengths {
    block_size: i64,
    counts: Vec<i64>,
    area: i64,
}

impl HistogramLengths {
    /// Parses `BlockSize<TAB>n` then `bucket<TAB>count` lines.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let first = lines.next().ok_or("the file is empty")?;
        let mut parts = first.split('\t');
        if parts.next() != Some("BlockSize") {
            return Err(format!(
                "first line must be 'BlockSize<TAB>n', found '{first}'"
            ));
        }
        let block_size: i64 = parts
            .next()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("bad block size in '{first}'"))?;
        let mut counts = Vec::new();
        for (i, line) in lines.enumerate() {
            let mut p = line.split('\t');
            let bucket: i64 = p
                .next()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("line {}: expected 'bucket<TAB>count'", i + 2))?;
            let count: i64 = p
                .next()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("line {}: expected 'bucket<TAB>count'", i + 2))?;
            if bucket != i as i64 {
                return Err(format!(
                    "line {}: buckets must be 0, 1, 2, ... in order",
                    i + 2
                ));
            }
            counts.push(count);
        }
        let area: i64 = counts.iter().sum();
        if area <= 0 || area > i32::MAX as i64 {
            return Err("the counts must add up to a positive 32-bit number".into());
        }
        Ok(HistogramLengths {
            block_size,
            counts,
            area,
        })
    }

    /// The longest length `next` returns.
    pub fn max(&self) -> i64 {
        (self.counts.len() as i64 - 1)
            .max(1)
            .saturating_mul(self.block_size)
    }

    #[inline]
    pub fn next(&self, rng: &mut Rng) -> i64 {
        let mut x = rng.next_i32_bounded(self.area as i32) as i64;
        for i in 0..self.counts.len().saturating_sub(1) {
            x -= self.counts[i];
            if x <= 0 {
                return (i as i64 + 1) * self.block_size;
            }
        }
        (self.counts.len() as i64 - 1) * self.block_size
    }
}
