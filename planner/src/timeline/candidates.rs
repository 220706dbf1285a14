//! Passive mode's index of eviction candidates, so that an eviction need not rescan every
//! storage (a 10,000-operation trace has some 15,000; DTR's runtime evicts thousands of times).
//!
//! The choice is exactly the full scan's: the least (score, storage) among the storages that
//! may leave. Nothing reads again: score -inf. LRU: the last use. DTR: cost / (size x
//! staleness), where the cost (the evicted neighbourhood's) is at least the storage's own
//! producer's time; so `own / (size x staleness)` bounds the score from below, and a candidate
//! whose bound already loses is never costed. Scores change as time advances and as neighbours
//! leave, so nothing is keyed on a score: storages are grouped by `size / own` (classes a factor
//! of two apart) and ordered by last use within a class, which time does not reorder. Entries
//! are checked when met (lazily): one whose storage has been used since, or is no longer
//! resident, is dropped from the index; the simulator re-enters a storage whenever it becomes
//! resident or is used. Only its last entry before a choice can be current: entries wait in a
//! list until the next choice, each storage once (a recomputation from an operation with
//! thousands of inputs uses them all, and may run many times between two evictions).

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// A class's key: `floor(log2(size / own))`, with the extremes for a storage without a
/// producer (size / inf = 0: never cheap to drop) and for a free producer (size / 0 = inf).
fn class_of(ratio: f64) -> i32 {
    if ratio == 0.0 {
        i32::MIN
    } else if ratio.is_infinite() {
        i32::MAX
    } else {
        ratio.log2().floor() as i32
    }
}

/// The largest `size / own` a class may hold, rounded up so that the class's bound stays below
/// each member's own bound despite rounding.
fn class_top(class: i32) -> f64 {
    match class {
        i32::MIN => 0.0,
        i32::MAX => f64::INFINITY,
        k => 2f64.powi(k + 1) * (1.0 + 1e-9),
    }
}

pub(super) struct Candidates {
    /// Per storage: its size, and its own producer's time (`inf` without a producer).
    size: Vec<f64>,
    own: Vec<f64>,
    /// Per class: (last use as bits, storage); a float >= 0 orders as its bits.
    classes: BTreeMap<i32, BTreeSet<(u64, usize)>>,
    /// From which operation on each storage is never needed again (`usize::MAX`: never).
    gone_from: Vec<usize>,
    /// (Reverse) (gone_from, storage), not yet due.
    pending: BinaryHeap<std::cmp::Reverse<(usize, usize)>>,
    /// Storages that nothing needs any more, by index (the scan's tie order).
    doomed: BTreeSet<usize>,
    /// In `pending` or `doomed`.
    queued: Vec<bool>,
    /// Storages entered since the last choice, and the mark that lists each once.
    waiting: Vec<usize>,
    is_waiting: Vec<bool>,
}

/// What the simulator tells the index about one candidate, when met.
pub(super) enum Verdict {
    /// Not resident, or used since the entry was made: the entry goes.
    Stale,
    /// Resident but may not leave now (pinned, a source something needs, ...): kept.
    Skip,
    /// May leave: its exact score.
    Score(f64),
}

impl Candidates {
    pub(super) fn new(sizes: &[u64], own: &[f64], gone_from: Vec<usize>) -> Candidates {
        Candidates {
            size: sizes.iter().map(|&s| s as f64).collect(),
            own: own.to_vec(),
            queued: vec![false; sizes.len()],
            classes: BTreeMap::new(),
            gone_from,
            pending: BinaryHeap::new(),
            doomed: BTreeSet::new(),
            waiting: Vec::new(),
            is_waiting: vec![false; sizes.len()],
        }
    }

    /// Storage `s` is resident or used: entered, with its last use then, at the next choice.
    pub(super) fn enter(&mut self, s: usize) {
        if !self.is_waiting[s] {
            self.is_waiting[s] = true;
            self.waiting.push(s);
        }
    }

