//! The store answers grpc.health.v1 (SERVING, and NOT_SERVING for an
//! unknown service) and server reflection in both versions (v1 and
//! v1alpha), listing the ExpertStore service and resolving its file.

mod common;

use tokio_stream::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::{v1, v1alpha};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_both_reflection_versions_answer() {
    let (_tmp, cfg) = common::tiny();
    let server = common::start(cfg).await;
    let channel = server.channel().await;

    let mut health = HealthClient::new(channel.clone());
    let check = |service: &str| HealthCheckRequest {
        service: service.into(),
    };
    let s = health
        .check(check("waste.store.v1.ExpertStore"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.status, 1, "SERVING");
    assert!(health.check(check("no.such.Service")).await.is_err());

    use v1::server_reflection_client::ServerReflectionClient as V1;
    use v1::server_reflection_request::MessageRequest as Req1;
    use v1::server_reflection_response::MessageResponse as Resp1;
    let reqs = vec![
        v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(Req1::ListServices(String::new())),
        },
        v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(Req1::FileContainingSymbol(
                "waste.store.v1.ExpertStore".into(),
            )),
        },
    ];
    let mut out = V1::new(channel.clone())
        .server_reflection_info(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let Some(Resp1::ListServicesResponse(list)) =
        out.next().await.unwrap().unwrap().message_response
    else {
        panic!("no service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"waste.store.v1.ExpertStore".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"grpc.health.v1.Health".to_string()),
        "{names:?}"
    );
    let Some(Resp1::FileDescriptorResponse(files)) =
        out.next().await.unwrap().unwrap().message_response
    else {
        panic!("no file for the service");
    };
    assert!(!files.file_descriptor_proto.is_empty());

    use v1alpha::server_reflection_client::ServerReflectionClient as V1a;
    use v1alpha::server_reflection_request::MessageRequest as Req1a;
    use v1alpha::server_reflection_response::MessageResponse as Resp1a;
    let reqs = vec![v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(Req1a::ListServices(String::new())),
    }];
    let mut out = V1a::new(channel)
        .server_reflection_info(tokio_stream::iter(reqs))
        .await
        .unwrap()
        .into_inner();
    let Some(Resp1a::ListServicesResponse(list)) =
        out.next().await.unwrap().unwrap().message_response
    else {
        panic!("no v1alpha service list");
    };
    assert!(
        list.service
            .iter()
            .any(|s| s.name == "waste.store.v1.ExpertStore")
    );
    server.stop().await;
}
