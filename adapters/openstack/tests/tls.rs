//! The adapter's TLS (rustls on ring: the platform's roots plus the
//! configured `caCertificate`) against a cloud served over HTTPS: the
//! OpenStack simulator behind a TLS front whose certificate a test CA signed,
//! Keystone's catalog pointing at that front, so every call goes over TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use server_core::port::{CloudError, CloudPort, Credentials, IdentityContext, ListScope};
use server_openstack::{OpenStackCloud, OpenStackConfig};
use server_sim_openstack::{OpenStackSim, OpenStackSimConfig, ServeHandle};
use server_simcloud::{CloudConfig, SimCloud};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const PROJECT: &str = "project-1";

/// A CA and the front's certificate (for 127.0.0.1) it signed, as PEM.
struct Pki {
    ca_pem: String,
    serving_pem: String,
    serving_key_pem: String,
}

fn pki() -> Result<Pki, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let serving = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &ca)?;
    Ok(Pki { ca_pem: ca.pem(), serving_pem: serving.pem(), serving_key_pem: key.serialize_pem() })
}

/// The simulator, served behind a TLS front at `https://127.0.0.1:<port>`.
struct TlsCloud {
    sim: OpenStackSim,
    _served: ServeHandle,
    auth_url: String,
    ca_pem: String,
}

async fn tls_cloud() -> Result<TlsCloud, Box<dyn std::error::Error>> {
    let pki = pki()?;
    let front = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("https://{}", front.local_addr()?);
    let config = OpenStackSimConfig { public_url: Some(base.clone()), ..OpenStackSimConfig::default() };
    let sim = OpenStackSim::with_config(SimCloud::new(CloudConfig::reliable(7)), config);
    let served = sim.serve("127.0.0.1:0".parse()?).await?;
    let upstream: SocketAddr = served.addr();
    let certificates = CertificateDer::pem_slice_iter(pki.serving_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certificates, key)?;
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    tokio::spawn(async move {
        while let Ok((client, _)) = front.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut client), Ok(mut server)) =
                    (acceptor.accept(client).await, TcpStream::connect(upstream).await)
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    Ok(TlsCloud { sim, _served: served, auth_url: format!("{base}/identity/v3"), ca_pem: pki.ca_pem })
}

fn identity() -> IdentityContext {
    IdentityContext {
        region_id: "region-a".into(),
        identity_id: "identity-1".into(),
        project_id: PROJECT.into(),
        credentials: Credentials::Password { user_id: "user-1".into(), password: "s3cret".into() },
        ssh_key_name: None,
    }
}

fn cloud(auth_url: &str, ca_pem: Option<&str>) -> Result<OpenStackCloud, Box<dyn std::error::Error>> {
    let mut config = OpenStackConfig::new(auth_url.to_owned(), "RegionOne");
    config.request_timeout = Duration::from_secs(5);
    config.ca_certificate = ca_pem.map(str::to_owned);
    Ok(OpenStackCloud::new(config)?)
}

#[tokio::test]
async fn a_cloud_whose_certificate_the_configured_ca_signed_is_called_over_tls() -> TestResult {
    let front = tls_cloud().await?;
    let cloud = cloud(&front.auth_url, Some(&front.ca_pem))?;
    let listed = cloud.list(&identity(), ListScope::Complete).await;
    assert!(listed.is_ok(), "{:?}", listed.err());
    // Keystone and Nova were both reached, through the front.
    assert_eq!(front.sim.counters().token_requests, 1);
    Ok(())
}

#[tokio::test]
async fn a_cloud_whose_certificate_no_trusted_ca_signed_is_refused_saying_what_to_configure() -> TestResult {
    let front = tls_cloud().await?;
    let cloud = cloud(&front.auth_url, None)?;
    let error = cloud.list(&identity(), ListScope::Complete).await.err();
    assert!(
        matches!(&error, Some(CloudError::Unreachable { message })
            if message.contains("TLS certificate verification failed") && message.contains("caCertificate")),
        "{error:?}"
    );
    // Nothing reached Keystone: the handshake failed before any request.
    assert_eq!(front.sim.counters().token_requests, 0);
    Ok(())
}