    /// Enters the storages waiting, at their last use.
    fn flush(&mut self, last_use: &[f64]) {
        for s in std::mem::take(&mut self.waiting) {
            self.is_waiting[s] = false;
            self.insert(s, last_use[s]);
        }
    }

    /// Storage `s` is resident, last used at `last_use`.
    fn insert(&mut self, s: usize, last_use: f64) {
        // Nothing to gain from evicting an empty storage (the scan skips them too).
        if self.size[s] == 0.0 {
            return;
        }
        self.classes
            .entry(class_of(self.size[s] / self.own[s]))
            .or_default()
            .insert((last_use.to_bits(), s));
        if self.gone_from[s] != usize::MAX && !self.queued[s] {
            self.queued[s] = true;
            self.pending.push(std::cmp::Reverse((self.gone_from[s], s)));
        }
    }

    /// The least (score, storage) at operation `op`, time `at`, or `None`. `lru`: the score
    /// is the last use; else DTR's, whose lower bound is `own / (size x staleness)`. `judge`
    /// says, for a storage, its entry's last use and the best score so far, whether it is a
    /// candidate and its score (for one that loses to the best so far, any score above it).
    pub(super) fn best(
        &mut self,
        op: usize,
        at: f64,
        lru: bool,
        last_use: &[f64],
        judge: &mut dyn FnMut(usize, u64, f64) -> Verdict,
    ) -> Option<(f64, usize)> {
        self.flush(last_use);
        // Nothing reads them again: score -inf, the least index first.
        while let Some(&std::cmp::Reverse((from, s))) = self.pending.peek() {
            if from > op {
                break;
            }
            self.pending.pop();
            self.doomed.insert(s);
        }
        let mut gone = Vec::new();
        let mut found = None;
        for &s in &self.doomed {
            // The entry's last use is not needed to judge a storage nothing reads again.
            match judge(s, u64::MAX, f64::INFINITY) {
                Verdict::Stale => gone.push(s),
                Verdict::Skip => {}
                Verdict::Score(x) => {
                    if x == f64::NEG_INFINITY {
                        found = Some((x, s));
                        break;
                    }
                }
            }
        }
        for s in gone {
            self.doomed.remove(&s);
            self.queued[s] = false;
        }
        if found.is_some() {
            return found;
        }
        let mut best: Option<(f64, usize)> = None;
        let loses = |bound: f64, s: usize, best: Option<(f64, usize)>| {
            best.is_some_and(|(b, bs)| bound > b || (bound == b && s > bs))
        };
        let mut stale = Vec::new();
        for (&class, set) in self.classes.iter().rev() {
            let top = class_top(class);
            for &(bits, s) in set.iter() {
                let stale_s = (at - f64::from_bits(bits)).max(1e-9);
                if !lru {
                    // Every later entry of the class is as fresh or fresher: none can win.
                    let class_bound = 1.0 / (top * stale_s);
                    if best.is_some_and(|(b, _)| class_bound > b) {
                        break;
                    }
                    // As the score is computed, with the least cost: never above it.
                    let own_bound = self.own[s] / (self.size[s] * stale_s);
                    if loses(own_bound, s, best) {
                        continue;
                    }
                } else if best.is_some_and(|(b, _)| f64::from_bits(bits) > b) {
                    break;
                }
                match judge(s, bits, best.map_or(f64::INFINITY, |b| b.0)) {
                    Verdict::Stale => stale.push((class, bits, s)),
                    Verdict::Skip => {}
                    Verdict::Score(x) => {
                        if best.is_none_or(|(b, bs)| x < b || (x == b && s < bs)) {
                            best = Some((x, s));
                        }
                    }
                }
            }
        }
        for (class, bits, s) in stale {
            let set = self.classes.get_mut(&class).unwrap();
            set.remove(&(bits, s));
            if set.is_empty() {
                self.classes.remove(&class);
            }
        }
        best
    }
}
