//! With a certificate and key configured the store speaks TLS only: a
//! client trusting the certificate is served, a plaintext client is not.

mod common;

use waste_proto::store::v1::InfoRequest;
use waste_proto::store::v1::expert_store_client::ExpertStoreClient;
use waste_proto::transport::{Certificate, ClientTlsConfig, Endpoint};
use waste_store::config::TlsConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_a_client_that_trusts_the_certificate() {
    let (tmp, mut cfg) = common::tiny();
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert_pem, key_pem) = (key.cert.pem(), key.signing_key.serialize_pem());
    let (cert, keyf) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    fs_err::write(&cert, &cert_pem).unwrap();
    fs_err::write(&keyf, &key_pem).unwrap();
    cfg.tls = Some(TlsConfig { cert, key: keyf });
    let server = common::start(cfg).await;

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cert_pem))
        .domain_name("localhost");
    let url = format!("https://localhost:{}", server.addr.port());
    let channel = Endpoint::from_shared(url)
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let info = ExpertStoreClient::new(channel)
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.layers.len(), 2);
    assert!(
        !info.bulk_fetch,
        "the bulk channel is plain text: not beside TLS"
    );

    let plain = Endpoint::from_shared(server.url()).unwrap().connect().await;
    if let Ok(ch) = plain {
        assert!(
            ExpertStoreClient::new(ch)
                .info(InfoRequest {})
                .await
                .is_err()
        );
    }
    server.stop().await;
}
