//! The observed sequence: every record the hooks build (whether or not a trace file is
//! written) as it happens, online iteration detection, and the position of each call within
//! the iteration, which the bridge, the executor and recomputation ask for.
//!
//! SINGA's way, on Marmoset's calls: every `CHECK` calls, the calls so far are tokenised
//! (`planner::iteration::calls`), the repetition is found (`detect`) and verified (`steady`:
//! every touched tensor named alike in consecutive iterations). A repetition counts only if it
//! reaches the latest call, so that the next call's place in the iteration is known: it must
//! repeat the call one period before it. A call that does not is a divergence (Capuchin's
//! "the program left the measured sequence"): the guided plan stops for the rest of the
//! iteration, and detection starts again from the divergence, with the allocations still live.

use crate::core::config::Level;
use crate::core::state::log;
use planner::iteration::{self, TensorId};
use planner::trace::{Event, Record};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Calls between two detection attempts at least (SINGA checks every few hundred allocations);
/// the interval grows with the calls seen, a quarter of them, so that detection's cost over a
/// long stream stays proportional to it.
const CHECK: usize = 32;
/// Records kept at most. While an iteration is followed, older iterations' calls go once this
/// many are kept (only the last two iterations are needed); while none is, the tracker stops
/// here (the iteration is longer than it can plan).
const MAX_RECORDS: usize = 400_000;

/// A verified repetition that reaches the latest call.
#[derive(Debug, Clone)]
pub struct Found {
    /// Calls per iteration.
    pub period: usize,
    /// Index (among the tracker's calls) of the first call of an iteration: calls at
    /// `boundary + j * period` start iterations.
    pub boundary: usize,
    /// The `seq` of the steady iteration's first call (what the bridge plans).
    pub start_seq: u64,
    /// Which detection found it (a restart makes the tracker's call indices new ones).
    pub generation: u64,
    /// A kind planned before, recognised from its first calls: each call must be the kind's
    /// call at its offset (None: each call must repeat the one a period before).
    pub expected: Option<Arc<[u64]>>,
}

/// What the caller does once the tracker's lock is released (planning, records).
pub enum After {
    Nothing,
    /// A repetition was found and verified: plan it from this snapshot of the records.
    Plan {
        found: Found,
        records: Vec<Record>,
        calls: usize,
    },
    /// The call at `index` left the repetition.
    Diverged {
        seq: u64,
        call: usize,
        period: usize,
    },
    /// The calls since the last divergence are a kind planned before, of `kind` calls, the
    /// latest its call `call`: it is followed now.
    Adopted {
        seq: u64,
        call: usize,
        kind: usize,
    },
    /// The tracker stopped: nothing is followed any more.
    Stopped,
}

/// Which kind planned before begins with `calls` (an iteration's first calls): its calls,
/// where exactly one kind does.
pub type Recognise<'a> = &'a mut dyn FnMut(&[u64]) -> Option<Arc<[u64]>>;

/// Calls after a divergence within which a kind planned before may be recognised.
const RECOGNISE_CALLS: usize = 64;

struct Tracker {
    /// Every record since tracking (re)started, plus the allocations still live from before.
    records: Vec<Record>,
    /// Tokens of the calls so far (index = call index).
    tokens: Vec<u64>,
    /// The allocation each call made, if it made one (index = call index).
    allocs: Vec<Option<u64>>,
    /// Each call's record's `seq` (index = call index).
    seqs: Vec<u64>,
    /// Calls dropped from the front while an iteration was followed: index `i` here was
    /// `i + dropped` when the iteration was found.
    dropped: usize,
    generation: u64,
    /// Allocation id -> size, of live allocations (tokens name sizes, never ids).
    sizes: HashMap<u64, u64>,
    /// Allocations made in each iteration since the repetition was found, in order: the
    /// iteration's `TensorId::Rel{k}` names (the current one last).
    made: Vec<Vec<u64>>,
    found: Option<Found>,
    next_check: usize,
    stopped: bool,
    /// Set when the call just seen starts an iteration: the period.
    boundary: Option<usize>,
    /// After a divergence: the index of the call that left, from which the calls may yet be
    /// recognised as a kind planned before.
    pending: Option<usize>,
}

static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);

