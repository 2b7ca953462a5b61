//! One module per subcommand: flag parsing and a call into a library.

pub mod bench;
pub mod bench_dense;
pub mod bench_e2e;
pub mod bench_stops;
pub mod bench_store;
pub mod chat;
pub mod convert;
pub mod doctor;
pub mod forward;
pub mod generate;
pub mod inspect;
pub mod node;
pub mod plan;
pub mod prompt;
pub mod quality;
pub mod quantize;
pub mod run;
pub mod sampling;
pub mod store;
pub mod synth;
pub mod synth_store;
