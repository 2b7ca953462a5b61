//! The node's RAM cache of parsed expert records, within a byte budget.
//! Eviction weighs frequency as well as recency: the victim is the entry
//! with the fewest uses, the least recently used among those; use counts are
//! halved every `budget`-worth of insertions so experts that were hot long
//! ago age out. (MoE routing reuses some experts heavily and others once; a
//! pure LRU evicts the heavy ones behind a burst of one-offs.) A record
//! nobody has used yet (a prefetch that landed before its layer asked, or
//! the warm-up's) enters on probation with no use: it is the first victim,
//! so a wrong guess displaces at most another unused guess, never an expert
//! the routing has chosen.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use waste_kernels::ExpertFfn;

use crate::source::Expert;

/// (layer, expert)
pub type Key = (u32, u32);

/// Use counts are halved after this many budgets' worth of insertions. The
/// window must be several times the cache: aging once per budget would halve
/// a hot expert's count to nothing within a single burst of one-offs that
/// merely cycles the cache a few times (TinyLFU's sample is ~10x the cache).
pub const AGING_PERIOD: u64 = 8;

#[derive(Debug)]
struct Entry {
    expert: Arc<Expert>,
    uses: u32,
    last: u64,
}

#[derive(Debug, Default)]
pub struct ExpertCache {
    budget: u64,
    used: u64,
    /// Room promised to copies being made for insertion ([`Self::reserve`]).
    reserved: u64,
    tick: u64,
    /// Bytes inserted since the last halving of use counts.
    since_aging: u64,
    entries: HashMap<Key, Entry>,
    /// (uses, last use, key): the first element is the next victim.
    order: BTreeSet<(u32, u64, Key)>,
}

