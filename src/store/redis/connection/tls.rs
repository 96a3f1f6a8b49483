//! TLS to Redis (`rediss://`) with a CA of the operator's own and, for mutual TLS, a client
//! certificate: `--redis-ca-file`, `--redis-client-cert`, `--redis-client-key` (PEM files).

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

use super::super::error::ConnectError;
use crate::base::pem::{certs, private_key};

/// A rustls client config trusting `ca` (else the system's roots), presenting `client`
/// (certificate, key) when given.
pub fn config(
    ca: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<ClientConfig, ConnectError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in certs(path)? {
                roots.add(cert).map_err(|e| ConnectError::Ca {
                    path: path.to_path_buf(),
                    why: e.to_string(),
                })?;
            }
        }
        None => roots = native_roots(),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = certs(cert)?;
            let key = private_key(key)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ConnectError::ClientCert {
                    path: cert.to_path_buf(),
                    why: e.to_string(),
                })
        }
    }
}

/// The system's roots, which fred itself uses for a plain `rediss://` URL.
fn native_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
}