impl Tracker {
    /// Nothing seen yet.
    fn new() -> Tracker {
        Tracker {
            records: Vec::new(),
            tokens: Vec::new(),
            allocs: Vec::new(),
            seqs: Vec::new(),
            dropped: 0,
            generation: 0,
            sizes: HashMap::new(),
            made: Vec::new(),
            found: None,
            next_check: CHECK,
            stopped: false,
            boundary: None,
            pending: None,
        }
    }
}

/// Sees one record: the sequence so far, updated under the lock; what the caller does next
/// (an iteration boundary, then planning or a divergence) is returned, for after the lock.
pub fn see(r: &Record, recognise: Recognise) -> (Option<usize>, After) {
    let Ok(mut g) = TRACKER.lock() else {
        return (None, After::Nothing);
    };
    let t = g.get_or_insert_with(Tracker::new);
    let after = t.observe(r, recognise);
    (t.boundary.take(), after)
}

impl Tracker {
    fn observe(&mut self, r: &Record, recognise: Recognise) -> After {
        if self.stopped {
            return After::Nothing;
        }
        if self.records.len() >= MAX_RECORDS && !self.compact() {
            self.stopped = true;
            let followed = self.found.take().is_some();
            log(
                Level::Warn,
                &format!(
                    "tracker: {} in {MAX_RECORDS} records; execution stays passive",
                    if followed {
                        "an iteration too long to follow"
                    } else {
                        "no repeating iteration"
                    }
                ),
            );
            self.records = Vec::new();
            return After::Stopped;
        }
        self.records.push(r.clone());
        if let Event::Alloc {
            alloc,
            size,
            result: 0,
            ..
        } = r.event
        {
            self.sizes.insert(alloc, size);
        }
        let Some(token) = iteration::token(&r.event, &self.sizes) else {
            return After::Nothing;
        };
        if let Event::Free {
            alloc: Some(id),
            result: 0,
            ..
        } = r.event
        {
            self.sizes.remove(&id);
        }
        let index = self.tokens.len();
        self.tokens.push(token);
        self.seqs.push(r.seq);
        self.allocs.push(match r.event {
            Event::Alloc {
                alloc, result: 0, ..
            } => Some(alloc),
            _ => None,
        });
        if let Some(f) = self.found.clone() {
            if (index - f.boundary).is_multiple_of(f.period) {
                self.made.push(Vec::new());
                self.boundary = Some(f.period);
            }
            if let Event::Alloc {
                alloc, result: 0, ..
            } = r.event
                && let Some(m) = self.made.last_mut()
            {
                m.push(alloc);
            }
            // The repetition continues only if this call repeats the one a period before, or
            // the kind's call at its offset.
            let call = (index - f.boundary) % f.period;
            let expected = match &f.expected {
                Some(kind) => kind.get(call).copied(),
                None => index.checked_sub(f.period).map(|i| self.tokens[i]),
            };
            if expected != Some(token) {
                self.restart(index);
                // From the next call on, the calls from this one may be a kind planned before.
                self.pending = Some(self.tokens.len() - 1);
                return After::Diverged {
                    seq: r.seq,
                    call,
                    period: f.period,
                };
            }
            return After::Nothing;
        }
        if let Some(a) = self.recognise(r.seq, recognise) {
            return a;
        }
        if self.tokens.len() < self.next_check {
            return After::Nothing;
        }
        self.next_check = self.tokens.len() + CHECK.max(self.tokens.len() / 4);
        self.detect()
    }

