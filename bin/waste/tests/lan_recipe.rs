//! The README's two-machine deployment, run as written: the store on one
//! host with TLS and a token, the node on another with compute-at-store and
//! its own token, each host a network namespace joined by a veth pair (the
//! hosts' addresses are the test's own). Checked: a generation through both
//! daemons equals the in-process one token for token, and each wrong
//! credential (store token, node token, CA, plain text to the TLS port)
//! fails with a message that says what is wrong. Where namespaces cannot be
//! made (not root), the two hosts are two loopback addresses instead.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

use common::start;

const STORE_TOKEN: &str = "store-secret-0123456789abcdef";
const NODE_TOKEN: &str = "node-secret-0123456789abcdef";
const PROMPT: &str = "Hello there";

/// Two hosts: either two namespaces (and the commands run inside them) or
/// two loopback addresses of this one.
struct Hosts {
    store_ns: Option<String>,
    node_ns: Option<String>,
    store_ip: Ipv4Addr,
    node_ip: Ipv4Addr,
}

impl Hosts {
    fn new() -> Self {
        let id = std::process::id() % 200 + 20;
        let (s, n) = (format!("wst-s{id}"), format!("wst-n{id}"));
        let (store_ip, node_ip) = (
            Ipv4Addr::new(10, 213, id as u8, 1),
            Ipv4Addr::new(10, 213, id as u8, 2),
        );
        let ok = [
            format!("ip netns add {s}"),
            format!("ip netns add {n}"),
            format!("ip link add wst{id}a type veth peer name wst{id}b"),
            format!("ip link set wst{id}a netns {s}"),
            format!("ip link set wst{id}b netns {n}"),
            format!("ip -n {s} addr add {store_ip}/24 dev wst{id}a"),
            format!("ip -n {n} addr add {node_ip}/24 dev wst{id}b"),
            format!("ip -n {s} link set wst{id}a up"),
            format!("ip -n {n} link set wst{id}b up"),
            format!("ip -n {s} link set lo up"),
            format!("ip -n {n} link set lo up"),
        ]
        .iter()
        .all(|cmd| {
            Command::new("sh")
                .args(["-c", cmd])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if ok {
            Self {
                store_ns: Some(s),
                node_ns: Some(n),
                store_ip,
                node_ip,
            }
        } else {
            eprintln!(
                "network namespaces unavailable (not root?): two loopback addresses stand in"
            );
            Self::drop_namespaces(&s, &n);
            Self {
                store_ns: None,
                node_ns: None,
                store_ip: Ipv4Addr::new(127, 0, 0, 2),
                node_ip: Ipv4Addr::new(127, 0, 0, 3),
            }
        }
    }

    fn drop_namespaces(s: &str, n: &str) {
        for ns in [s, n] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `waste ARGS` on a host.
    fn waste(&self, ns: &Option<String>) -> Command {
        let bin = env!("CARGO_BIN_EXE_waste");
        let mut c = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        c.env("RUST_LOG", "warn")
            .env_remove("WASTE_STORE_TOKEN")
            .env_remove("WASTE_NODE_TOKEN");
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let (Some(s), Some(n)) = (&self.store_ns, &self.node_ns) {
            Self::drop_namespaces(s, n);
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A small complete store (random weights, byte-level tokenizer).
fn synth_store(dir: &Path) -> PathBuf {
    let s = dir.join("k2");
    common::synth_store(&s, 2, 4, &[]);
    s
}

/// A self-signed certificate for `ip` (PEM cert, PEM key).
fn certificate(ip: Ipv4Addr) -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec![ip.to_string()]).expect("make a certificate");
    (c.cert.pem(), c.signing_key.serialize_pem())
}

#[test]
fn the_two_machine_recipe_works_as_written_and_refuses_wrong_credentials() {
    let tmp = tempfile::tempdir().unwrap();
    let store = synth_store(tmp.path());
    let hosts = Hosts::new();
    let (cert, key) = certificate(hosts.store_ip);
    let (crt, key_file) = (tmp.path().join("store.crt"), tmp.path().join("store.key"));
    fs_err::write(&crt, cert).unwrap();
    fs_err::write(&key_file, key).unwrap();
    let (other, _) = certificate(hosts.store_ip);
    let wrong_ca = tmp.path().join("other.crt");
    fs_err::write(&wrong_ca, other).unwrap();

    // storage machine, as the README writes it
    let mut cmd = hosts.waste(&hosts.store_ns);
    cmd.env("WASTE_STORE_TOKEN", STORE_TOKEN)
        .args(["store", "--experts"])
        .arg(store.join("experts"))
        .args([
            "--listen",
            &format!("{}:50051", listen_any(&hosts, hosts.store_ip)),
        ])
        .arg("--tls-cert")
        .arg(&crt)
        .arg("--tls-key")
        .arg(&key_file);
    let _store = start(cmd, Duration::from_secs(120)).expect("the store starts");
    let store_url = format!("https://{}:50051", hosts.store_ip);

    let node = |token: &str, url: &str, ca: &Path| {
        let mut cmd = hosts.waste(&hosts.node_ns);
        cmd.env("WASTE_STORE_TOKEN", token)
            .env("WASTE_NODE_TOKEN", NODE_TOKEN)
            .args(["node", "--backbone"])
            .arg(store.join("backbone"))
            .args(["--store-addr", url, "--store-ca"])
            .arg(ca)
            .args(["--expert-mode", "compute-at-store"])
            .args([
                "--listen",
                &format!("{}:50052", listen_any(&hosts, hosts.node_ip)),
            ]);
        start(cmd, Duration::from_secs(120))
    };

    // Wrong credentials towards the store: the node refuses to start, saying why.
    let err = node("wrong-token-0123456789", &store_url, &crt)
        .err()
        .expect("a node with the wrong store token must not start");
    eprintln!("wrong store token: {err}");
    assert!(
        err.to_lowercase().contains("unauthenticated") || err.contains("token"),
        "wrong store token: {err}"
    );
    let err = node(STORE_TOKEN, &store_url, &wrong_ca)
        .err()
        .expect("a node trusting another CA must not start");
    eprintln!("wrong CA: {err}");
    assert!(
        err.to_lowercase().contains("certificate") || err.to_lowercase().contains("tls"),
        "wrong CA: {err}"
    );
    let plain = format!("http://{}:50051", hosts.store_ip);
    let err = node(STORE_TOKEN, &plain, &crt)
        .err()
        .expect("plain text to the TLS port must not work");
    eprintln!("plain text to the TLS port: {err}");
    assert!(err.contains("https://"), "plain text to TLS: {err}");

    // compute machine, as the README writes it
    let _node = node(STORE_TOKEN, &store_url, &crt).expect("the node starts");
    let node_url = format!("http://{}:50052", hosts.node_ip);
    let generate = |token: &str| {
        hosts
            .waste(&hosts.node_ns)
            .args(["generate", "--node", &node_url, "--prompt", PROMPT])
            .args(["--max-tokens", "12", "--ignore-eos", "--token", token])
            .output()
            .expect("run generate")
    };
    let wrong = generate("not-the-node-token");
    assert!(!wrong.status.success(), "a wrong node token was accepted");
    eprintln!("wrong node token: {}", text(&wrong));
    assert!(
        text(&wrong).contains("Unauthenticated"),
        "wrong node token: {}",
        text(&wrong)
    );
    let remote = generate(NODE_TOKEN);
    assert!(remote.status.success(), "{}", text(&remote));

    let local = Command::new(env!("CARGO_BIN_EXE_waste"))
        .args(["run", "--model"])
        .arg(&store)
        .args(["--prompt", PROMPT, "--max-tokens", "12", "--ignore-eos"])
        .output()
        .expect("run waste run");
    assert!(local.status.success(), "{}", text(&local));
    assert_eq!(
        String::from_utf8_lossy(&remote.stdout).trim_end(),
        String::from_utf8_lossy(&local.stdout).trim_end(),
        "the two-machine generation differs from the in-process one"
    );
}

/// The README binds 0.0.0.0; two loopback addresses share one host, so
/// each daemon binds its own address there.
fn listen_any(hosts: &Hosts, own: Ipv4Addr) -> String {
    if hosts.store_ns.is_some() {
        "0.0.0.0".into()
    } else {
        own.to_string()
    }
}
