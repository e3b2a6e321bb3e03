//! One attempt of each Redis operation on the connection its key routes to (the Session
//! methods in mod.rs call these, and once more after a MOVED or ASK reply in a cluster).

use super::resp::*;
use super::*;

impl RedisSession {
    /// A read; the view to return is in connection `i`'s buffer (`Some(i)`), in `one`
    /// (`Some(usize::MAX)`), or empty (`None`).
    pub(super) fn read_raw(&mut self, key: &[u8], fields: Fields) -> (Status, Option<usize>) {
        let i = match self.conn(key) {
            Ok(i) => i,
            Err(e) => return (self.fail(e), None),
        };
        let c = &mut self.conns[i];
        match fields {
            Fields::All => command(&mut c.wbuf, &[b"HGETALL", key]),
            Fields::One(f) => command(&mut c.wbuf, &[b"HGET", key, f]),
        }
        let r = c
            .send()
            .and_then(|_| Self::read_hash(c, fields, &mut self.spans));
        match r {
            Ok(true) => {
                if let Fields::One(f) = fields {
                    // One field: its value is copied next to its name (at most one field's
                    // bytes); HGETALL would move every field over the wire instead.
                    let Some(&v) = self.spans.first() else {
                        return (Status::NotFound, None);
                    };
                    let bytes = self.conns[i].bytes(v.value_range());
                    self.one.clear();
                    self.one.push(f, bytes);
                    return (Status::Ok, Some(usize::MAX));
                }
                (Status::Ok, Some(i))
            }
            Ok(false) => (Status::NotFound, None),
            Err(e) => (self.fail(e), None),
        }
    }

    pub(super) fn update_once(&mut self, key: &[u8], values: &Record) -> Status {
        let i = match self.conn(key) {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let c = &mut self.conns[i];
        Self::hset(&mut c.wbuf, key, values);
        Self::push_wait(&self.s, &mut c.wbuf);
        let s = &self.s;
        match c.send().and_then(|_| {
            let a = Self::expect_ok(c, "update");
            a.and(Self::read_wait(s, c))
        }) {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    pub(super) fn insert_once(&mut self, key: &[u8], values: &Record) -> Status {
        let i = match self.conn(key) {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, &[b"DEL", key]);
        Self::hset(&mut c.wbuf, key, values);
        if index {
            command(&mut c.wbuf, &[b"ZADD", INDEX, b"0", key]);
        }
        Self::push_wait(&self.s, &mut c.wbuf);
        let s = &self.s;
        let r = c.send().and_then(|_| {
            // Every reply is read, so the connection stays in step even after an error.
            let a = Self::expect_ok(c, "insert");
            let b = Self::expect_ok(c, "insert");
            let z = if index {
                Self::expect_ok(c, "insert")
            } else {
                Ok(())
            };
            let w = Self::read_wait(s, c);
            a.and(b).and(z).and(w)
        });
        match r {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }

    pub(super) fn delete_once(&mut self, key: &[u8]) -> Status {
        let i = match self.conn(key) {
            Ok(i) => i,
            Err(e) => return self.fail(e),
        };
        let index = self.s.index;
        let c = &mut self.conns[i];
        command(&mut c.wbuf, &[b"DEL", key]);
        if index {
            command(&mut c.wbuf, &[b"ZREM", INDEX, key]);
        }
        Self::push_wait(&self.s, &mut c.wbuf);
        let s = &self.s;
        let r = c.send().and_then(|_| {
            let a = Self::expect_ok(c, "delete");
            let z = if index {
                Self::expect_ok(c, "delete")
            } else {
                Ok(())
            };
            let w = Self::read_wait(s, c);
            a.and(z).and(w)
        });
        match r {
            Ok(()) => Status::Ok,
            Err(e) => self.fail(e),
        }
    }
}
