//! ComputeExperts equals a plain float FFN on the dequantized weights, for
//! every expert format of the kernels (quantized, native, and GGUF blocks
//! of the 32-wide types whose scale leads the block) and both
//! activations (SwiGLU, SiTU):
//! per token, the weighted sum over its routes of
//! `down · act(gate · x, up · x)`, computed here in f64 from
//! `PackedMatrix::dequantize` of the stored record.
//!
//! Tolerance: the quantized formats' kernels quantize their inputs (x, then the GLU hidden
//! row) to int8 per 32 values with an absmax scale, an error of at most
//! absmax/254 per value: for these inputs about 0.4 % RMS per stage, so
//! about 1 % on the output. 3 % relative L2 per token leaves margin while
//! still catching a wrong expert, weight, row or activation (>= 30 %). The
//! native formats multiply in f32 and land far inside it.

mod common;

use waste_format::ExpertsDir;
use waste_format::experts::ExpertActivation;
use waste_kernels::{Activation, Format, PackedExpert};

const TOL: f64 = 0.03;

fn reference(
    dir: &ExpertsDir,
    layer: u32,
    act: Activation,
    x: &[f32],
    routes: &[(u32, u32, f32)],
    n: usize,
) -> Vec<f64> {
    let (d, f) = (common::D_MODEL, common::D_FF);
    let mut out = vec![0f64; n * d];
    let mut buf = Vec::new();
    for &(t, e, w) in routes {
        dir.read_record(layer, e, &mut buf).unwrap();
        let p = PackedExpert::parse(&buf[..]).unwrap();
        let (g, u, dn) = (
            p.gate().dequantize(),
            p.up().dequantize(),
            p.down().dequantize(),
        );
        let xt = &x[t as usize * d..][..d];
        let dot = |m: &[f32], r: usize, v: &[f64]| -> f64 {
            m[r * v.len()..][..v.len()]
                .iter()
                .zip(v)
                .map(|(a, b)| f64::from(*a) * b)
                .sum()
        };
        let xv: Vec<f64> = xt.iter().map(|&v| f64::from(v)).collect();
        let h: Vec<f64> = (0..f)
            .map(|r| f64::from(act.glu(dot(&g, r, &xv) as f32, dot(&u, r, &xv) as f32)))
            .collect();
        for r in 0..d {
            out[t as usize * d + r] += f64::from(w) * dot(&dn, r, &h);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_equals_a_plain_float_ffn_for_every_format() {
    let activations = [
        ExpertActivation::Silu,
        ExpertActivation::Situ {
            beta: 4.0,
            linear_beta: Some(25.0),
        },
    ];
    let d = common::D_MODEL;
    let n = 4;
    // Token 3 has no route: its row must be zero.
    let routes = [
        (0u32, 1u32, 0.7f32),
        (0, 4, 0.3),
        (1, 0, 1.2),
        (2, 4, -0.5),
        (2, 1, 0.25),
        (2, 5, 0.1),
    ];
    let ggml = common::GGML_D_FIRST.map(Format::Ggml);
    for format in Format::ALL.into_iter().chain(Format::NATIVE).chain(ggml) {
        for activation in activations {
            let (_tmp, cfg) = common::tiny_with([format; 3], activation);
            let dir = ExpertsDir::open(&cfg.experts).unwrap();
            let server = common::start(cfg).await;
            let mut client = server.client().await;
            let x = common::values(7, n * d, 1.5);
            let req = common::compute_request(3, n as u32, d as u32, &x, &routes);
            let resp = client.compute_experts(req).await.unwrap().into_inner();
            assert_eq!(
                (resp.n_tokens, resp.d_model, resp.experts_used),
                (n as u32, d as u32, 4)
            );
            let rec_len = dir.locate(3, 0).unwrap().len as u64;
            assert_eq!(resp.disk_bytes_read, 4 * rec_len);
            let got: Vec<f32> = resp
                .output
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let act = match activation {
                ExpertActivation::Silu => Activation::Silu,
                ExpertActivation::Situ { beta, linear_beta } => {
                    Activation::Situ { beta, linear_beta }
                }
            };
            let want = reference(&dir, 3, act, &x, &routes, n);
            for t in 0..n {
                let (g, w) = (&got[t * d..][..d], &want[t * d..][..d]);
                let err: f64 = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (f64::from(*a) - b).powi(2))
                    .sum::<f64>()
                    .sqrt();
                let norm: f64 = w.iter().map(|b| b * b).sum::<f64>().sqrt();
                if t == 3 {
                    assert!(g.iter().all(|v| *v == 0.0), "unrouted token");
                } else {
                    assert!(
                        err <= TOL * norm,
                        "{format:?} {activation:?} token {t}: {err} vs norm {norm}"
                    );
                }
            }
            server.stop().await;
        }
    }
}
