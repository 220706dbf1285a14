//! The observed sequence: every record the hooks build (whether or not a trace file is
//! written) as it happens, online iteration detection, and the position of each call within
//! the iteration, which the bridge, the executor and recomputation ask for.
//!
//! SINGA's way, on Marmoset's calls: when a repetition may be there (`periods`: the latest calls
//! repeat the ones a period before, over one full period and the next's first calls, in a
//! period that frees what it allocates), or at intervals that grow with the stream (a quarter of
//! it), the calls so far are tokenised (`planner::iteration::calls`), the repetition is found
//! (`detect`) and verified (`steady`: every touched tensor named alike in consecutive
//! iterations, or, where one full iteration is all there is, in it and the next's first calls).
//! A repetition counts only if it reaches the latest call, so that the next call's place in the
//! iteration is known: it must repeat the call one period before it, and, once a plan names the
//! tensors, touch by each name the API gives it the allocation the plan's name stands for now. A
//! call that does not is a divergence (Capuchin's "the program left the measured sequence"): the
//! guided plan stops for the rest of the iteration, and detection starts again from the
//! divergence, with the allocations still live.

use crate::core::config::Level;
use crate::core::state::log;
use planner::iteration::{self, TensorId};
use planner::trace::{Event, Record};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

mod periods;
use periods::Periods;

/// For each call of an iteration, the plan's names of the allocations the API names it
/// touching (`planner::iteration::Steady::touched`).
pub type Names = Arc<[Vec<TensorId>]>;

/// Calls between two detection attempts at least, where no repetition is known to be there
/// (SINGA checks every few hundred allocations); such attempts are a quarter of the calls seen
/// apart at least, and those where a repetition may be there a thirty-second, so that
/// detection's cost over a long stream stays proportional to it.
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
    /// Verified over one full iteration and the next's first calls only.
    pub one_period: bool,
    /// Once a plan guides: the names each call must touch by (None: its calls only).
    pub names: Option<Names>,
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

/// Which kind planned before begins with `calls` (an iteration's first calls): its calls and
/// its plan's names, where exactly one kind does.
pub type Recognise<'a> = &'a mut dyn FnMut(&[u64]) -> Option<(Arc<[u64]>, Option<Names>)>;

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
    /// The candidate periods of the calls since detection (re)started.
    periods: Periods,
    /// The first call at which a ripe period may be tried (but one a detection waits for).
    next_try: usize,
    /// The first call at which detection runs whatever the candidates.
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
            periods: Periods::new(),
            next_try: 0,
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
        // What the call allocated and freed (the freed allocation stays known until the call
        // has been followed: the plan may name it).
        let (made, freeing) = match r.event {
            Event::Alloc {
                size, result: 0, ..
            } => (size, None),
            Event::Free {
                alloc: Some(id),
                result: 0,
                ..
            } => (0, Some(id)),
            _ => (0, None),
        };
        let freed = freeing
            .and_then(|id| self.sizes.get(&id).copied())
            .unwrap_or(0);
        let after = self.call(r, token, made, freed, recognise);
        if let Some(id) = freeing {
            self.sizes.remove(&id);
        }
        after
    }

    /// [`Tracker::observe`] for a call with token `token`, which allocated `made` bytes and
    /// freed `freed`.
    fn call(
        &mut self,
        r: &Record,
        token: u64,
        made: u64,
        freed: u64,
        recognise: Recognise,
    ) -> After {
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
            // the kind's call at its offset, and touches what the plan's names stand for.
            let call = (index - f.boundary) % f.period;
            let expected = match &f.expected {
                Some(kind) => kind.get(call).copied(),
                None => index.checked_sub(f.period).map(|i| self.tokens[i]),
            };
            let named = f
                .names
                .as_ref()
                .and_then(|n| n.get(call))
                .is_none_or(|names| self.touches_as_named(&r.event, names));
            if expected != Some(token) || !named {
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
        let ripe = self.periods.see(&self.tokens, made, freed);
        let n = self.tokens.len();
        let due = n >= self.next_check;
        let ripe = ripe.filter(|&(_, waited)| waited || n >= self.next_try);
        if !due && ripe.is_none() {
            return After::Nothing;
        }
        if let Some((p, _)) = ripe {
            self.periods.tried(p);
            self.next_try = n + n / 32;
        }
        if due {
            self.next_check = n + CHECK.max(n / 4);
        }
        self.detect()
    }

    /// Whether the call `event` touches, by each allocation the API names (and the one it
    /// frees), the allocation the plan's name there stands for now; a name that stands for none
    /// (made by an iteration no longer followed, or freed) is no action's, and passes.
    fn touches_as_named(&self, event: &Event, names: &[TensorId]) -> bool {
        let mut ids: Vec<u64> = if matches!(event, Event::Launch { .. }) {
            Vec::new()
        } else {
            event.touches().iter().map(|t| t.alloc).collect()
        };
        if let Event::Free {
            alloc: Some(id),
            result: 0,
            ..
        } = *event
        {
            ids.push(id);
        }
        ids.len() == names.len()
            && ids
                .iter()
                .zip(names)
                .all(|(&id, &name)| self.resolve(name).is_none_or(|a| a == id))
    }

    /// Finds and verifies a repetition reaching the latest call.
    fn detect(&mut self) -> After {
        let mut sorted = self.records.clone();
        sorted.sort_by_key(|r| r.seq);
        let calls = iteration::calls(&sorted);
        let tokens: Vec<u64> = calls.iter().map(|c| c.token).collect();
        let Some(region) = iteration::detect_at_end(&tokens) else {
            return After::Nothing;
        };
        let not = |why: &str| {
            log(
                Level::Debug,
                &format!(
                    "tracker: the last {} calls repeat with a period of {}; not an iteration: {why}",
                    region.end - region.start,
                    region.period
                ),
            );
            After::Nothing
        };
        if !steady_bytes(&calls, region) {
            return not("it keeps what it allocates");
        }
        // One full period is enough once the cuts that leave it whole and the next's first
        // calls reach its boundary, the quietest call of its first period: the model's cut must
        // be one of them. Tried again as soon as they will.
        if region.one_period() {
            let quiet = iteration::quietest(&calls, region);
            if !region.cuts().contains(&quiet) {
                let run = quiet - region.start + iteration::NEXT;
                self.periods.wait(region.period, run);
                return not("the next has not passed its boundary yet");
            }
        }
        let st = match iteration::steady_from(&calls, region, |r| r.cuts().start) {
            Ok(st) => st,
            Err(d) => return not(&d.to_string()),
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
            one_period: st.iterations == 1,
            names: None,
        };
        self.found = Some(found.clone());
        self.periods.clear();
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
        self.next_try = self.tokens.len();
        // The candidates of the calls kept: the allocations, then this call.
        self.periods.clear();
        for (k, r) in self.records.iter().enumerate() {
            let (made, freed) = match r.event {
                Event::Alloc {
                    size, result: 0, ..
                } => (size, 0),
                Event::Free {
                    alloc: Some(id),
                    result: 0,
                    ..
                } => (0, self.sizes.get(&id).copied().unwrap_or(0)),
                _ => (0, 0),
            };
            self.periods.see(&self.tokens[..=k], made, freed);
        }
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
        let (kind, names) = recognise(&self.tokens[from..=index])?;
        let call = index - from;
        let calls = kind.len();
        self.pending = None;
        self.follow(from, index, kind, names);
        Some(After::Adopted {
            seq,
            call,
            kind: calls,
        })
    }

    /// The iteration under way, from call `start`, is of a kind planned before (`kind`, its
    /// calls): followed from here as a detection of its own. Only this iteration's allocations
    /// are named (`Rel { back: 0 }`): the iterations before it were of another kind.
    fn follow(&mut self, start: usize, index: usize, kind: Arc<[u64]>, names: Option<Names>) {
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
            one_period: false,
            names,
        });
        self.periods.clear();
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

