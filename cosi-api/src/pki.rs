//! Certificates for the API, generated with `rcgen`: the cluster CA, a node's server
//! certificate for its addresses, and client certificates that carry one role each (as the
//! subject's Organization, the way Talos carries roles), written and read as PEM files.
//!
//! Keys are Ed25519. A client certificate has the extended key usage `clientAuth` only, a
//! server certificate `serverAuth` only, so neither can stand in for the other.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, PKCS_ED25519,
};
use time::OffsetDateTime;

use crate::auth::Role;

/// Default validity of a CA (10 years, as Talos).
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Default validity of a server or client certificate (1 year).
pub const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// What went wrong generating, reading or writing certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// rcgen refused the parameters or the input.
    #[error("{what}: {source}")]
    Certificate {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: rcgen::Error,
    },
    /// A PEM file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An argument is unusable (an empty address list, a bad name).
    #[error("{0}")]
    Invalid(String),
}

fn cert_err(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> PkiError {
    let what = what.into();
    move |source| PkiError::Certificate { what, source }
}

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CertifiedKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key (PKCS#8), PEM.
    pub key_pem: String,
}

impl fmt::Debug for CertifiedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a private key.
        f.debug_struct("CertifiedKey")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .finish_non_exhaustive()
    }
}

impl CertifiedKey {
    /// Writes `<dir>/<name>.pem` and `<dir>/<name>-key.pem` (the key readable by the owner
    /// only); returns both paths.
    pub fn write_pem(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), PkiError> {
        if name.is_empty() || name.contains('/') {
            return Err(PkiError::Invalid(format!(
                "{name:?} is not a file name for a certificate"
            )));
        }
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}-key.pem"));
        write_file(&cert, &self.cert_pem, 0o644)?;
        write_file(&key, &self.key_pem, 0o600)?;
        Ok((cert, key))
    }

    /// Reads a pair written by [`CertifiedKey::write_pem`].
    pub fn read_pem(cert: &Path, key: &Path) -> Result<Self, PkiError> {
        Ok(CertifiedKey {
            cert_pem: read_file(cert)?,
            key_pem: read_file(key)?,
        })
    }
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

