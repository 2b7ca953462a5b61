//! The exit status of a failed command, from what its error chain says
//! (sysexits.h): 64 (EX_USAGE) for arguments that cannot work, 65
//! (EX_DATAERR) for input files that are wrong (a config.json or GGUF
//! metadata out of range, a weight missing or misshapen), 75 (EX_TEMPFAIL)
//! for a conversion stopped by a signal that the same command resumes, 1
//! for the rest (IO, bugs). Scripts tell "fix your model" from "retry" by
//! it.

use std::process::ExitCode;

/// EX_USAGE: the command line cannot work.
pub const USAGE: u8 = 64;
/// EX_DATAERR: an input file is malformed or inconsistent.
pub const DATA: u8 = 65;
/// EX_TEMPFAIL: stopped on request; rerunning the command resumes.
pub const INTERRUPTED: u8 = 75;

/// An argument that cannot work (a malformed `--tokens` list, ...).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit status for `e`: the first cause in its chain that has a class decides.
pub fn code(e: &anyhow::Error) -> ExitCode {
    let class = e.chain().find_map(|cause| {
        if cause.is::<UsageError>() {
            return Some(USAGE);
        }
        if let Some(waste_convert::Error::Interrupted { .. }) = cause.downcast_ref() {
            return Some(INTERRUPTED);
        }
        let data = if let Some(m) = cause.downcast_ref::<waste_model::Error>() {
            m.is_bad_model()
        } else if let Some(c) = cause.downcast_ref::<waste_convert::Error>() {
            bad_source(c)
        } else if let Some(c) = cause.downcast_ref::<waste_format::checkpoint::Error>() {
            bad_checkpoint(c)
        } else if let Some(n) = cause.downcast_ref::<waste_node::Error>() {
            match n {
                waste_node::Error::Model(m) => m.is_bad_model(),
                waste_node::Error::Backbone { source, .. } => bad_checkpoint(source),
                // A corrupt, unfinished or mismatched store is wrong data,
                // not a failure to read it.
                waste_node::Error::Format(f) => !matches!(f, waste_format::Error::Io { .. }),
                waste_node::Error::WrongStore { .. } => true,
                _ => false,
            }
        } else {
            false
        };
        data.then_some(DATA)
    });
    class.map_or(ExitCode::FAILURE, ExitCode::from)
}

/// Whether a converter error says the source files are wrong.
fn bad_source(e: &waste_convert::Error) -> bool {
    use waste_convert::Error as E;
    match e {
        E::Checkpoint(c) => bad_checkpoint(c),
        E::MissingTensor { .. }
        | E::BadTensor { .. }
        | E::Unsupported { .. }
        | E::Gguf { .. }
        | E::GgufMetadata { .. }
        | E::Config { .. }
        | E::UnsupportedGguf { .. }
        | E::MissingGgufPart { .. }
        | E::Record { .. } => true,
        E::Interrupted { .. }
        | E::Store(_)
        | E::Io { .. }
        | E::Output { .. }
        | E::NoSpace { .. } => false,
    }
}

/// Whether a checkpoint error says the checkpoint's files are wrong (not
/// that they could not be read at all).
fn bad_checkpoint(e: &waste_format::checkpoint::Error) -> bool {
    use waste_format::checkpoint::Error as E;
    !matches!(e, E::Io { .. } | E::Mmap { .. } | E::NotACheckpoint { .. })
}
