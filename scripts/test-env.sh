#!/usr/bin/env bash
# Sets up what the tests need beyond Rust, inside the repository's ignored
# build area, so that `scripts/test.sh` passes on a machine with only Rust and
# a bare Python 3: a virtual environment `target/pyenv` with pinned packages
# from PyPI, and the SmolLM2 GGUF (scripts/fetch-smollm2.sh). Source it: it
# exports PATH (the environment's python3 first) and WASTE_SMOLLM2_GGUF.
# Idempotent and offline once done: a stamp file records the pinned set.

# Python packages the tests drive or compare against: tiktoken (reference ids
# for Kimi's tokenizer files), openai and prometheus_client (the HTTP API as
# users' clients see it), pexpect (`waste chat` in a pseudo-terminal), gguf
# and numpy (llama.cpp's GGUF writer: split and deepseek2 files for the GGUF
# tests, scripts/split-gguf.py and scripts/make-deepseek2-gguf.py).
WASTE_TEST_PACKAGES=(tiktoken==0.14.0 openai==3.57.0 prometheus_client==0.26.0 pexpect==4.8.0 gguf==0.17.1 numpy==2.4.6)

waste_test_env() {
    local root pyenv stamp want
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    pyenv="$root/target/pyenv"
    stamp="$pyenv/.waste-packages"
    want="${WASTE_TEST_PACKAGES[*]}"
    # A Debian machine may lack Python or its venv/pip parts: install them
    # from Debian's packages when we may (root with apt-get).
    if ! command -v python3 >/dev/null 2>&1 ||
        { ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; }; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "== installing python3, python3-venv and python3-pip (Debian packages)"
            apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip >/dev/null ||
                return 1
        fi
    fi
    if ! command -v python3 >/dev/null 2>&1; then
        echo "error: the tests need Python 3 (python3 on PATH)" >&2
        return 1
    fi
    if [ ! -x "$pyenv/bin/python3" ]; then
        echo "== Python environment for the tests: $pyenv (once)"
        mkdir -p "$root/target"
        # A Debian python3 without its venv module still makes one without
        # pip; pip then comes from the ensurepip-less bootstrap below.
        if ! python3 -m venv "$pyenv" >/dev/null 2>&1; then
            rm -rf "$pyenv"
            python3 -m venv --without-pip "$pyenv" || {
                echo "error: python3 cannot make a virtual environment (Debian: apt-get install python3-venv)" >&2
                return 1
            }
        fi
    fi
    if ! "$pyenv/bin/python3" -m pip --version >/dev/null 2>&1; then
        # No pip inside: borrow the system one to install pip into the environment.
        python3 -m pip --version >/dev/null 2>&1 || {
            echo "error: neither the environment nor python3 has pip (Debian: apt-get install python3-pip)" >&2
            return 1
        }
        python3 -m pip install --quiet --prefix "$pyenv" pip
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "== installing ${WASTE_TEST_PACKAGES[*]} into $pyenv"
        "$pyenv/bin/python3" -m pip install --quiet --disable-pip-version-check "${WASTE_TEST_PACKAGES[@]}" || return 1
        echo "$want" >"$stamp"
    fi
    export PATH="$pyenv/bin:$PATH"
    # The GGUF tests in tests/ and bin/waste read the real SmolLM2-135M GGUF.
    WASTE_SMOLLM2_GGUF="${WASTE_SMOLLM2_GGUF:-$("$root/scripts/fetch-smollm2.sh")}" || return 1
    export WASTE_SMOLLM2_GGUF
}
