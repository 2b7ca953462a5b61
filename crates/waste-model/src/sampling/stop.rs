//! Stop strings over streamed text. Text that might be the start of a stop string is held back
//! until it is either ruled out (then emitted) or completed (then the generation stops and the
//! stop string itself is never emitted).
//!
//! Where stop strings overlap, the one that *completes first* in the stream wins (ties: the
//! one that starts first). That rule does not depend on how the text was cut into pieces, so
//! streamed and one-shot output agree.
//!
//! Matching is incremental: an Aho–Corasick automaton over the stop strings' bytes reads every
//! byte of the stream once, so a piece costs its own length whatever the number and length of
//! the stops. The automaton's state is the longest tail of the stream that is a prefix of some
//! stop string, which is exactly the text to hold back.

use std::fmt;

/// What one [`StopMatcher::push`] releases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopStep {
    /// Text that is now safe to show.
    pub text: String,
    /// Index (into the matcher's stop list) of the stop string that just completed.
    pub stop: Option<usize>,
}

/// Watches streamed text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    automaton: Automaton,
    /// Automaton state after the last byte pushed.
    state: u32,
    /// `pending[held..]` is the text held back because it may begin a stop string; the bytes
    /// before `held` were released already and are dropped in bulk, so that releasing text
    /// never moves the held tail once per piece.
    pending: String,
    held: usize,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored: they would end every generation before it starts.
    pub fn new<S: AsRef<str>>(stops: &[S]) -> Self {
        let stops: Vec<String> = stops
            .iter()
            .map(|s| s.as_ref().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        let automaton = Automaton::new(&stops);
        Self {
            stops,
            automaton,
            state: ROOT,
            pending: String::new(),
            held: 0,
            stopped: false,
        }
    }

    /// Feeds the next piece of text. After a stop, further pushes release nothing.
    pub fn push(&mut self, text: &str) -> StopStep {
        if self.stopped {
            return StopStep::default();
        }
        if self.stops.is_empty() {
            return StopStep {
                text: text.to_owned(),
                stop: None,
            };
        }
        let before = self.pending.len();
        self.pending.push_str(text);
        for (i, &byte) in text.as_bytes().iter().enumerate() {
            self.state = self.automaton.next(self.state, byte);
            // The first end position with a match is the earliest end; the automaton reports
            // the longest stop ending there (the earliest start), lowest index among equals.
            if let Some(index) = self.automaton.output(self.state) {
                let end = before + i + 1;
                let start = end - self.stops[index].len();
                self.stopped = true;
                let released = self.pending[self.held..start].to_owned();
                self.pending = String::new();
                self.held = 0;
                return StopStep {
                    text: released,
                    stop: Some(index),
                };
            }
        }
        let hold_from = self.pending.len() - self.automaton.depth(self.state);
        let released = self.pending[self.held..hold_from].to_owned();
        self.held = hold_from;
        // Drop the released bytes once they outweigh the held ones: each byte is moved at most
        // once on average.
        if self.held > self.pending.len() - self.held {
            self.pending.drain(..self.held);
            self.held = 0;
        }
        StopStep {
            text: released,
            stop: None,
        }
    }

    /// The generation ended without a stop string: releases what was held back.
    pub fn finish(&mut self) -> String {
        let rest = self.pending.split_off(self.held);
        self.pending = String::new();
        self.held = 0;
        self.state = ROOT;
        rest
    }

    /// Whether a stop string has completed.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The (non-empty) stop strings being watched.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }
}

const ROOT: u32 = 0;
const NONE: u32 = u32::MAX;

/// An Aho–Corasick automaton over bytes. The trie is sparse (a linked list of edges per node)
/// because long stop strings are mostly single-child chains; only the root, which every
/// mismatch falls back to, has a dense table.
#[derive(Clone, Default)]
struct Automaton {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    /// Transitions out of the root for every byte (`ROOT` where no stop starts with it).
    root: Vec<u32>,
}

