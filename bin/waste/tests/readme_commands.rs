//! The README's command table against the binary's own `--help`: every
//! subcommand (and every `waste bench` benchmark) has a row, and each row
//! names the subcommand's required flags and every value its format, shape
//! and mode flags accept. A flag or format added to the CLI without a word in
//! the README fails here.

use std::collections::BTreeSet;
use std::process::Command;

/// Flags whose help text lists the values they take; the README row of a
/// subcommand with such a flag must name each value.
const VALUE_FLAGS: [&str; 6] = [
    "--experts",
    "--backbone",
    "--format",
    "--like",
    "--recipe",
    "--expert-mode",
];

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run waste --help");
    assert!(out.status.success(), "waste {args:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The names under `Commands:` in a help text, without `help`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The flags and positional arguments the usage line requires (outside `[…]`).
fn required(help: &str) -> Vec<String> {
    let usage = help
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .expect("a usage line");
    let mut depth = 0;
    let mut words = Vec::new();
    for word in usage.split_whitespace().skip(3) {
        if depth == 0 && word.starts_with("--") {
            words.push(word.to_string());
        }
        depth += word.matches('[').count();
        depth -= word.matches(']').count().min(depth);
    }
    words
}

/// The values a flag's help text lists ("q3, q4, or native", "a | b"),
/// with parenthesised remarks and the `[default: …]` tail removed.
fn listed_values(help: &str, flag: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let Some(i) = lines
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("{flag} <")))
    else {
        return Vec::new();
    };
    // Short help puts the text after the flag; long help on the next line.
    let after = lines[i]
        .trim_start()
        .split_once(">")
        .map_or("", |(_, rest)| rest.trim());
    let text = if after.is_empty() {
        lines.get(i + 1).map_or("", |l| l.trim())
    } else {
        after
    };
    let mut text = text.split(" [").next().unwrap_or("").to_string();
    while let (Some(a), Some(b)) = (text.find('('), text.find(')')) {
        if b < a {
            break;
        }
        text.replace_range(a..=b, "");
    }
    let text = text.rsplit_once(':').map_or(text.as_str(), |(_, t)| t);
    let words: Vec<String> = text
        .split([',', '|'])
        .map(|w| w.trim().trim_start_matches("or ").trim())
        .map(str::to_string)
        .collect();
    // A description rather than a list: leave it alone.
    if words.len() < 2
        || words.iter().any(|w| {
            w.is_empty()
                || !w
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
    {
        return Vec::new();
    }
    words
}

/// The README's command-table rows, keyed by the subcommand they start with.
fn readme_rows() -> Vec<String> {
    let readme = fs_err::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("read README.md");
    readme
        .lines()
        .skip_while(|l| !l.starts_with("## Commands"))
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## Commands"))
        .filter(|l| l.starts_with("| `waste "))
        .map(str::to_string)
        .collect()
}

#[test]
fn readme_command_table_matches_help() {
    let rows = readme_rows();
    assert!(!rows.is_empty(), "no command table in README.md");
    let mut missing = BTreeSet::new();
    for sub in subcommands(&help(&[])) {
        // Cells are separated by " | "; a `|` inside a cell is escaped.
        let first_cell = |r: &&String| {
            r.split(" | ").next().is_some_and(|cell| {
                cell.split('`').any(|code| {
                    code.strip_prefix(&format!("waste {sub}"))
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
                })
            })
        };
        let Some(row) = rows.iter().find(first_cell) else {
            missing.insert(format!("no row for `waste {sub}`"));
            continue;
        };
        let row = row.replace("\\|", "|");
        let text = help(&[&sub]);
        for flag in required(&text) {
            if !row.contains(&flag) {
                missing.insert(format!("`waste {sub}`: required flag {flag}"));
            }
        }
        for flag in VALUE_FLAGS {
            for value in listed_values(&text, flag) {
                if !row.contains(&value) {
                    missing.insert(format!("`waste {sub}`: {flag} value {value}"));
                }
            }
        }
        if sub == "bench" {
            for kind in subcommands(&text) {
                if !row.contains(&kind) {
                    missing.insert(format!("`waste bench`: benchmark {kind}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README.md's command table lacks what --help shows:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn help_parsing_finds_what_it_should() {
    let convert = help(&["convert"]);
    let experts = listed_values(&convert, "--experts");
    assert!(experts.contains(&"q3".to_string()) && experts.contains(&"native".to_string()));
    assert_eq!(
        required(&help(&["forward"])),
        ["--model", "--tokens", "--out"]
    );
    assert!(subcommands(&help(&["bench"])).contains(&"e2e".to_string()));
}
