//! `cargo bench -p waste-bench --bench kernels [-- SHAPE...]`: the same
//! measurement as `waste bench kernels` (waste_bench::kernels), without the
//! CLI: per-core GB/s of packed weights per ISA beside one core's plain read.
//! Shapes are ROWSxCOLS; the default is 2048x7168 and 768x2048. Never run in CI.

use waste_bench::kernels::{Config, Reader, run};
use waste_kernels::Format;

fn main() {
    let mut shapes: Vec<(usize, usize)> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            let (r, c) = a.split_once('x')?;
            Some((r.parse().ok()?, c.parse().ok()?))
        })
        .collect();
    if shapes.is_empty() {
        shapes = vec![(2048, 7168), (768, 2048)];
    }
    let formats = match std::env::var("FORMATS") {
        Ok(f) => f.split(',').filter_map(|s| s.parse().ok()).collect(),
        Err(_) => vec![Format::Q3],
    };
    let cfg = Config {
        shapes,
        formats,
        n: 1,
        stream_bytes: 128 << 20,
        repeats: 5,
        row_major: false,
    };
    let figs = run(&cfg, |_| {});
    for f in &figs {
        let read = figs
            .iter()
            .find(|g| {
                (g.format, g.rows, g.cols, g.streaming, g.reader)
                    == (f.format, f.rows, f.cols, f.streaming, Reader::MemRead)
            })
            .map_or(f64::NAN, |g| g.gbps);
        let mode = if f.streaming { "streaming" } else { "resident" };
        println!(
            "{} {}x{} {mode:9} {:6} {:6.2} GB/s  {:5.2} x read",
            f.format,
            f.rows,
            f.cols,
            f.reader.name(),
            f.gbps,
            f.gbps / read
        );
    }
}
