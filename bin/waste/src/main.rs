//! The `waste` command line: one thin binary over the library crates. Each
//! subcommand parses its flags in `cmd/<name>.rs` and calls a library.

#![forbid(unsafe_code)]

mod chat_backend;
mod cmd;
mod daemon;
mod exit;
mod load;
mod model_check;
mod signal;
mod store_experts;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};

/// Run trillion-parameter Mixture-of-Experts models from NVMe.
#[derive(Debug, Parser)]
#[command(name = "waste", version, about, long_about = None)]
struct Cli {
    /// Log lines on stderr as text or as JSON objects (one per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WASTE_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log progress (info) on stderr; the interactive commands (run, chat,
    /// generate) log only warnings unless given this. `RUST_LOG` overrides both.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One full-sequence forward pass; writes float32 `logits` [n_tokens, vocab] to a safetensors file.
    Forward(cmd::forward::Args),
    /// Generate text in-process and stream it to stdout.
    Run(cmd::run::Args),
    /// Quantize every 2-D tensor of a safetensors file; write the dequantized f32 values, print sizes as JSON.
    Quantize(cmd::quantize::Args),
    /// The compute node daemon: backbone in RAM, experts from local files or a store; serves Generate.
    Node(cmd::node::Args),
    /// Generate through a running node; streams the answer and prints statistics.
    Generate(cmd::generate::Args),
    /// Chat interactively with a running node, or in-process on a store.
    Chat(cmd::chat::Args),
    /// The expert store daemon: serves a store's experts/ over gRPC from NVMe (fetch or compute-at-store).
    Store(cmd::store::Args),
    /// Write a benchmark store of a family's real expert sizes with random contents.
    SynthStore(cmd::synth_store::Args),
    /// Convert a release (Hugging Face folder or GGUF) into a store: backbone/ + experts/ + manifest.json.
    Convert(cmd::convert::Args),
    /// A Hugging Face checkpoint shaped like a release (real names, dtypes, expert shapes) with random weights.
    Synth(cmd::synth::Args),
    /// What this machine means for a model: CPU features and kernels, cores, RAM and cgroup limit, free disk, the disk's O_DIRECT read rate, and the plan's decode bound at that rate.
    Doctor(cmd::doctor::Args),
    /// The node's RAM plan for a store or a release's shape (`--like`): backbone by class, state, expert cache, fits or not.
    Plan(cmd::plan::Args),
    /// What a store, GGUF file or HF folder holds: params, bytes and bits per weight by tensor class and type, the kernels; `--verify` checks every record of a store.
    Inspect(cmd::inspect::Args),
    /// Perplexity of a model (store, HF folder or GGUF) on a text file.
    Perplexity(cmd::quality::PerplexityArgs),
    /// KL divergence and top-1 agreement of a model against a reference on a text file.
    Kl(cmd::quality::KlArgs),
    /// Benchmarks: `kernels` (per-core GB/s), `quant` (error per bit on real matrices), `dense` (backbone products), `store` (served vs raw O_DIRECT), `e2e` (decode against the disk/compute bound), `stops` (stop-string matching).
    Bench(cmd::bench::Args),
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version exit 0; a bad command line exits EX_USAGE.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(exit::USAGE);
        }
    };
    let interactive = matches!(
        cli.command,
        Command::Run(_) | Command::Chat(_) | Command::Generate(_)
    );
    let level = if interactive && !cli.verbose {
        "warn"
    } else {
        "info"
    };
    init_logging(cli.log_format, level);
    let result = match cli.command {
        Command::Forward(args) => cmd::forward::run(&args),
        Command::Run(args) => cmd::run::run(&args),
        Command::Quantize(args) => cmd::quantize::run(&args),
        Command::Bench(args) => cmd::bench::run(&args),
        Command::Convert(args) => cmd::convert::run(&args),
        Command::Synth(args) => cmd::synth::run(&args),
        Command::Inspect(args) => cmd::inspect::run(&args),
        Command::Plan(args) => cmd::plan::run(&args),
        Command::Doctor(args) => cmd::doctor::run(&args),
        Command::Perplexity(args) => cmd::quality::perplexity(&args),
        Command::Kl(args) => cmd::quality::kl(&args),
        Command::Node(args) => cmd::node::run(&args),
        Command::Generate(args) => cmd::generate::run(&args),
        Command::Chat(args) => cmd::chat::run(&args),
        Command::Store(args) => cmd::store::run(&args),
        Command::SynthStore(args) => cmd::synth_store::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::code(&e)
        }
    }
}

/// Logs go to stderr (stdout carries results), filtered by `RUST_LOG`
/// (default `level`).
fn init_logging(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}