impl ExpertCache {
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, key: Key) -> bool {
        self.entries.contains_key(&key)
    }

    /// The expert if cached, counting the use.
    pub fn get(&mut self, key: Key) -> Option<Arc<Expert>> {
        self.tick += 1;
        let e = self.entries.get_mut(&key)?;
        self.order.remove(&(e.uses, e.last, key));
        e.uses = e.uses.saturating_add(1);
        e.last = self.tick;
        self.order.insert((e.uses, e.last, key));
        Some(Arc::clone(&e.expert))
    }

    /// Moves the budget, evicting down to it when it shrinks.
    pub fn set_budget(&mut self, budget: u64) {
        self.budget = budget;
        while self.used + self.reserved > self.budget && self.evict_one() {}
    }

    /// Evicts to make room for `size` bytes and holds that room until
    /// [`Self::insert_reserved`], so a copy made for the cache never sits
    /// beside the experts it displaces. False (nothing held) when `size`
    /// exceeds the budget.
    pub fn reserve(&mut self, size: u64) -> bool {
        if size > self.budget {
            return false;
        }
        while self.used + self.reserved + size > self.budget && self.evict_one() {}
        self.reserved += size;
        true
    }

    /// Inserts into room held by [`Self::reserve`] of the expert's size;
    /// `used`: a step asked for it (else it enters on probation).
    pub fn insert_reserved(&mut self, key: Key, expert: Arc<Expert>, used: bool) {
        self.reserved = self.reserved.saturating_sub(expert.size_bytes() as u64);
        self.insert_with(key, expert, u32::from(used));
    }

    /// Drops the next victim; false when empty.
    fn evict_one(&mut self) -> bool {
        let Some(&(uses, last, victim)) = self.order.iter().next() else {
            return false;
        };
        self.order.remove(&(uses, last, victim));
        if let Some(e) = self.entries.remove(&victim) {
            self.used -= e.expert.size_bytes() as u64;
        }
        true
    }

    /// Inserts an expert a step used, evicting others as needed; one larger
    /// than the whole budget is not kept.
    pub fn insert(&mut self, key: Key, expert: Arc<Expert>) {
        self.insert_with(key, expert, 1);
    }

    /// Inserts an expert with `uses` (0: on probation).
    fn insert_with(&mut self, key: Key, expert: Arc<Expert>, uses: u32) {
        let size = expert.size_bytes() as u64;
        if size > self.budget || self.entries.contains_key(&key) {
            return;
        }
        while self.used + self.reserved + size > self.budget && self.evict_one() {}
        self.tick += 1;
        self.used += size;
        self.since_aging += size;
        self.entries.insert(
            key,
            Entry {
                expert,
                uses,
                last: self.tick,
            },
        );
        self.order.insert((uses, self.tick, key));
        if self.since_aging >= AGING_PERIOD * self.budget.max(1) {
            self.age();
        }
    }

    /// Halves every use count (a used expert keeps at least one; one on
    /// probation stays there).
    fn age(&mut self) {
        self.since_aging = 0;
        self.order.clear();
        for (key, e) in &mut self.entries {
            e.uses = if e.uses == 0 { 0 } else { (e.uses / 2).max(1) };
            self.order.insert((e.uses, e.last, *key));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tests::tiny_expert;

    #[test]
    fn frequent_experts_survive_a_burst_of_one_offs() {
        let one = tiny_expert(0);
        let size = one.size_bytes() as u64;
        let mut c = ExpertCache::new(4 * size);
        c.insert((0, 0), Arc::clone(&one));
        for _ in 0..5 {
            assert!(c.get((0, 0)).is_some());
        }
        for e in 1..20 {
            c.insert((0, e), tiny_expert(e));
            assert!(c.used() <= c.budget());
        }
        assert!(c.contains((0, 0)), "the hot expert was evicted by one-offs");
        assert_eq!(c.len(), 4);
        // Recency among equals: the most recent one-off is kept.
        assert!(c.contains((0, 19)));
    }

    #[test]
    fn experts_hot_long_ago_age_out() {
        let one = tiny_expert(0);
        let size = one.size_bytes() as u64;
        let mut c = ExpertCache::new(4 * size);
        c.insert((0, 0), one);
        for _ in 0..5 {
            assert!(c.get((0, 0)).is_some());
        }
        // Enough one-offs for several halvings: six uses decay to one, and
        // then the old expert is the least recent of equals.
        let n = 4 * AGING_PERIOD as u32 * 4;
        for e in 1..n {
            c.insert((0, e), tiny_expert(e));
        }
        assert!(!c.contains((0, 0)), "a long-cold expert was never evicted");
        assert_eq!(c.len(), 4);
    }

    /// The budget moves with the reader's idle reserve: shrinking it
    /// evicts the least used first, down to the new budget.
    #[test]
    fn a_shrinking_budget_evicts_the_least_used_down_to_it() {
        let size = tiny_expert(0).size_bytes() as u64;
        let mut c = ExpertCache::new(4 * size);
        for e in 0..4 {
            c.insert((0, e), tiny_expert(e));
        }
        for _ in 0..3 {
            assert!(c.get((0, 2)).is_some());
        }
        assert!(c.get((0, 3)).is_some());
        c.set_budget(2 * size);
        assert!(c.used() <= c.budget());
        assert_eq!(c.len(), 2);
        assert!(c.contains((0, 2)) && c.contains((0, 3)));
        // Room held for a copy counts as used until the copy goes in.
        assert!(c.reserve(size));
        assert_eq!(c.len(), 1, "the least used of the two made room");
        assert!(!c.reserve(3 * size), "more than the budget");
        c.insert_reserved((0, 7), tiny_expert(7), true);
        assert_eq!((c.len(), c.used()), (2, 2 * size));
        // Growing again evicts nothing and makes room for more.
        c.set_budget(3 * size);
        c.insert((0, 9), tiny_expert(9));
        assert_eq!(c.len(), 3);
    }

    /// A full cache of experts the routing chose once each, then a layer's
    /// worth of guesses nobody uses: the guesses take one slot between
    /// them, so every chosen expert but the least recent is still there.
    /// (Entering them as used, the three guesses evicted three chosen
    /// experts.)
    #[test]
    fn unused_guesses_displace_one_chosen_expert_at_most() {
        let size = tiny_expert(0).size_bytes() as u64;
        let mut c = ExpertCache::new(4 * size);
        for e in 0..4 {
            c.insert((0, e), tiny_expert(e));
        }
        for g in 10..13 {
            assert!(c.reserve(size));
            c.insert_reserved((1, g), tiny_expert(g), false);
        }
        let hits = (0..4).filter(|&e| c.get((0, e)).is_some()).count();
        assert_eq!(
            hits, 3,
            "the optimum here: one slot holds the landing guess"
        );
        assert!(!c.contains((0, 0)) && c.contains((1, 12)));
        // A guess the routing then uses leaves probation: the next unused
        // guess displaces the other unused one, not it.
        let mut c = ExpertCache::new(2 * size);
        for g in [20, 21] {
            assert!(c.reserve(size));
            c.insert_reserved((2, g), tiny_expert(g), false);
        }
        assert!(c.get((2, 20)).is_some());
        assert!(c.reserve(size));
        c.insert_reserved((2, 22), tiny_expert(22), false);
        assert!(c.contains((2, 20)) && c.contains((2, 22)) && !c.contains((2, 21)));
    }

    /// The same policy written as a brute-force scan (smallest (uses,
    /// last) goes first; counts halved, probation kept, every
    /// `AGING_PERIOD` budgets of insertions), against the cache on a
    /// seeded random mix of uses, demand insertions and unused guesses.
    #[test]
    fn matches_a_brute_force_reference_on_random_traffic() {
        struct Reference {
            slots: usize,
            tick: u64,
            since_aging: u64,
            entries: Vec<(Key, u32, u64)>,
        }
        impl Reference {
            fn get(&mut self, key: Key) -> bool {
                self.tick += 1;
                let tick = self.tick;
                self.entries
                    .iter_mut()
                    .find(|e| e.0 == key)
                    .map(|e| {
                        e.1 += 1;
                        e.2 = tick;
                    })
                    .is_some()
            }
            fn insert(&mut self, key: Key, uses: u32) {
                if self.entries.iter().any(|e| e.0 == key) {
                    return;
                }
                if self.entries.len() == self.slots {
                    let victim = (0..self.entries.len())
                        .min_by_key(|&i| (self.entries[i].1, self.entries[i].2))
                        .unwrap();
                    self.entries.swap_remove(victim);
                }
                self.tick += 1;
                self.entries.push((key, uses, self.tick));
                self.since_aging += 1;
                if self.since_aging >= AGING_PERIOD * self.slots as u64 {
                    self.since_aging = 0;
                    for e in &mut self.entries {
                        e.1 = if e.1 == 0 { 0 } else { (e.1 / 2).max(1) };
                    }
                }
            }
        }
        let size = tiny_expert(0).size_bytes() as u64;
        let experts: Vec<_> = (0..24).map(tiny_expert).collect();
        for seed in 1..=8u64 {
            let slots = 2 + (seed as usize % 5);
            let mut c = ExpertCache::new(slots as u64 * size);
            let mut r = Reference {
                slots,
                tick: 0,
                since_aging: 0,
                entries: Vec::new(),
            };
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let (mut hits, mut ref_hits) = (0, 0);
            for _ in 0..3000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // A skewed choice: low ids far more often, as routing is.
                let id = ((x >> 8) % 24).min((x >> 20) % 24) as u32;
                let key = (id % 3, id);
                match x % 4 {
                    0 => {
                        c.insert_reserved(key, Arc::clone(&experts[id as usize]), false);
                        r.insert(key, 0);
                    }
                    _ => {
                        let hit = c.get(key).is_some();
                        assert_eq!(hit, r.get(key), "seed {seed}: lookup of {key:?}");
                        if hit {
                            hits += 1;
                            ref_hits += 1;
                        } else {
                            c.insert(key, Arc::clone(&experts[id as usize]));
                            r.insert(key, 1);
                        }
                    }
                }
                assert!(c.used() <= c.budget());
            }
            assert_eq!(hits, ref_hits);
            let mut held: Vec<Key> = r.entries.iter().map(|e| e.0).collect();
            held.sort_unstable();
            let mut cached: Vec<Key> = c.entries.keys().copied().collect();
            cached.sort_unstable();
            assert_eq!(cached, held, "seed {seed}");
        }
    }

    #[test]
    fn an_expert_larger_than_the_budget_is_not_kept() {
        let e = tiny_expert(1);
        let mut c = ExpertCache::new(e.size_bytes() as u64 - 1);
        c.insert((1, 1), e);
        assert!(c.is_empty());
    }
}