#[derive(Clone, Copy)]
struct Node {
    first_edge: u32,
    /// The node of the longest proper suffix of this node's string that is also in the trie.
    fail: u32,
    /// Length of this node's string: how much text to hold back in this state.
    depth: u32,
    /// The stop that ends here and starts earliest (the longest; lowest index among equal
    /// ones), following failure links; `NONE` if none.
    output: u32,
}

#[derive(Clone, Copy)]
struct Edge {
    byte: u8,
    target: u32,
    next: u32,
}

impl fmt::Debug for Automaton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Automaton")
            .field("nodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl Automaton {
    fn new(stops: &[String]) -> Self {
        let total: usize = stops.iter().map(String::len).sum();
        // Stop strings arrive inside size-capped requests; 4 GiB of them cannot.
        assert!(
            u32::try_from(total).is_ok_and(|t| t < NONE),
            "stop strings total {total} bytes"
        );
        let root_node = Node {
            first_edge: NONE,
            fail: ROOT,
            depth: 0,
            output: NONE,
        };
        let mut a = Self {
            nodes: vec![root_node],
            edges: Vec::with_capacity(total),
            root: vec![ROOT; 256],
        };
        for (index, stop) in stops.iter().enumerate() {
            let mut node = ROOT;
            for &byte in stop.as_bytes() {
                node = match a.child(node, byte) {
                    Some(next) => next,
                    None => a.add_child(node, byte),
                };
            }
            let n = &mut a.nodes[node as usize];
            if n.output == NONE {
                n.output = index as u32;
            }
        }
        // Breadth-first, so that a node's failure target (shallower) is complete before it.
        let mut queue = std::collections::VecDeque::from([ROOT]);
        while let Some(node) = queue.pop_front() {
            let mut e = a.nodes[node as usize].first_edge;
            while e != NONE {
                let Edge { byte, target, next } = a.edges[e as usize];
                let fail = if node == ROOT {
                    ROOT
                } else {
                    a.next(a.nodes[node as usize].fail, byte)
                };
                let inherited = a.nodes[fail as usize].output;
                let t = &mut a.nodes[target as usize];
                t.fail = fail;
                if t.output == NONE {
                    t.output = inherited;
                }
                queue.push_back(target);
                e = next;
            }
        }
        a
    }

    fn child(&self, node: u32, byte: u8) -> Option<u32> {
        if node == ROOT {
            let t = self.root[usize::from(byte)];
            return (t != ROOT).then_some(t);
        }
        let mut e = self.nodes[node as usize].first_edge;
        while e != NONE {
            let edge = &self.edges[e as usize];
            if edge.byte == byte {
                return Some(edge.target);
            }
            e = edge.next;
        }
        None
    }

    fn add_child(&mut self, node: u32, byte: u8) -> u32 {
        let id = self.nodes.len() as u32;
        let depth = self.nodes[node as usize].depth + 1;
        self.nodes.push(Node {
            first_edge: NONE,
            fail: ROOT,
            depth,
            output: NONE,
        });
        let first = self.nodes[node as usize].first_edge;
        self.nodes[node as usize].first_edge = self.edges.len() as u32;
        self.edges.push(Edge {
            byte,
            target: id,
            next: first,
        });
        if node == ROOT {
            self.root[usize::from(byte)] = id;
        }
        id
    }

    /// The state after reading `byte` in `state`.
    fn next(&self, mut state: u32, byte: u8) -> u32 {
        loop {
            if state == ROOT {
                return self.root[usize::from(byte)];
            }
            if let Some(t) = self.child(state, byte) {
                return t;
            }
            state = self.nodes[state as usize].fail;
        }
    }

    fn output(&self, state: u32) -> Option<usize> {
        let o = self.nodes[state as usize].output;
        (o != NONE).then_some(o as usize)
    }

    fn depth(&self, state: u32) -> usize {
        self.nodes[state as usize].depth as usize
    }
}
