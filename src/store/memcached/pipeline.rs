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
        answered: &mut usize,
    ) -> Result<(), RawError> {
        let mut results = std::mem::take(&mut self.group);
        let r = self.replies_into(i, queued, done, answered, &mut results);
        self.group = results;
        r
    }

    fn replies_into(
        &mut self,
        i: usize,
        queued: &[McQueued],
        done: &mut dyn FnMut(Status, u64),
        answered: &mut usize,
        results: &mut Vec<(Status, u64)>,
    ) -> Result<(), RawError> {
        let c = &mut self.conns[i];
        c.send()?;
        let mut k = 0;
        while k < queued.len() {
            match &queued[k] {
                McQueued::Set => {
                    let l = c.line()?;
                    let st = match c.bytes(l.clone()) {
                        b"STORED" => Status::Ok,
                        other => {
                            let e = server_error("set", other);
                            self.last_error = Some(e.message.clone());
                            Status::Error {
                                kind: e.kind,
                                fatal: false,
                            }
                        }
                    };
                    done(st, 0);
                    *answered += 1;
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
                    loop {
                        let l = c.line()?;
                        let line = c.bytes(l.clone());
                        if line == b"END" {
                            break;
                        }
                        let Some(n) = value_length(line) else {
                            return Err(unexpected(c, "get", l));
                        };
                        let key_end = line[6..].iter().position(|&b| b == b' ').map(|p| 6 + p);
                        let key = key_end.map(|e| l.start + 6..l.start + e);
                        let v = c.take(n)?;
                        let crlf = c.line()?;
                        if !c.bytes(crlf).is_empty() {
                            return Err(desync(c, "get"));
                        }
                        let Some(key) = key else {
                            return Err(desync(c, "get"));
                        };
                        let found = (next..group.len()).find(|&g| match &group[g] {
                            McQueued::Read(kr, _) => {
                                self.qbytes[kr.clone()] == *c.bytes(key.clone())
                            }
                            McQueued::Set => false,
                        });
                        let Some(g) = found else {
                            return Err(desync(c, "get"));
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
                    *answered += group.len();
                    k = end;
                }
            }
        }
        Ok(())
    }
}
