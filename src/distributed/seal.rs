//! Authentication of everything a distributed run keeps in etcd (docs/distributed.md
//! "Security"): write access to etcd must not be enough to steer an agent or to feed the
//! coordinator results.
//!
//! The coordinator and its agents share a secret key, read from a file (`--plan-key-file`) or
//! the environment (`KVMETER_PLAN_KEY`), never from etcd. Every value kvmeter puts under
//! `/kvmeter/<job>/` is sealed: `<64 hex digits of HMAC-SHA256> <body>`, the MAC taken over a
//! domain tag, the value's full etcd key, the run's nonce and the body. So a value verifies only
//! under the key it was written to (an interval cannot be moved to another agent's slot), and
//! only in the run it was written for (the nonce is fresh in every plan: an old run's reports do
//! not verify in a new one). The plan itself is sealed with an empty nonce (it carries the
//! nonce); a replayed old plan is one the key's holder once authorized.
//!
//! HMAC-SHA256 and SHA-256 come from `ring` (already linked through rustls): constant-time
//! verification, no hand-written cryptography.

use crate::error::UsageError;
use ring::{digest, hmac};
use std::path::Path;

/// The environment variable that may hold the key itself.
pub const KEY_ENV: &str = "KVMETER_PLAN_KEY";
/// The shortest key accepted (bytes): 128 bits.
const MIN_KEY: usize = 16;
/// A key file larger than this is not a key.
const MAX_KEY_FILE: u64 = 4096;
const TAG: &[u8] = b"kvmeter-dist/1";
/// The report channel's frames (src/distributed/relay.rs): a tag of their own, so a value sealed for
/// etcd never verifies as a frame, nor a frame as an etcd value.
const FRAME_TAG: &[u8] = b"kvmeter-relay/2";

/// The shared key and, once a plan is known, its run's nonce.
#[derive(Clone)]
pub struct Seal {
    key: hmac::Key,
    nonce: String,
}

/// Why a value did not open.
#[derive(Debug, PartialEq)]
pub enum Unsealed {
    /// No MAC where one belongs: written by something that is not kvmeter with the key.
    NotSealed,
    /// A MAC that does not verify: another key, another key path, another run, or altered.
    BadMac,
}

impl std::fmt::Display for Unsealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unsealed::NotSealed => {
                "it carries no authentication (not written by kvmeter with the plan key)"
            }
            Unsealed::BadMac => {
                "its authentication does not verify (another plan key, another run, or altered)"
            }
        })
    }
}

/// Never prints the key.
impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Seal {{ nonce: {:?} }}", self.nonce)
    }
}

impl Seal {
    /// The key from `--plan-key-file FILE`, else from `KVMETER_PLAN_KEY`; one line when neither
    /// is given or the key is too short. `flag` names the option in messages.
    pub fn load(file: Option<&Path>, env: Option<String>) -> Result<Seal, UsageError> {
        let raw = match (file, env) {
            (Some(f), _) => read_key_file(f)?,
            (None, Some(v)) if !v.is_empty() => v.trim().as_bytes().to_vec(),
            _ => {
                return Err(UsageError::new(format!(
                    "--plan-key-file: a distributed run needs a key shared by the coordinator and its agents (a file, or the environment variable {KEY_ENV}); make one with 'head -c 32 /dev/urandom | base64 > plan.key' and give it to every process"
                )))
            }
        };
        if raw.len() < MIN_KEY {
            return Err(UsageError::new(format!(
                "--plan-key-file: the key has {} bytes; expected at least {MIN_KEY} (e.g. 'head -c 32 /dev/urandom | base64')",
                raw.len()
            )));
        }
        Ok(Seal {
            key: hmac::Key::new(hmac::HMAC_SHA256, &raw),
            nonce: String::new(),
        })
    }

    /// The same key for the run whose plan carries `nonce`.
    pub fn for_run(&self, nonce: &str) -> Seal {
        Seal {
            key: self.key.clone(),
            nonce: nonce.to_string(),
        }
    }

    fn mac(&self, full_key: &str, body: &str) -> hmac::Tag {
        let mut c = hmac::Context::with_key(&self.key);
        for part in [TAG, full_key.as_bytes(), self.nonce.as_bytes()] {
            c.update(&(part.len() as u64).to_be_bytes());
            c.update(part);
        }
        c.update(body.as_bytes());
        c.sign()
    }

