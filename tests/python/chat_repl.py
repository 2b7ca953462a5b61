"""Drives `waste chat` through a pseudo-terminal, as a person would: a
prompt, the streamed answer, Ctrl-C in the middle of it (the answer stops,
the REPL stays), multi-line input, /stats and /reset, then Ctrl-D.

Usage: python3 chat_repl.py WASTE_BIN STORE
"""

import sys

import pexpect

waste, store = sys.argv[1], sys.argv[2]


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def repl(*flags):
    child = pexpect.spawn(waste, ["chat", "--model", store, "--temperature", "0", *flags],
                          timeout=60, encoding="utf-8", codec_errors="replace",
                          env={"RUST_LOG": "warn", "WASTE_CACHE": store + "/.chat", "TERM": "dumb",
                               "PATH": "/usr/bin:/bin"})
    child.expect("waste chat:")
    child.expect(">>> ")
    return child


# A long answer, stopped with Ctrl-C while it streams.
child = repl("--max-tokens", "100000", "--ignore-eos")
child.sendline("Tell me a very long story.")
child.expect("Tell me a very long story.")  # the echo of the line
child.expect(r".{20}", timeout=60)         # the answer is streaming
child.sendcontrol("c")
child.expect(r"\[stopped\]", timeout=30)
check(True, "Ctrl-C stops the answer")
child.expect(">>> ")
check(child.isalive(), "the REPL survives Ctrl-C")
child.sendline("/stats")
child.expect("no statistics")
check(True, "/stats after a stopped answer says there are none")
child.sendcontrol("d")
child.expect(pexpect.EOF)
child.close()
check(child.exitstatus == 0, f"Ctrl-D exits cleanly (status {child.exitstatus})")

# Short answers: multi-line input, statistics, and /reset.
child = repl("--max-tokens", "6")
child.sendline("first line \\")
child.expect(r"\.\.\. ")
check(True, "a line ending in \\ continues")
child.sendline("second line")
child.expect(">>> ")
child.sendline("/stats")
child.expect(r" 6 tokens ")
check(True, "/stats shows the finished answer's statistics")
child.sendline("and again")
child.expect(">>> ")
child.sendline("/stats")
child.expect(r"(\d+) of (\d+) prompt tokens reused")
check(int(child.match.group(1)) > 0, "the second turn reuses the first turn's state")
child.sendline("/reset")
child.expect(r"conversation cleared")
child.sendline("/exit")
child.expect(pexpect.EOF)
child.close()
check(child.exitstatus == 0, "/exit exits cleanly")
print("all REPL checks passed")
