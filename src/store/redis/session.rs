//! The blocking Redis session's operations (`Session` for `RedisSession`): reads, scans over
//! the key index, writes, and pipelined batches. Split from mod.rs, which keeps the session's
//! state, its routing and the store.

use super::*;

impl Session for RedisSession {
    fn read(&mut self, _table: &str, key: &[u8], fields: Fields) -> (Status, RecordView<'_>) {
        let mut r = self.read_raw(key, fields);
        if self.follow() {
            r = self.read_raw(key, fields);
        }
        match r {
            (st, Some(i)) if i == usize::MAX => (st, self.one.view()),
            (st, Some(i)) => (st, RecordView::new(self.conns[i].buffer(), &self.spans)),
            (st, None) => (st, RecordView::EMPTY),
        }
    }

    fn scan(
        &mut self,
        _table: &str,
        start: &[u8],
        count: usize,
        fields: Fields,
        out: &mut ScanOut,
    ) -> Status {
        out.clear();
        if !self.s.index {
            return Status::error(ErrorKind::NotImplemented);
        }
        let i = match self.conn(start) {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let c = &mut self.conns[i];
        // ZRANGEBYLEX _kvmeter:keys [start + LIMIT 0 count
        array_head(&mut c.wbuf, 7);
        bulk(&mut c.wbuf, b"ZRANGEBYLEX");
        bulk(&mut c.wbuf, INDEX);
        c.wbuf.push(b'$');
        push_num(&mut c.wbuf, start.len() + 1);
        c.wbuf.extend_from_slice(b"\r\n[");
        c.wbuf.extend_from_slice(start);
        c.wbuf.extend_from_slice(b"\r\n");
        bulk(&mut c.wbuf, b"+");
        bulk(&mut c.wbuf, b"LIMIT");
        bulk(&mut c.wbuf, b"0");
        let mut nb = itoa::Buffer::new();
        bulk(&mut c.wbuf, nb.format(count).as_bytes());
        let keys = (|| -> Result<(), RawError> {
            c.send()?;
            let n = match reply(c)? {
                Reply::Array(Some(n)) => n,
                Reply::Error(r) => return Err(redis_error(c.bytes(r))),
                _ => return Err(malformed(c)),
            };
            for _ in 0..n {
                let Reply::Bulk(Some(k)) = reply(c)? else {
                    return Err(malformed(c));
                };
                let (kb, _) = out.next_slot();
                kb.extend_from_slice(c.bytes(k));
            }
            Ok(())
        })();
        if let Err(e) = keys {
            return self.fail(e);
        }
        // The records, in one pipelined round trip.
        c.begin();
        for j in 0..out.len() {
            let (k, _) = out.get(j);
            match fields {
                Fields::All => command(&mut c.wbuf, &[b"HGETALL", k]),
                Fields::One(f) => command(&mut c.wbuf, &[b"HMGET", k, f]),
            }
        }
        let n = out.len();
        let r = (|| -> Result<usize, RawError> {
            c.send()?;
            let mut kept = 0;
            for j in 0..n {
                let (_, rec) = out.slot_mut(j);
                rec.clear();
                match reply(c)? {
                    Reply::Array(Some(m)) => {
                        if let Fields::One(f) = fields {
                            for _ in 0..m {
                                if let Reply::Bulk(Some(v)) = reply(c)? {
                                    rec.push(f, c.bytes(v));
                                }
                            }
                        } else {
                            for _ in 0..m / 2 {
                                let (Reply::Bulk(Some(a)), Reply::Bulk(Some(b))) =
                                    (reply(c)?, reply(c)?)
                                else {
                                    return Err(malformed(c));
                                };
                                rec.push(c.bytes(a), c.bytes(b));
                            }
                        }
                        if !rec.is_empty() {
                            kept += 1;
                        }
                    }
                    Reply::Error(r) => return Err(redis_error(c.bytes(r))),
                    _ => return Err(malformed(c)),
                }
            }
            Ok(kept)
        })();
        match r {
            Ok(_) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    fn update(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let st = self.update_once(key, values);
        if self.follow() {
            return self.update_once(key, values);
        }
        st
    }

    fn insert(&mut self, _table: &str, key: &[u8], values: &Record) -> Status {
        let st = self.insert_once(key, values);
        if self.follow() {
            return self.insert_once(key, values);
        }
        st
    }

    fn delete(&mut self, _table: &str, key: &[u8]) -> Status {
        let st = self.delete_once(key);
        if self.follow() {
            return self.delete_once(key);
        }
        st
    }

    fn last_error(&mut self) -> Option<String> {
        self.last_error.take()
    }

    fn pipeline_depth(&self) -> usize {
        self.s.pipeline
    }

    fn sent_to(&self) -> Vec<(std::net::SocketAddr, u64)> {
        self.sent.clone()
    }

    fn shard(&self) -> Option<u16> {
        self.routes
            .as_ref()
            .map(|r| cluster::shard_of(r.slot, self.s.cluster))
    }

    fn queue(&mut self, op: Queued<'_>) -> bool {
        if self.batch.is_none() {
            let key = match op {
                Queued::Read(k, _) | Queued::Update(k, _) | Queued::Insert(k, _) => k,
                Queued::Delete(k) => k,
            };
            self.batch = Some(self.conn(key));
        }
        let Some(Ok(i)) = self.batch else {
            self.pending.push(Pending::Update); // answered with the connection error
            return true;
        };
        let index = self.s.index;
        let w = &mut self.conns[i].wbuf;
        match op {
            Queued::Read(key, Fields::All) => {
                command(w, &[b"HGETALL", key]);
                self.pending.push(Pending::Read(None));
            }
            Queued::Read(key, Fields::One(f)) => {
                command(w, &[b"HGET", key, f]);
                self.pending.push(Pending::Read(Some(f.len())));
            }
            Queued::Update(key, values) => {
                Self::hset(w, key, values);
                self.pending.push(Pending::Update);
            }
            Queued::Insert(key, values) => {
                command(w, &[b"DEL", key]);
                Self::hset(w, key, values);
                if index {
                    command(w, &[b"ZADD", INDEX, b"0", key]);
                }
                self.pending.push(Pending::Insert);
            }
            Queued::Delete(key) => {
                command(w, &[b"DEL", key]);
                if index {
                    command(w, &[b"ZREM", INDEX, key]);
                }
                self.pending.push(Pending::Delete);
            }
        }
        true
    }

    fn flush(&mut self, done: &mut dyn FnMut(Status, u64)) {
        let batch = self.batch.take();
        let n = self.pending.len();
        let i = match batch {
            None => return,
            Some(Ok(i)) => i,
            Some(Err(e)) => {
                let st = self.fail(e);
                (0..n).for_each(|_| done(st, 0));
                self.pending.clear();
                return;
            }
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        let mut broken: Option<RawError> = c.send().err();
        for k in 0..n {
            if let Some(e) = &broken {
                done(
                    Status::Error {
                        kind: e.kind,
                        fatal: e.fatal,
                    },
                    0,
                );
                continue;
            }
            let r = match self.pending[k] {
                Pending::Read(one) => {
                    let f = if one.is_none() {
                        Fields::All
                    } else {
                        Fields::One(b"")
                    };
                    Self::read_hash(c, f, &mut self.spans).map(|found| {
                        let bytes: u64 = self.spans.iter().map(|s| s.data_len()).sum();
                        match found {
                            true => (Status::Ok, bytes + one.unwrap_or(0) as u64),
                            false => (Status::NotFound, 0),
                        }
                    })
                }
                Pending::Update => Self::expect_ok(c, "update").map(|_| (Status::Ok, 0)),
                Pending::Insert => {
                    let a = Self::expect_ok(c, "insert");
                    let b = Self::expect_ok(c, "insert");
                    let z = if index {
                        Self::expect_ok(c, "insert")
                    } else {
                        Ok(())
                    };
                    a.and(b).and(z).map(|_| (Status::Ok, 0))
                }
                Pending::Delete => {
                    let a = Self::expect_ok(c, "delete");
                    let z = if index {
                        Self::expect_ok(c, "delete")
                    } else {
                        Ok(())
                    };
                    a.and(z).map(|_| (Status::Ok, 0))
                }
            };
            match r {
                Ok((st, bytes)) => done(st, bytes),
                Err(e) => {
                    let st = Status::Error {
                        kind: e.kind,
                        fatal: e.fatal,
                    };
                    self.last_error = Some(e.message.clone());
                    if c.broken {
                        broken = Some(e);
                    }
                    done(st, 0);
                }
            }
        }
        if let Some(e) = broken {
            self.last_error = Some(e.message);
        }
        self.pending.clear();
    }
}