    /// The MAC of a report channel frame: the frame's full key, the run's nonce, the
    /// connection's challenge (fresh from the coordinator for each connection) and the frame's
    /// sequence number on that connection (the hello is 0), then the body. A frame verifies on
    /// one connection at one place only: replayed on another connection, repeated, reordered
    /// or cut out, it does not.
    fn frame_message(&self, full_key: &str, challenge: &str, seq: u64, body: &str) -> Vec<u8> {
        let seq = seq.to_string();
        let mut c = Vec::with_capacity(160 + body.len());
        for part in [
            FRAME_TAG,
            full_key.as_bytes(),
            self.nonce.as_bytes(),
            challenge.as_bytes(),
            seq.as_bytes(),
        ] {
            c.extend_from_slice(&(part.len() as u64).to_be_bytes());
            c.extend_from_slice(part);
        }
        c.extend_from_slice(body.as_bytes());
        c
    }

    /// A frame's value for the report channel: `<64 hex digits> <body>` like [`Seal::seal`].
    pub fn seal_frame(&self, full_key: &str, challenge: &str, seq: u64, body: &str) -> String {
        let tag = hmac::sign(
            &self.key,
            &self.frame_message(full_key, challenge, seq, body),
        );
        let mut out = String::with_capacity(65 + body.len());
        out.push_str(&hex(tag.as_ref()));
        out.push(' ');
        out.push_str(body);
        out
    }

    /// The body of a frame received as number `seq` on the connection given `challenge`.
    pub fn open_frame<'a>(
        &self,
        full_key: &str,
        challenge: &str,
        seq: u64,
        value: &'a str,
    ) -> Result<&'a str, Unsealed> {
        let (mac, body) = value.split_at_checked(64).ok_or(Unsealed::NotSealed)?;
        let body = body.strip_prefix(' ').ok_or(Unsealed::NotSealed)?;
        let mac = unhex(mac).ok_or(Unsealed::NotSealed)?;
        let msg = self.frame_message(full_key, challenge, seq, body);
        hmac::verify(&self.key, &msg, &mac).map_err(|_| Unsealed::BadMac)?;
        Ok(body)
    }

    /// The value to put under `full_key`.
    pub fn seal(&self, full_key: &str, body: &str) -> String {
        let tag = self.mac(full_key, body);
        let mut out = String::with_capacity(65 + body.len());
        out.push_str(&hex(tag.as_ref()));
        out.push(' ');
        out.push_str(body);
        out
    }

    /// The body of a value read from `full_key`, if it verifies.
    pub fn open<'a>(&self, full_key: &str, value: &'a str) -> Result<&'a str, Unsealed> {
        let (mac, body) = value.split_at_checked(64).ok_or(Unsealed::NotSealed)?;
        let body = body.strip_prefix(' ').ok_or(Unsealed::NotSealed)?;
        let mac = unhex(mac).ok_or(Unsealed::NotSealed)?;
        let mut c = Vec::with_capacity(64);
        for part in [TAG, full_key.as_bytes(), self.nonce.as_bytes()] {
            c.extend_from_slice(&(part.len() as u64).to_be_bytes());
            c.extend_from_slice(part);
        }
        c.extend_from_slice(body.as_bytes());
        hmac::verify(&self.key, &c, &mac).map_err(|_| Unsealed::BadMac)?;
        Ok(body)
    }
}

/// A fresh run nonce: 128 random bits from the OS, hex.
pub fn fresh_nonce() -> String {
    let mut b = [0u8; 16];
    let rng = ring::rand::SystemRandom::new();
    ring::rand::SecureRandom::fill(&rng, &mut b).expect("the OS random source");
    hex(&b)
}

/// SHA-256 of `text`, 64 hex digits.
pub fn sha256_hex(text: &str) -> String {
    hex(digest::digest(&digest::SHA256, text.as_bytes()).as_ref())
}

