//! Every malformed request gets INVALID_ARGUMENT before any work (and an
//! oversized message OUT_OF_RANGE from the gRPC library), and the store
//! answers normally afterwards.

mod common;

use waste_proto::Code;
use waste_proto::store::v1::{ComputeExpertsRequest, InfoRequest};

fn compute(
    layer: u32,
    n: u32,
    d: u32,
    floats: usize,
    routes: &[(u32, u32, f32)],
) -> ComputeExpertsRequest {
    common::compute_request(layer, n, d, &vec![0.0; floats], routes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_class_is_invalid_argument() {
    let (_tmp, mut cfg) = common::tiny();
    cfg.limits.max_fetch_experts = 4;
    cfg.limits.max_compute_tokens = 3;
    cfg.limits.max_compute_routes = 5;
    cfg.limits.max_message_bytes = 64 << 10;
    let server = common::start(cfg).await;
    let mut client = server.client().await;
    let d = common::D_MODEL as u32;
    let dm = common::D_MODEL;

    let fetches: [(&str, Vec<(u32, u32)>); 5] = [
        ("empty batch", vec![]),
        (
            "oversized batch",
            vec![(1, 0), (1, 1), (1, 2), (1, 3), (1, 4)],
        ),
        ("duplicate id", vec![(1, 0), (3, 1), (1, 0)]),
        ("layer without experts", vec![(2, 0)]),
        ("expert out of range", vec![(3, 6)]),
    ];
    for (what, ids) in fetches {
        let status = match client
            .fetch_experts(common::fetch_request(&ids, false))
            .await
        {
            Err(s) => s,
            Ok(r) => r.into_inner().message().await.expect_err(what),
        };
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    }

    let computes = [
        ("unknown layer", compute(0, 1, d, dm, &[(0, 0, 1.0)])),
        ("zero tokens", compute(1, 0, d, 0, &[])),
        ("too many tokens", compute(1, 4, d, 4 * dm, &[(0, 0, 1.0)])),
        (
            "wrong d_model",
            compute(1, 1, d + 1, dm + 1, &[(0, 0, 1.0)]),
        ),
        (
            "short activations",
            compute(1, 2, d, 2 * dm - 1, &[(0, 0, 1.0)]),
        ),
        (
            "too many routes",
            compute(
                1,
                1,
                d,
                dm,
                &[
                    (0, 0, 1.0),
                    (0, 1, 1.0),
                    (0, 2, 1.0),
                    (0, 3, 1.0),
                    (0, 4, 1.0),
                    (0, 5, 1.0),
                ],
            ),
        ),
        (
            "token out of range",
            compute(1, 2, d, 2 * dm, &[(2, 0, 1.0)]),
        ),
        ("expert out of range", compute(1, 1, d, dm, &[(0, 6, 1.0)])),
        ("NaN weight", compute(1, 1, d, dm, &[(0, 1, f32::NAN)])),
        (
            "infinite weight",
            compute(1, 1, d, dm, &[(0, 1, f32::INFINITY)]),
        ),
        (
            "duplicate route",
            compute(1, 1, d, dm, &[(0, 1, 0.5), (0, 1, 0.5)]),
        ),
    ];
    for (what, req) in computes {
        let status = client.compute_experts(req).await.expect_err(what);
        assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    }

    // Over the decode limit: refused by the gRPC layer, not decoded.
    let huge = compute(1, 1, d, 20_000, &[]);
    let status = client.compute_experts(huge).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");

    // Still serving.
    client.info(InfoRequest {}).await.unwrap();
    let ok = compute(1, 1, d, dm, &[(0, 2, 0.5)]);
    assert_eq!(
        client
            .compute_experts(ok)
            .await
            .unwrap()
            .into_inner()
            .experts_used,
        1
    );
    server.stop().await;
}
