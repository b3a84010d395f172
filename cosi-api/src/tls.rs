//! TLS for the API with rustls (the `ring` provider): the server's mutual-TLS and maintenance
//! configurations, the client's configurations (verify against the cluster CA, or pin the
//! server's key in maintenance mode), and certificate fingerprints. Both sides negotiate ALPN
//! `h2`, which gRPC clients require.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::pki::CertifiedKey;

/// The ALPN protocol gRPC runs on.
pub const ALPN_H2: &[u8] = b"h2";

/// A TLS setup problem (unreadable PEM, a key that does not match, no certificate).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// PEM input could not be read.
    #[error("{what}: {message}")]
    Pem {
        /// Which input.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// rustls refused the configuration.
    #[error("{what}: {source}")]
    Rustls {
        /// What was being configured.
        what: &'static str,
        /// The cause.
        #[source]
        source: rustls::Error,
    },
}

/// The crypto provider every config here uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            message: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

fn private_key(what: &'static str, pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        what,
        message: e.to_string(),
    })
}

fn roots(pem: &str) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates("cluster CA", pem)? {
        store.add(cert).map_err(|source| TlsError::Rustls {
            what: "cluster CA",
            source,
        })?;
    }
    Ok(store)
}

fn rustls_err(what: &'static str) -> impl FnOnce(rustls::Error) -> TlsError {
    move |source| TlsError::Rustls { what, source }
}

/// The server side of mutual TLS: client certificates are required and verified against
/// `client_ca_pem`.
pub fn server_mutual(
    identity: &CertifiedKey,
    client_ca_pem: &str,
) -> Result<ServerConfig, TlsError> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(client_ca_pem)?),
        provider.clone(),
    )
    .build()
    .map_err(|e| TlsError::Pem {
        what: "client verifier",
        message: e.to_string(),
    })?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("server protocol versions"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certificates("server certificate", &identity.cert_pem)?,
            private_key("server key", &identity.key_pem)?,
        )
        .map_err(rustls_err("server certificate"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// Checks that the certificate of `identity` is one that clients verifying the server against
/// `ca_pem` accept, its validity period aside: issued by that CA (directly, or through the
/// intermediates that follow it in `cert_pem`) for server authentication. A server configured
/// with another CA's certificate serves, and every such client refuses it. The time is left
/// out because it is not the files' fault: a machine whose clock is off at boot would refuse a
/// good certificate.
///
/// ```
/// use cosi_api::pki::{CertificateAuthority, CERT_VALIDITY};
/// let ca = CertificateAuthority::generate("cosi").unwrap();
/// let server = ca.issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY).unwrap();
/// assert!(cosi_api::tls::check_issued_by(&server, ca.cert_pem()).is_ok());
///
/// let other = CertificateAuthority::generate("other").unwrap();
/// assert!(cosi_api::tls::check_issued_by(&server, other.cert_pem()).is_err());
/// ```
pub fn check_issued_by(identity: &CertifiedKey, ca_pem: &str) -> Result<(), TlsError> {
    let chain = certificates("server certificate", &identity.cert_pem)?;
    let roots = roots(ca_pem)?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| TlsError::Pem {
            what: "server certificate",
            message: e.to_string(),
        })?;
    // A moment the certificate is valid at, so that only the issuer and the usage are checked.
    let valid_at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
        u64::try_from(parsed.validity().not_before.timestamp()).unwrap_or(0),
    ));
    let end_entity = rustls::server::ParsedCertificate::try_from(&chain[0])
        .map_err(rustls_err("server certificate"))?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(
        &end_entity,
        &roots,
        &chain[1..],
        valid_at,
        provider().signature_verification_algorithms.all,
    )
    .map_err(rustls_err("server certificate"))
}

/// The server side of maintenance mode: server-only TLS (no client certificate).
pub fn server_maintenance(identity: &CertifiedKey) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("server protocol versions"))?
        .with_no_client_auth()
        .with_single_cert(
            certificates("server certificate", &identity.cert_pem)?,
            private_key("server key", &identity.key_pem)?,
        )
        .map_err(rustls_err("server certificate"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The client side of mutual TLS: the server is verified against `ca_pem`, and the client
/// presents `identity`.
pub fn client_mutual(ca_pem: &str, identity: &CertifiedKey) -> Result<ClientConfig, TlsError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("client protocol versions"))?
        .with_root_certificates(roots(ca_pem)?)
        .with_client_auth_cert(
            certificates("client certificate", &identity.cert_pem)?,
            private_key("client key", &identity.key_pem)?,
        )
        .map_err(rustls_err("client certificate"))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The client side of server-only TLS verified against `ca_pem`, without a client
/// certificate (a server requiring one refuses it).
pub fn client_without_certificate(ca_pem: &str) -> Result<ClientConfig, TlsError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("client protocol versions"))?
        .with_root_certificates(roots(ca_pem)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The client side of maintenance mode: no chain to verify (the node has no CA yet), so the
/// server's public key must have one of `pinned` fingerprints.
pub fn client_pinned(pinned: &[Fingerprint]) -> Result<ClientConfig, TlsError> {
    let provider = provider();
    let verifier = PinnedServer {
        pinned: pinned.to_vec(),
        provider: provider.clone(),
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rustls_err("client protocol versions"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The SHA-256 of a certificate's SubjectPublicKeyInfo, written as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

impl FromStr for Fingerprint {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.len() != 64 || !text.is_ascii() {
            return Err(format!("{text:?}: a fingerprint is 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("{text:?}: a fingerprint is 64 hex digits"))?;
        }
        Ok(Fingerprint(out))
    }
}

/// The fingerprint of a DER certificate's public key.
pub fn fingerprint_of_der(der: &[u8]) -> Result<Fingerprint, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.public_key().raw);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    Ok(Fingerprint(out))
}

/// The fingerprint of the first certificate of a PEM text.
pub fn fingerprint_of_pem(pem: &str) -> Result<Fingerprint, String> {
    let cert = certificates("certificate", pem).map_err(|e| e.to_string())?;
    fingerprint_of_der(&cert[0])
}

#[derive(Debug)]
struct PinnedServer {
    pinned: Vec<Fingerprint>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fingerprint = fingerprint_of_der(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        if self.pinned.contains(&fingerprint) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server key fingerprint {fingerprint} is not pinned"
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The caller a verified client certificate (the leaf, DER) names.
pub(crate) fn caller_of_certificate(der: &[u8]) -> Option<crate::auth::Caller> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let organizations: Vec<&str> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    Some(crate::auth::Caller::from_certificate(&name, organizations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_parses_what_it_prints() {
        let server = crate::pki::self_signed_server(&["127.0.0.1".parse().unwrap()], &[]).unwrap();
        let f = fingerprint_of_pem(&server.cert_pem).unwrap();
        assert_eq!(f.to_string().parse::<Fingerprint>().unwrap(), f);
        assert!("abc".parse::<Fingerprint>().is_err());
    }
}
