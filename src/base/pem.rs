//! PEM files for TLS: the gRPC listener's certificate and key (and client CA), and Redis's CA
//! and client certificate. Errors name the file.

use std::path::{Path, PathBuf};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A PEM file that could not be used; it names the file.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("{}: no PEM certificate in it", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no private key: {source}", path.display())]
    NoKey {
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
}

/// Every certificate in `path` (at least one).
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let unreadable = |source| PemError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<_, _>>()
        .map_err(unreadable)?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The private key in `path`.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| PemError::NoKey {
        path: path.to_path_buf(),
        source,
    })
}
