//! Pipelining (`pipeline=N`): a batch's replies read in order; a run of queued reads is one
//! multi-get.

use super::*;

impl McSession {
    /// Reads a pipelined batch's replies in order; a run of reads is one multi-get whose
    /// values come back in the order asked, missing keys left out, then END.
    pub(super) fn flush_replies(
        &mut self,
        i: usize,
        queued: &[McQueued],
        done: &mut dyn FnMut(Status, u64),
        answered_n: &mut usize,
    ) -> Result<(), RawError> {
        let mut results = std::mem::take(&mut self.group);
        let r = self.replies_into(i, queued, done, answered_n, &mut results);
        self.group = results;
        r
    }

    fn replies_into(
        &mut self,
        i: usize,
        queued: &[McQueued],
        done: &mut dyn FnMut(Status, u64),
        answered_n: &mut usize,
        results: &mut Vec<(Status, u64)>,
    ) -> Result<(), RawError> {
        let c = &mut self.conns[i];
        c.send()?;
        let mut k = 0;
        while k < queued.len() {
            match &queued[k] {
                McQueued::Set => {
                    let st = match answered(c, "set", text::stored) {
                        Ok(()) => Status::Ok,
                        Err(e) if e.kind == ErrorKind::Protocol => return Err(e),
                        Err(e) => {
                            self.last_error = Some(e.message);
                            Status::Error {
                                kind: e.kind,
                                fatal: false,
                            }
                        }
                    };
                    done(st, 0);
                    *answered_n += 1;
                    k += 1;
                }
                McQueued::Read(..) => {
                    let end = queued[k..]
                        .iter()
                        .position(|q| matches!(q, McQueued::Set))
                        .map(|p| k + p)
                        .unwrap_or(queued.len());
                    let group = &queued[k..end];
                    let base = 0;
                    results.clear();
                    results.resize(group.len(), (Status::NotFound, 0));
                    let mut next = 0; // values come in the order asked
                    let limit = c.limit();
                    loop {
                        let (it, at) = c.read_until(|b| text::item(b, 0, limit))?;
                        let shift =
                            |r: std::ops::Range<usize>| at.start + r.start..at.start + r.end;
                        let (key, v) = match it {
                            text::Item::End => break,
                            text::Item::Refused(r) => {
                                return Err(server_error("get", c.bytes(shift(r))))
                            }
                            text::Item::Value { key, data } => (shift(key), shift(data)),
                        };
                        let found = (next..group.len()).find(|&g| match &group[g] {
                            McQueued::Read(kr, _) => {
                                self.qbytes[kr.clone()] == *c.bytes(key.clone())
                            }
                            McQueued::Set => false,
                        });
                        let Some(g) = found else {
                            return Err(
                                c.protocol("memcached get: a value for a key not asked for")
                            );
                        };
                        next = g + 1;
                        let McQueued::Read(_, field) = &group[g] else {
                            unreachable!()
                        };
                        let want = field.as_ref().map(|f| &self.qbytes[f.clone()]);
                        let r = record::index_encoded(
                            c.bytes(v),
                            |nm| want.is_none_or(|w| w == nm),
                            &mut self.spans,
                        );
                        results[base + g] = match r {
                            Ok(()) => (Status::Ok, self.spans.iter().map(|s| s.data_len()).sum()),
                            Err(e) => {
                                self.last_error =
                                    Some(format!("stored record cannot be decoded: {}", e.0));
                                (Status::error(ErrorKind::Corruption), 0)
                            }
                        };
                    }
                    for &(st, b) in results.iter() {
                        done(st, b);
                    }
                    *answered_n += group.len();
                    k = end;
                }
            }
        }
        Ok(())
    }
}