fn read_key_file(f: &Path) -> Result<Vec<u8>, UsageError> {
    let bad = |why: String| UsageError::new(format!("--plan-key-file {}: {why}", f.display()));
    let meta = std::fs::metadata(f).map_err(|e| bad(format!("cannot read it: {e}")))?;
    if !meta.is_file() || meta.len() > MAX_KEY_FILE {
        return Err(bad(format!(
            "expected a small file holding the key (at most {MAX_KEY_FILE} bytes)"
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.mode() & 0o004 != 0 {
            errln!(
                "warning: --plan-key-file {}: readable by every user of this host: anyone who reads it can steer the run's agents (chmod 600)",
                f.display()
            );
        }
    }
    let text = std::fs::read(f).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let trimmed = text.trim_ascii();
    Ok(trimmed.to_vec())
}

fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| {
            let d = |c: u8| (c as char).to_digit(16);
            Some((d(p[0])? * 16 + d(p[1])?) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(k: &str) -> Seal {
        Seal::load(None, Some(k.into())).unwrap()
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2_shape() {
        // RFC 4231 test case 2 (key "Jefe" is too short for a plan key, so check ring's HMAC
        // directly against the RFC's vector, then our framing separately).
        let k = hmac::Key::new(hmac::HMAC_SHA256, b"Jefe");
        let t = hmac::sign(&k, b"what do ya want for nothing?");
        assert_eq!(
            hex(t.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // FIPS 180-2's "abc".
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_sealed_value_opens_only_under_its_key_path_nonce_and_key() {
        let a = seal("0123456789abcdef-key-A").for_run("n1");
        let v = a.seal("/kvmeter/j/iv/0/000001/0000", "{\"x\":1}");
        assert_eq!(a.open("/kvmeter/j/iv/0/000001/0000", &v), Ok("{\"x\":1}"));
        // Moved to another agent's slot, replayed in another run, or opened with another key.
        assert_eq!(
            a.open("/kvmeter/j/iv/0/000001/0001", &v),
            Err(Unsealed::BadMac)
        );
        assert_eq!(
            a.for_run("n2").open("/kvmeter/j/iv/0/000001/0000", &v),
            Err(Unsealed::BadMac)
        );
        let b = seal("0123456789abcdef-key-B").for_run("n1");
        assert_eq!(
            b.open("/kvmeter/j/iv/0/000001/0000", &v),
            Err(Unsealed::BadMac)
        );
        // Altered body, plain JSON, short and non-hex values.
        let altered = v.replace("\"x\":1", "\"x\":2");
        assert_eq!(
            a.open("/kvmeter/j/iv/0/000001/0000", &altered),
            Err(Unsealed::BadMac)
        );
        for junk in [
            "{\"x\":1}",
            "",
            "zz",
            &"g".repeat(70),
            "é".repeat(40).as_str(),
        ] {
            assert_eq!(
                a.open("/kvmeter/j/iv/0/000001/0000", junk),
                Err(Unsealed::NotSealed),
                "{junk}"
            );
        }
    }

    #[test]
    fn a_frame_opens_only_on_its_connection_at_its_place_and_never_as_an_etcd_value() {
        let a = seal("0123456789abcdef-key-A").for_run("n1");
        let k = "/kvmeter/j/iv/0/000001/0000";
        let f = a.seal_frame(k, "c1", 3, "{}");
        assert_eq!(a.open_frame(k, "c1", 3, &f), Ok("{}"));
        // Another connection's challenge, another place on it, another run.
        assert_eq!(a.open_frame(k, "c2", 3, &f), Err(Unsealed::BadMac));
        assert_eq!(a.open_frame(k, "c1", 4, &f), Err(Unsealed::BadMac));
        assert_eq!(
            a.for_run("n2").open_frame(k, "c1", 3, &f),
            Err(Unsealed::BadMac)
        );
        // A value sealed for etcd is not a frame, and a frame is not an etcd value.
        let v = a.seal(k, "{}");
        for c in ["", "c1"] {
            for seq in 0..4 {
                assert_eq!(a.open_frame(k, c, seq, &v), Err(Unsealed::BadMac));
            }
        }
        assert_eq!(a.open(k, &f), Err(Unsealed::BadMac));
    }

    #[test]
    fn keys_are_required_and_long_enough() {
        assert!(Seal::load(None, None)
            .unwrap_err()
            .0
            .contains("KVMETER_PLAN_KEY"));
        assert!(Seal::load(None, Some("short".into()))
            .unwrap_err()
            .0
            .contains("at least 16"));
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("k");
        std::fs::write(&f, "  0123456789abcdefXYZ\n").unwrap();
        let from_file = Seal::load(Some(&f), None).unwrap();
        let from_env = seal("0123456789abcdefXYZ");
        let v = from_file.seal("/k", "b");
        assert_eq!(from_env.open("/k", &v), Ok("b"));
        assert!(Seal::load(Some(&d.path().join("none")), None)
            .unwrap_err()
            .0
            .starts_with("--plan-key-file"));
        let n1 = fresh_nonce();
        assert_eq!(n1.len(), 32);
        assert_ne!(n1, fresh_nonce());
    }
}
