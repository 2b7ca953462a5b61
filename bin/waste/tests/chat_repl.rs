//! `waste chat` in a pseudo-terminal (`tests/python/chat_repl.py`, with
//! pexpect, installed by `.ci/run`): streamed answers, Ctrl-C mid-answer
//! stops the answer and not the REPL, multi-line input, `/stats`,
//! `/reset`, a session that prefills only the new turn, Ctrl-D.

use std::path::Path;
use std::process::Command;

mod common;

#[test]
fn the_repl_streams_survives_ctrl_c_and_keeps_the_conversation() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let waste = env!("CARGO_BIN_EXE_waste");
    common::synth_store(&store, 2, 8, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/chat_repl.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(waste)
        .arg(&store)
        .output()
        .expect("run python3 (the test needs it, with `pip install pexpect`)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all REPL checks passed"),
        "the REPL checks failed (missing module? pip install pexpect)\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
