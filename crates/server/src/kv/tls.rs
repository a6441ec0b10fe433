//! TLS for `flashtier kv -Z`, from memcached's `-o ssl_*` options, with rustls (ring):
//! `ssl_chain_cert` (PEM chain; may hold the key), `ssl_key` (PEM or, with
//! `ssl_keyformat=2`, DER), `ssl_ca_cert` + `ssl_verify_mode` (1 request a client
//! certificate, 2/3 require one), `ssl_min_version` (TLS 1.2 or 1.3), `ssl_session_cache`
//! (a server-side session cache of 1024 entries; off by default, as in memcached).
use std::sync::Arc;

use anyhow::Context as _;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::options::TlsOptions;
use crate::cli::Usage;

/// Build the acceptor; every problem with the files is a usage error naming the file.
pub fn acceptor(t: &TlsOptions) -> anyhow::Result<TlsAcceptor> {
    let Some(chain_path) = &t.chain_cert else {
        crate::usage!("-Z needs -o ssl_chain_cert=FILE");
    };
    let bad = |what: &str, p: &std::path::Path| Usage(format!("{what} {}", p.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .with_context(|| {
            bad(
                "-o ssl_chain_cert: cannot read certificates from",
                chain_path,
            )
        })?;
    if certs.is_empty() {
        crate::usage!(
            "-o ssl_chain_cert: no certificate in {}",
            chain_path.display()
        );
    }
    let key_path = t.key.as_ref().unwrap_or(chain_path);
    let key: PrivateKeyDer<'static> = if t.key_format == 2 {
        let bytes =
            std::fs::read(key_path).with_context(|| bad("-o ssl_key: cannot read", key_path))?;
        PrivateKeyDer::try_from(bytes).map_err(|e| {
            Usage(format!(
                "-o ssl_key {}: not a DER key: {e}",
                key_path.display()
            ))
        })?
    } else {
        PrivateKeyDer::from_pem_file(key_path)
            .with_context(|| bad("-o ssl_key: no PEM private key in", key_path))?
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if t.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .context("TLS versions")?;
    let builder = if t.verify_mode == 0 {
        builder.with_no_client_auth()
    } else {
        let Some(ca) = &t.ca_cert else {
            crate::usage!("-o ssl_verify_mode needs -o ssl_ca_cert=FILE");
        };
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca)
            .with_context(|| bad("-o ssl_ca_cert: cannot read", ca))?
        {
            let c = c.with_context(|| bad("-o ssl_ca_cert: bad certificate in", ca))?;
            roots
                .add(c)
                .with_context(|| bad("-o ssl_ca_cert: unusable certificate in", ca))?;
        }
        let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let v = if t.verify_mode == 1 {
            v.allow_unauthenticated()
        } else {
            v
        };
        builder.with_client_cert_verifier(v.build().context("client certificate verifier")?)
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| Usage(format!("-o ssl_chain_cert/ssl_key: {e}")))?;
    config.session_storage = if t.session_cache {
        ServerSessionMemoryCache::new(1024)
    } else {
        Arc::new(NoServerSessionStorage {})
    };
    Ok(TlsAcceptor::from(Arc::new(config)))
}