fn read_file(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The validity window of a certificate being issued.
#[derive(Clone, Copy, Debug)]
pub struct Validity {
    /// Not valid before.
    pub not_before: OffsetDateTime,
    /// Not valid after.
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// From a minute ago (clock skew) for `duration`.
    pub fn for_duration(duration: Duration) -> Self {
        let now = OffsetDateTime::now_utc();
        Validity {
            not_before: now - time::Duration::minutes(1),
            not_after: now + duration,
        }
    }

    /// A window that ended `ago` before now (for testing that expired certificates are refused).
    pub fn expired(ago: Duration) -> Self {
        let now = OffsetDateTime::now_utc();
        Validity {
            not_before: now - ago - time::Duration::days(1),
            not_after: now - ago,
        }
    }
}

/// The cluster CA: signs server and client certificates.
///
/// ```
/// use cosi_api::auth::Role;
/// use cosi_api::pki::{CertificateAuthority, CERT_VALIDITY};
/// let ca = CertificateAuthority::generate("cosi").unwrap();
/// let server = ca.issue_server(&["127.0.0.1".parse().unwrap()], &["node-1"], CERT_VALIDITY).unwrap();
/// let admin = ca.issue_client("alice", Role::Admin, CERT_VALIDITY).unwrap();
/// assert!(server.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(admin.key_pem.contains("PRIVATE KEY"));
/// ```
pub struct CertificateAuthority {
    certified: CertifiedKey,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// A new self-signed CA with Organization `organization`, valid for [`CA_VALIDITY`].
    pub fn generate(organization: &str) -> Result<Self, PkiError> {
        Self::generate_with(organization, Validity::for_duration(CA_VALIDITY))
    }

    /// A new self-signed CA with the given validity.
    pub fn generate_with(organization: &str, validity: Validity) -> Result<Self, PkiError> {
        let key =
            KeyPair::generate_for(&PKCS_ED25519).map_err(cert_err("generating the CA key"))?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        let cert = params
            .self_signed(&key)
            .map_err(cert_err("signing the CA"))?;
        let certified = CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(CertificateAuthority {
            certified,
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its PEM certificate and key (e.g. read with [`CertifiedKey::read_pem`]).
    pub fn from_pem(certified: CertifiedKey) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(&certified.key_pem).map_err(cert_err("reading the CA key"))?;
        let issuer = Issuer::from_ca_cert_pem(&certified.cert_pem, key)
            .map_err(cert_err("reading the CA certificate"))?;
        Ok(CertificateAuthority { certified, issuer })
    }

    /// The CA's certificate and key.
    pub fn certified(&self) -> &CertifiedKey {
        &self.certified
    }

    /// The CA certificate, PEM (what servers and clients trust).
    pub fn cert_pem(&self) -> &str {
        &self.certified.cert_pem
    }

    /// A server certificate for a node reachable at `addresses` and `names`.
    pub fn issue_server(
        &self,
        addresses: &[IpAddr],
        names: &[&str],
        validity: Duration,
    ) -> Result<CertifiedKey, PkiError> {
        self.issue_server_with(addresses, names, Validity::for_duration(validity))
    }

    /// [`CertificateAuthority::issue_server`] with an explicit validity window.
    pub fn issue_server_with(
        &self,
        addresses: &[IpAddr],
        names: &[&str],
        validity: Validity,
    ) -> Result<CertifiedKey, PkiError> {
        if addresses.is_empty() && names.is_empty() {
            return Err(PkiError::Invalid(
                "a server certificate needs at least one address or name".into(),
            ));
        }
        let mut params = CertificateParams::default();
        for address in addresses {
            params.subject_alt_names.push(SanType::IpAddress(*address));
        }
        for name in names {
            let dns = (*name)
                .try_into()
                .map_err(cert_err(format!("server name {name:?}")))?;
            params.subject_alt_names.push(SanType::DnsName(dns));
        }
        let common_name = names
            .first()
            .map(|n| n.to_string())
            .unwrap_or_else(|| addresses[0].to_string());
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params, validity, "the server certificate")
    }

    /// A client certificate for `name` with role `role` (its Organization).
    pub fn issue_client(
        &self,
        name: &str,
        role: Role,
        validity: Duration,
    ) -> Result<CertifiedKey, PkiError> {
        self.issue_client_with(name, &[role.as_str()], Validity::for_duration(validity))
    }

    /// A client certificate with any Organization value (an unknown role is kept, and grants
    /// nothing) and an explicit validity window. rcgen writes one Organization per certificate,
    /// so `organizations` may hold at most one value.
    pub fn issue_client_with(
        &self,
        name: &str,
        organizations: &[&str],
        validity: Validity,
    ) -> Result<CertifiedKey, PkiError> {
        if organizations.len() > 1 {
            return Err(PkiError::Invalid(
                "one role per client certificate (rcgen writes a single Organization)".into(),
            ));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params, validity, "the client certificate")
    }

    fn sign(
        &self,
        mut params: CertificateParams,
        validity: Validity,
        what: &str,
    ) -> Result<CertifiedKey, PkiError> {
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate_for(&PKCS_ED25519)
            .map_err(cert_err(format!("generating the key of {what}")))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(cert_err(format!("signing {what}")))?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A self-signed server certificate for maintenance mode (no cluster CA yet): the client pins
/// its [`fingerprint`](crate::tls::fingerprint_of_pem) instead of verifying a chain.
pub fn self_signed_server(addresses: &[IpAddr], names: &[&str]) -> Result<CertifiedKey, PkiError> {
    let ca = CertificateAuthority::generate("maintenance")?;
    ca.issue_server(addresses, names, CERT_VALIDITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_round_trips_through_pem_files_and_still_signs() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("cosi").unwrap();
        let (cert, key) = ca.certified().write_pem(dir.path(), "ca").unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let again =
            CertificateAuthority::from_pem(CertifiedKey::read_pem(&cert, &key).unwrap()).unwrap();
        let client = again
            .issue_client("bob", Role::Reader, CERT_VALIDITY)
            .unwrap();
        let (_, parsed) = x509_parser::pem::parse_x509_pem(client.cert_pem.as_bytes()).unwrap();
        let parsed = parsed.parse_x509().unwrap();
        let orgs: Vec<_> = parsed
            .subject()
            .iter_organization()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        assert_eq!(orgs, ["os:reader"]);
        assert_eq!(
            parsed
                .issuer()
                .iter_organization()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "cosi"
        );
    }

    #[test]
    fn server_certificate_needs_an_address_or_name() {
        let ca = CertificateAuthority::generate("cosi").unwrap();
        let err = ca.issue_server(&[], &[], CERT_VALIDITY).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a server certificate needs at least one address or name"
        );
    }

    #[test]
    fn a_certificate_file_name_must_be_a_plain_name() {
        let ca = CertificateAuthority::generate("cosi").unwrap();
        let err = ca
            .certified()
            .write_pem(Path::new("/tmp"), "../x")
            .unwrap_err();
        assert!(err.to_string().contains("is not a file name"), "{err}");
    }
}
