//! Compiles every `.proto` under `../../proto` into `OUT_DIR` with protox (pure Rust: no system
//! `protoc`) and `tonic_prost_build::compile_fds`, and writes the encoded `FileDescriptorSet`
//! (with source info, so comments reach reflection clients) to `OUT_DIR/waste_descriptor.bin`.
//! Owns code generation only; the `.proto` files are the specification.

use std::{
    env,
    path::{Path, PathBuf},
    process::ExitCode,
};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("waste-proto build failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    println!("cargo:rerun-if-changed={}", proto_root.display());

    let mut files = Vec::new();
    collect_protos(&proto_root, &proto_root, &mut files)?;
    files.sort();
    if files.is_empty() {
        return Err(format!("no .proto files under {}", proto_root.display()).into());
    }

    let mut compiler = protox::Compiler::new([&proto_root])?;
    compiler.include_source_info(true).include_imports(true);
    compiler.open_files(&files)?;

    let descriptor_path = out_dir.join("waste_descriptor.bin");
    std::fs::write(&descriptor_path, compiler.encode_file_descriptor_set())
        .map_err(|e| format!("write {}: {e}", descriptor_path.display()))?;

    // One package at a time: the node's protocol has its own codec
    // (`src/codec.rs`: an undecodable request is INVALID_ARGUMENT).
    let all = compiler.file_descriptor_set();
    let (node, other): (Vec<_>, Vec<_>) = all
        .file
        .into_iter()
        .partition(|f| f.package() == "waste.node.v1");
    tonic_prost_build::configure()
        .bytes(".")
        .compile_fds(prost_types::FileDescriptorSet { file: other })?;
    tonic_prost_build::configure()
        .bytes(".")
        .codec_path("crate::codec::NodeCodec")
        .compile_fds(prost_types::FileDescriptorSet { file: node })?;
    Ok(())
}

/// Appends the path, relative to `root`, of every `.proto` file below `dir`.
fn collect_protos(
    root: &Path,
    dir: &Path,
    out: &mut Vec<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("read dir {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(root, &path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path.strip_prefix(root)?.to_path_buf());
        }
    }
    Ok(())
}