/// Whether `region` of `calls` (ending with the last) frees what it allocates, by the rules the
/// candidates are ripe by (see `periods`), on the calls in the order of their records.
fn steady_bytes(calls: &[iteration::Call], region: iteration::Region) -> bool {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let (mut held, mut allocated) = (
        Vec::with_capacity(calls.len()),
        Vec::with_capacity(calls.len()),
    );
    let (mut h, mut a) = (0u64, 0u64);
    for c in calls {
        match c.effect {
            iteration::Effect::Alloc { id, size } => {
                sizes.insert(id, size);
                h += size;
                a += size;
            }
            iteration::Effect::Free { id } => h = h.saturating_sub(sizes.remove(&id).unwrap_or(0)),
            iteration::Effect::Use => {}
        }
        held.push(h);
        allocated.push(a);
    }
    let low = periods::fewest(&held, region.start, region.period);
    periods::ripe(&held, &allocated, region.start, region.period, low)
}

/// The planner's model cut the iteration at call `start` of detection `generation`: from
/// now on iterations begin there, so that the plan's call offsets and tensor names are the
/// tracker's. False when the tracker has moved on (a divergence since).
pub fn realign(generation: u64, start: usize, names: Option<Names>) -> bool {
    let Ok(mut g) = TRACKER.lock() else {
        return false;
    };
    g.as_mut()
        .is_some_and(|t| t.realign(generation, start, names))
}

impl Tracker {
    /// [`realign`]; from now on each call must touch what the plan's `names` stand for.
    fn realign(&mut self, generation: u64, start: usize, names: Option<Names>) -> bool {
        let Some(f) = self.found.as_mut() else {
            return false;
        };
        if self.generation != generation {
            return false;
        }
        let p = f.period;
        if names.as_ref().is_some_and(|n| n.len() != p) {
            return false;
        }
        f.names = names;
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
    /// (`Persistent`: the same allocation, while it is not freed; `Rel{back, k}`: the k-th
    /// allocation of the iteration `back` before this one).
    fn resolve(&self, name: TensorId) -> Option<u64> {
        match name {
            TensorId::Persistent { alloc, .. } => self.sizes.contains_key(&alloc).then_some(alloc),
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
