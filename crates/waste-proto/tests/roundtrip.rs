//! Public-API checks of the generated code: one message of each service survives a prost
//! encode/decode round trip, `FILE_DESCRIPTOR_SET` describes both services, and every
//! service, method, message, field, oneof, enum and enum value carries a protocol comment.

use std::collections::HashSet;

use prost_types::FileDescriptorSet;
use waste_proto::prost::Message;
use waste_proto::{Bytes, FILE_DESCRIPTOR_SET, node, store};

#[test]
fn store_chunk_roundtrip() {
    let chunk = store::v1::ExpertChunk {
        layer: 3,
        expert: 255,
        offset: 1 << 20,
        total_len: 3 << 20,
        checksum: 0xdead_beef_0123_4567,
        data: Bytes::from(vec![0xa5; 4096]),
    };
    let encoded = chunk.encode_to_vec();
    let decoded = store::v1::ExpertChunk::decode(encoded.as_slice()).expect("decode ExpertChunk");
    assert_eq!(decoded, chunk);
}

#[test]
fn store_compute_request_roundtrip() {
    let activations: Vec<u8> = [0.5f32, -1.25, 3.0, 0.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let request = store::v1::ComputeExpertsRequest {
        layer: 7,
        n_tokens: 2,
        d_model: 2,
        activations: Bytes::from(activations),
        routes: vec![
            store::v1::Route {
                token: 0,
                expert: 1,
                weight: 0.75,
            },
            store::v1::Route {
                token: 1,
                expert: 4,
                weight: 0.25,
            },
        ],
        stream: u64::MAX - 7,
        expect_experts_index_sha256: String::new(),
    };
    let decoded = store::v1::ComputeExpertsRequest::decode(request.encode_to_vec().as_slice())
        .expect("decode ComputeExpertsRequest");
    assert_eq!(decoded, request);
}

#[test]
fn node_generate_roundtrip() {
    let request = node::v1::GenerateRequest {
        input: Some(node::v1::generate_request::Input::Messages(
            node::v1::Chat {
                messages: vec![node::v1::ChatMessage {
                    role: "user".into(),
                    content: "Hello, world".into(),
                }],
                continue_final_message: false,
                template_kwargs_json: r#"{"enable_thinking": false}"#.into(),
            },
        )),
        sampling: Some(node::v1::SamplingOptions {
            max_tokens: 16,
            temperature: Some(0.0),
            seed: Some(42),
            stop: vec!["\n\n".into()],
            ..Default::default()
        }),
        session_id: Some("s-1".into()),
        logprobs: true,
    };
    let decoded = node::v1::GenerateRequest::decode(request.encode_to_vec().as_slice())
        .expect("decode GenerateRequest");
    assert_eq!(decoded, request);

    let stats = node::v1::GenerateResponse {
        event: Some(node::v1::generate_response::Event::Stats(node::v1::Stats {
            finish_reason: node::v1::FinishReason::Length.into(),
            prompt_tokens: 9,
            generated_tokens: 16,
            retention: 0.5,
            ..Default::default()
        })),
    };
    let decoded = node::v1::GenerateResponse::decode(stats.encode_to_vec().as_slice())
        .expect("decode GenerateResponse");
    assert_eq!(decoded, stats);
}

#[test]
fn descriptor_set_has_both_services() {
    let fds = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("decode descriptor set");
    let mut services = Vec::new();
    for file in &fds.file {
        for service in &file.service {
            let methods: Vec<&str> = service
                .method
                .iter()
                .map(prost_types::MethodDescriptorProto::name)
                .collect();
            services.push((format!("{}.{}", file.package(), service.name()), methods));
        }
    }
    services.sort();
    assert_eq!(
        services,
        vec![
            (
                "waste.node.v1.Node".to_owned(),
                vec!["Generate", "Tokenize", "Info"]
            ),
            (
                "waste.store.v1.ExpertStore".to_owned(),
                vec!["Info", "FetchExperts", "ComputeExperts", "PrefetchExperts"]
            ),
        ]
    );
}

#[test]
fn every_element_has_a_comment() {
    let fds = FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("decode descriptor set");
    let mut missing = Vec::new();
    for file in &fds.file {
        let commented: HashSet<&[i32]> = file
            .source_code_info
            .as_ref()
            .expect("descriptor set keeps source info")
            .location
            .iter()
            .filter(|l| {
                l.leading_comments
                    .as_deref()
                    .is_some_and(|c| !c.trim().is_empty())
            })
            .map(|l| l.path.as_slice())
            .collect();
        // Paths per descriptor.proto: FileDescriptorProto.message_type = 4, enum_type = 5,
        // service = 6; DescriptorProto.field = 2, nested_type = 3, enum_type = 4,
        // oneof_decl = 8; EnumDescriptorProto.value = 2; ServiceDescriptorProto.method = 2.
        let mut wanted: Vec<(Vec<i32>, String)> = Vec::new();
        for (i, service) in (0i32..).zip(&file.service) {
            wanted.push((vec![6, i], service.name().to_owned()));
            for (j, method) in (0i32..).zip(&service.method) {
                wanted.push((
                    vec![6, i, 2, j],
                    format!("{}.{}", service.name(), method.name()),
                ));
            }
        }
        for (i, message) in (0i32..).zip(&file.message_type) {
            collect_message(message, &[4, i], &mut wanted);
        }
        for (i, enumeration) in (0i32..).zip(&file.enum_type) {
            collect_enum(enumeration, &[5, i], &mut wanted);
        }
        for (path, name) in wanted {
            if !commented.contains(path.as_slice()) {
                missing.push(format!("{}: {name}", file.name()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "elements without a leading comment: {missing:#?}"
    );
}

fn collect_message(
    message: &prost_types::DescriptorProto,
    path: &[i32],
    out: &mut Vec<(Vec<i32>, String)>,
) {
    out.push((path.to_vec(), message.name().to_owned()));
    for (j, field) in (0i32..).zip(&message.field) {
        out.push((
            child(path, 2, j),
            format!("{}.{}", message.name(), field.name()),
        ));
    }
    for (j, oneof) in (0i32..).zip(&message.oneof_decl) {
        // proto3 `optional` fields live in synthetic oneofs named `_<field>`.
        if !oneof.name().starts_with('_') {
            out.push((
                child(path, 8, j),
                format!("{}.{}", message.name(), oneof.name()),
            ));
        }
    }
    for (j, nested) in (0i32..).zip(&message.nested_type) {
        collect_message(nested, &child(path, 3, j), out);
    }
    for (j, enumeration) in (0i32..).zip(&message.enum_type) {
        collect_enum(enumeration, &child(path, 4, j), out);
    }
}

fn collect_enum(
    enumeration: &prost_types::EnumDescriptorProto,
    path: &[i32],
    out: &mut Vec<(Vec<i32>, String)>,
) {
    out.push((path.to_vec(), enumeration.name().to_owned()));
    for (j, value) in (0i32..).zip(&enumeration.value) {
        out.push((child(path, 2, j), value.name().to_owned()));
    }
}

fn child(path: &[i32], kind: i32, index: i32) -> Vec<i32> {
    let mut p = path.to_vec();
    p.extend([kind, index]);
    p
}
