//! TLS for the report channel (issue 41; docs/security.md "The report channel"): the
//! coordinator serves it with a certificate and key the user gives (`dist run
//! --reports-tls-cert/--reports-tls-key`); agents pin that certificate by the SHA-256 of its
//! DER bytes, which the coordinator publishes in the sealed plan.
//!
//! Why a pin and not a CA: the plan is already authenticated with the run's key, so the pin
//! reaches each agent as safely as the key itself, needs no file or flag on any agent (a plan
//! never names a local path, docs/distributed.md "Security"), and works with a self-signed
//! certificate. rustls has no pinning verifier, so [`Pinned`] is the few lines that compare
//! the leaf's hash and then check the handshake's signatures with rustls's own functions.
//!
//! What TLS adds to sealing (which already stops forgery and replay): nobody on the path
//! reads the reports, and a frame cannot be altered or cut in the middle of a record unseen.

use ring::digest;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;

/// The coordinator's TLS settings, loaded and checked before anything is created.
#[derive(Clone)]
pub struct ServerTls {
    pub(super) config: Arc<rustls::ServerConfig>,
    /// Lower-case hex SHA-256 of the leaf certificate's DER bytes (what agents pin).
    pub fingerprint: String,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerTls({})", self.fingerprint)
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// SHA-256 of `der`, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    digest::digest(&digest::SHA256, der)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl ServerTls {
    /// Reads a PEM certificate chain (leaf first) and its PEM private key. Errors name the
    /// flag and the file.
    pub fn load(cert: &Path, key: &Path) -> Result<ServerTls, String> {
        let c = cert.display();
        let chain = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("--reports-tls-cert {c}: {e}"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--reports-tls-cert {c}: {e}"))?;
        let Some(leaf) = chain.first() else {
            return Err(format!(
                "--reports-tls-cert {c}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)"
            ));
        };
        let fingerprint = fingerprint(leaf);
        let private = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("--reports-tls-key {}: {e}", key.display()))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| {
                format!(
                    "--reports-tls-cert {c} with --reports-tls-key {}: {e}",
                    key.display()
                )
            })?;
        Ok(ServerTls {
            config: Arc::new(config),
            fingerprint,
        })
    }
}

/// Accepts exactly the certificate whose SHA-256 is pinned, whatever its names or dates (the
/// pin, not a CA, is the trust), and checks the handshake's signatures against it.
#[derive(Debug)]
struct Pinned {
    sha256: String,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = fingerprint(end_entity);
        // Not secret: both sides know the pin; a plain comparison leaks nothing.
        if got == self.sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the coordinator's certificate has SHA-256 {got}, the plan pins {}",
                self.sha256
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A client that trusts only the certificate with SHA-256 `pin` (64 hex digits).
pub fn client_config(pin: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    if pin.len() != 64 || !pin.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err("the plan's certificate pin is not 64 hex digits".into());
    }
    let p = provider();
    let verifier = Pinned {
        sha256: pin.to_string(),
        algorithms: p.signature_verification_algorithms,
    };
    let config = rustls::ClientConfig::builder_with_provider(p)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// An agent's blocking connection to the coordinator, plain or TLS.
pub enum Wire {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Wire {
    /// Wraps `tcp` in TLS toward `ip` trusting only `pin` (no I/O yet: the handshake runs
    /// with the first read or write, within the socket's timeouts).
    pub fn tls(tcp: TcpStream, ip: IpAddr, pin: &str) -> io::Result<Wire> {
        let config = client_config(pin).map_err(io::Error::other)?;
        let conn = rustls::ClientConnection::new(config, ServerName::IpAddress(ip.into()))
            .map_err(io::Error::other)?;
        Ok(Wire::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
    }

    pub fn tcp(&self) -> &TcpStream {
        match self {
            Wire::Plain(s) => s,
            Wire::Tls(s) => &s.sock,
        }
    }

    /// Says the end of TLS (close_notify) where there is TLS.
    pub fn close_notify(&mut self) -> io::Result<()> {
        if let Wire::Tls(s) = self {
            s.conn.send_close_notify();
            s.flush()?;
        }
        Ok(())
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Wire::Plain(s) => s.flush(),
            Wire::Tls(s) => s.flush(),
        }
    }
}

/// The coordinator's side of one TLS connection on a non-blocking socket: rustls's state
/// beside the socket, driven by the inbox's readiness loop.
pub struct ServerSide(Box<rustls::ServerConnection>);

impl ServerSide {
    pub fn new(tls: &ServerTls) -> io::Result<ServerSide> {
        rustls::ServerConnection::new(tls.config.clone())
            .map(|c| ServerSide(Box::new(c)))
            .map_err(io::Error::other)
    }

    /// Queues `data` (sent once the handshake is done) and sends what the socket takes.
    pub fn write(&mut self, sock: &mut impl Write, data: &[u8]) -> io::Result<()> {
        self.0.writer().write_all(data)?;
        self.flush(sock)
    }

    /// Sends queued TLS records until the socket would block (the rest goes with the next
    /// readiness: the inbox registers TLS sockets for writability too).
    pub fn flush(&mut self, sock: &mut impl Write) -> io::Result<()> {
        while self.0.wants_write() {
            match self.0.write_tls(sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Plaintext into `buf`: `Ok(0)` at the end (close_notify or the socket's end),
    /// `WouldBlock` when the socket has nothing more now. A TLS error is `InvalidData`.
    pub fn read(&mut self, sock: &mut (impl Read + Write), buf: &mut [u8]) -> io::Result<usize> {
        // A readiness may be the socket's room for what is queued.
        self.flush(sock)?;
        loop {
            match self.0.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.0.read_tls(sock) {
                Ok(0) => {
                    self.process()?;
                    return match self.0.reader().read(buf) {
                        Ok(n) => Ok(n),
                        Err(_) => Ok(0),
                    };
                }
                Ok(_) => {
                    self.process()?;
                    self.flush(sock)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn process(&mut self) -> io::Result<()> {
        self.0
            .process_new_packets()
            .map(|_| ())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")))
    }
}