    /// Finds and verifies a repetition reaching the latest call.
    fn detect(&mut self) -> After {
        let mut sorted = self.records.clone();
        sorted.sort_by_key(|r| r.seq);
        let calls = iteration::calls(&sorted);
        let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
        let Some(region) = iteration::detect(&tokens) else {
            return After::Nothing;
        };
        if region.end != tokens.len() {
            return After::Nothing;
        }
        let Ok(st) = iteration::steady_from(&calls, region, |r| r.cuts().start) else {
            return After::Nothing;
        };
        // Records arrive nearly in `seq` order (a free takes its number before it is forwarded);
        // from here the order of `seq` is the order of the calls.
        self.tokens = tokens.clone();
        self.allocs = calls
            .iter()
            .map(|c| match c.effect {
                iteration::Effect::Alloc { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        self.seqs = calls.iter().map(|c| c.seq).collect();
        self.dropped = 0;
        self.pending = None;
        let n = tokens.len();
        self.generation += 1;
        let found = Found {
            period: st.period,
            boundary: 0,
            start_seq: calls[st.start].seq,
            generation: self.generation,
            expected: None,
        };
        self.found = Some(found.clone());
        self.align(st.start);
        let found = self.found.clone().expect("set above");
        After::Plan {
            found,
            records: sorted,
            calls: n,
        }
    }

    /// Starts detection again at call `index`: the records from there, and the allocations
    /// still live before it (tensor sizes and lifetimes need them).
    fn restart(&mut self, index: usize) {
        self.found = None;
        self.generation += 1;
        self.made.clear();
        let live = &self.sizes;
        let keep_from = self.records.len() - 1;
        let mut kept: Vec<Record> = self.records[..keep_from]
            .iter()
            .filter(|r| matches!(r.event, Event::Alloc { alloc, result: 0, .. } if live.contains_key(&alloc)))
            .cloned()
            .collect();
        kept.push(self.records[keep_from].clone());
        self.records = kept;
        let allocs = self.records.len() - 1;
        // Tokens: the kept allocations, then this call.
        let last = self.tokens[index];
        self.tokens = Vec::new();
        let sizes: HashMap<u64, u64> = HashMap::new();
        for r in &self.records[..allocs] {
            if let Some(t) = iteration::token(&r.event, &sizes) {
                self.tokens.push(t);
            }
        }
        self.tokens.push(last);
        let last_alloc = self.allocs[index];
        self.allocs = self.records[..allocs]
            .iter()
            .map(|r| match r.event {
                Event::Alloc { alloc, .. } => Some(alloc),
                _ => None,
            })
            .collect();
        self.allocs.push(last_alloc);
        let last_seq = self.seqs[index];
        self.seqs = self.records[..allocs].iter().map(|r| r.seq).collect();
        self.seqs.push(last_seq);
        self.dropped = 0;
        self.next_check = self.tokens.len() + CHECK;
    }

    /// After a divergence, within [`RECOGNISE_CALLS`] calls: the calls since it, if they are
    /// the first calls of a kind planned before, are followed as that kind from here. Only from
    /// the kind's first call: every allocation of the iteration is then one seen since, and
    /// the plan's names for them are exact.
    fn recognise(&mut self, seq: u64, recognise: Recognise) -> Option<After> {
        let from = self.pending?;
        let index = self.tokens.len().checked_sub(1)?;
        if index <= from {
            return None;
        }
        if index - from >= RECOGNISE_CALLS {
            self.pending = None;
            return None;
        }
        // At 2, 4, 8... calls: each look-up reads every kind.
        if !(index - from + 1).is_power_of_two() {
            return None;
        }
        let kind = recognise(&self.tokens[from..=index])?;
        let call = index - from;
        let calls = kind.len();
        self.pending = None;
        self.follow(from, index, kind);
        Some(After::Adopted {
            seq,
            call,
            kind: calls,
        })
    }

    /// The iteration under way, from call `start`, is of a kind planned before (`kind`, its
    /// calls): followed from here as a detection of its own. Only this iteration's allocations
    /// are named (`Rel { back: 0 }`): the iterations before it were of another kind.
    fn follow(&mut self, start: usize, index: usize, kind: Arc<[u64]>) {
        self.generation += 1;
        self.made = vec![
            self.allocs[start..=index]
                .iter()
                .flatten()
                .copied()
                .collect(),
        ];
        self.boundary = (start == index).then_some(kind.len());
        self.found = Some(Found {
            period: kind.len(),
            boundary: start,
            start_seq: self.seqs[start],
            generation: self.generation,
            expected: Some(kind),
        });
    }

    /// While an iteration is followed: the calls before the previous iteration go, with their
    /// records (but for the allocations still live) and their allocation lists. False when too
    /// few would go (an iteration of more than a quarter of the records kept).
    fn compact(&mut self) -> bool {
        let Some(f) = self.found.as_mut() else {
            return false;
        };
        let (n, p) = (self.tokens.len(), f.period);
        if n == 0 || n <= f.boundary {
            return false;
        }
        let current = f.boundary + (n - 1 - f.boundary) / p * p;
        let Some(cut) = current.checked_sub(p).filter(|&c| c >= MAX_RECORDS / 4) else {
            return false;
        };
        f.boundary = current - cut;
        self.tokens.drain(..cut);
        self.allocs.drain(..cut);
        self.seqs.drain(..cut);
        self.dropped += cut;
        let from = self.seqs.first().copied().unwrap_or(u64::MAX);
        let live = &self.sizes;
        self.records.retain(|r| {
            r.seq >= from
                || matches!(r.event, Event::Alloc { alloc, result: 0, .. } if live.contains_key(&alloc))
        });
        let keep = self.made.len().saturating_sub(2);
        self.made.drain(..keep);
        true
    }

    /// Iterations start at call `start` (and every period from there): the boundary is the
    /// last such call at or before the latest one, and each iteration's allocations are listed
    /// again (its `TensorId::Rel` names).
    fn align(&mut self, start: usize) {
        let Some(f) = self.found.as_mut() else { return };
        let (n, p) = (self.tokens.len(), f.period);
        if start >= n {
            return;
        }
        let first = start % p;
        f.boundary = start + (n - 1 - start) / p * p;
        self.made = (first..n)
            .step_by(p)
            .map(|b| {
                self.allocs[b..(b + p).min(n)]
                    .iter()
                    .flatten()
                    .copied()
                    .collect()
            })
            .collect();
    }
}

/// The planner's model cut the iteration at call `start` of detection `generation`: from
/// now on iterations begin there, so that the plan's call offsets and tensor names are the
/// tracker's. False when the tracker has moved on (a divergence since).
pub fn realign(generation: u64, start: usize) -> bool {
    let Ok(mut g) = TRACKER.lock() else {
        return false;
    };
    g.as_mut().is_some_and(|t| t.realign(generation, start))
}

impl Tracker {
    fn realign(&mut self, generation: u64, start: usize) -> bool {
        let Some(p) = self.found.as_ref().map(|f| f.period) else {
            return false;
        };
        if self.generation != generation {
            return false;
        }
        // An index from before calls were dropped: the same phase among those kept.
        let start = start
            .checked_sub(self.dropped)
            .unwrap_or_else(|| (start % p + p - self.dropped % p) % p);
        self.align(start);
        true
    }
}

impl Tracker {
    /// The allocation a plan's tensor name stands for in the current iteration, if it exists
    /// (`Persistent`: the same allocation; `Rel{back, k}`: the k-th allocation of the
    /// iteration `back` before this one).
    fn resolve(&self, name: TensorId) -> Option<u64> {
        match name {
            TensorId::Persistent { alloc, .. } => Some(alloc),
            TensorId::Rel { back, k, .. } => {
                let i = self.made.len().checked_sub(1 + back)?;
                self.made[i].get(k).copied()
            }
        }
    }
}

/// The records of detection `generation` so far, in call order (None: the tracker moved on).
/// The bridge takes them again once the durations of the calls that were still running when
/// the iteration was found have come in.
pub fn records(generation: u64) -> Option<Vec<Record>> {
    let g = TRACKER.lock().ok()?;
    let t = g.as_ref()?;
    if t.generation != generation {
        return None;
    }
    let mut r = t.records.clone();
    r.sort_by_key(|r| r.seq);
    Some(r)
}

/// The tokens of calls `from .. from + len` of detection `generation` (None: the tracker moved
/// on, or those calls are not all seen yet).
pub fn tokens(generation: u64, from: usize, len: usize) -> Option<Vec<u64>> {
    let g = TRACKER.lock().ok()?;
    let t = g.as_ref()?;
    if t.generation != generation {
        return None;
    }
    let from = from.checked_sub(t.dropped)?;
    t.tokens
        .get(from..from.checked_add(len)?)
        .map(<[u64]>::to_vec)
}

/// The offset within the iteration of the next call (None: no iteration is being followed).
pub fn next_offset() -> Option<usize> {
    let g = TRACKER.lock().ok()?;
    let t = g.as_ref()?;
    let f = t.found.as_ref()?;
    Some((t.tokens.len() - f.boundary) % f.period)
}

/// The offset within the iteration of the call just seen, if it was followed (not a divergence).
pub fn last_offset() -> Option<usize> {
    let g = TRACKER.lock().ok()?;
    let t = g.as_ref()?;
    let f = t.found.as_ref()?;
    Some((t.tokens.len().checked_sub(1)? - f.boundary) % f.period)
}

/// [`Tracker::resolve`] on the process's tracker (for the executor).
pub fn resolve(name: TensorId) -> Option<u64> {
    TRACKER.lock().ok()?.as_ref()?.resolve(name)
}

#[cfg(test)]
mod tests;
