//! With a token configured, every ExpertStore call needs
//! `authorization: Bearer <token>` (UNAUTHENTICATED otherwise); health stays
//! open for probes.

mod common;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use waste_proto::store::v1::InfoRequest;
use waste_proto::store::v1::expert_store_client::ExpertStoreClient;
use waste_proto::transport::Endpoint;
use waste_proto::{Code, Request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_required_when_set() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.token = Some("s3cret".into());
    let server = common::start(cfg).await;
    let channel = Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = ExpertStoreClient::new(channel.clone());

    let status = client.info(InfoRequest {}).await.unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    for bad in ["Bearer nope", "Bearer s3cret2", "s3cret", "Bearer s3cre"] {
        let mut req = Request::new(InfoRequest {});
        req.metadata_mut()
            .insert("authorization", bad.parse().unwrap());
        assert_eq!(
            client.info(req).await.unwrap_err().code(),
            Code::Unauthenticated,
            "{bad}"
        );
    }
    let mut req = Request::new(InfoRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    client.info(req).await.unwrap();

    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "waste.store.v1.ExpertStore".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");
    server.stop().await;
}
