//! `waste convert` reports how far re-quantized experts are from the
//! source's exact values (Kimi K3's MXFP4 experts re-quantized to `q3`),
//! and the figure equals one recomputed from the written store: every
//! record read back, dequantized and compared with the source decoded
//! exactly. Experts kept native report no error: they are the release's bytes.

use std::path::Path;

use anyhow::Result;
use waste_convert::convert::{ExpertsMode, Options, Summary};
use waste_format::{Checkpoint, ExpertsDir};
use waste_kernels::PackedExpert;
use waste_model::ModelConfig;

use waste_e2e::fixture;
use waste_e2e::harness::convert_fixture;

fn convert_to(dir: &str, experts: ExpertsMode, out: &Path) -> Result<Summary> {
    let options = Options {
        experts,
        ..Options::default()
    };
    convert_fixture(dir, &options, out)
}

#[test]
fn the_reported_q3_error_is_the_error_of_the_written_records() -> Result<()> {
    let dir = "kimi_k3_tiny";
    let native = tempfile::tempdir()?;
    let s = convert_to(dir, ExpertsMode::Native, native.path())?;
    assert_eq!(s.expert_error.relative(), None, "native experts are exact");

    let q3 = tempfile::tempdir()?;
    let s = convert_to(dir, "q3".parse().map_err(anyhow::Error::msg)?, q3.path())?;
    let reported = s.expert_error.relative().expect("q3 re-quantizes");

    let ckpt = Checkpoint::open(fixture(dir))?;
    let cfg = ModelConfig::from_json(ckpt.config_json())?;
    let moe = cfg.moe.as_ref().expect("K3 has experts");
    let store = ExpertsDir::open(&q3.path().join("experts"))?;
    let (mut err, mut norm) = (0f64, 0f64);
    let mut buf = Vec::new();
    for l in &store.index().layers {
        for e in 0..l.n_experts {
            store.read_record(l.layer, e, &mut buf)?;
            let rec = PackedExpert::parse(buf.as_slice())?;
            let names = moe.names.expert(&cfg.names, l.layer as usize, e);
            for (m, name) in [rec.gate(), rec.up(), rec.down()].iter().zip(&names) {
                let want = ckpt.load(name)?.into_f32();
                for (a, b) in want.iter().zip(m.dequantize()) {
                    err += (f64::from(*a) - f64::from(b)).powi(2);
                    norm += f64::from(*a).powi(2);
                }
            }
        }
    }
    let recomputed = (err / norm).sqrt();
    assert!(
        (reported - recomputed).abs() <= 1e-6 + 1e-4 * recomputed,
        "reported {reported}, the records give {recomputed}"
    );
    assert!(
        reported > 0.01 && reported < 0.3,
        "a 3-bit error of {reported}"
    );
    Ok(())
}
