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

/// Sees one record: the sequence so far, updated under the lock; what the caller does next
/// (an iteration boundary, then planning or a divergence) is returned, for after the lock.
pub fn see(r: &Record, recognise: Recognise) -> (Option<usize>, After) {
    let Ok(mut g) = TRACKER.lock() else {
        return (None, After::Nothing);
    };
    let t = g.get_or_insert_with(|| Tracker {
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
    });
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
mod tests {
    use super::*;
    use planner::trace::{Access, Touch};

    struct Stream {
        t: Tracker,
        seq: u64,
        next_alloc: u64,
        /// Kinds planned before (their calls), recognised from an iteration's first calls.
        kinds: Vec<Arc<[u64]>>,
    }

    impl Stream {
        fn new() -> Stream {
            Stream {
                t: Tracker {
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
                },
                seq: 1,
                next_alloc: 1,
                kinds: Vec::new(),
            }
        }
        fn push(&mut self, event: Event) -> After {
            self.seq += 1;
            let kinds = self.kinds.clone();
            self.t.observe(
                &Record {
                    seq: self.seq,
                    t_ns: 0,
                    tid: 1,
                    event,
                },
                &mut |calls: &[u64]| kinds.iter().find(|k| k.starts_with(calls)).cloned(),
            )
        }
        fn alloc(&mut self, size: u64) -> (u64, After) {
            let id = self.next_alloc;
            self.next_alloc += 1;
            let a = self.push(Event::Alloc {
                api: "cudaMalloc".into(),
                alloc: id,
                ptr: id << 32,
                size,
                stream: None,
                result: 0,
            });
            (id, a)
        }
        fn free(&mut self, id: u64) -> After {
            self.push(Event::Free {
                api: "cudaFree".into(),
                ptr: id << 32,
                alloc: Some(id),
                size: None,
                stream: None,
                result: 0,
            })
        }
        fn launch(&mut self, func: u64, allocs: &[u64]) -> After {
            self.push(Event::Launch {
                api: "cudaLaunchKernel".into(),
                func,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                stream: None,
                touches: allocs
                    .iter()
                    .map(|&a| Touch {
                        alloc: a,
                        offset: 0,
                        bytes: 0,
                        access: Access::Rw,
                    })
                    .collect(),
                result: 0,
            })
        }
        /// One training-like iteration of 7 calls (kernel `f` in the middle); what each said.
        fn iteration(&mut self, w: u64, f: u64) -> Vec<After> {
            self.iteration_from(w, f, 4096)
        }
        /// The same, its first allocation of `first` bytes.
        fn iteration_from(&mut self, w: u64, f: u64, first: u64) -> Vec<After> {
            let mut out = Vec::new();
            let (a, r) = self.alloc(first);
            out.push(r);
            let (b, r) = self.alloc(8192);
            out.push(r);
            out.push(self.launch(1, &[w, a]));
            out.push(self.launch(f, &[a, b]));
            out.push(self.launch(3, &[b, w]));
            out.push(self.free(a));
            out.push(self.free(b));
            out
        }
    }

    fn plans(v: &[After]) -> Vec<&Found> {
        v.iter()
            .filter_map(|a| match a {
                After::Plan { found, .. } => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_repeating_iteration_is_found_verified_and_followed_until_it_diverges() {
        let mut s = Stream::new();
        let (w, _) = s.alloc(1 << 20);
        let mut seen = Vec::new();
        // Not before CHECK calls.
        for _ in 0..CHECK / 7 {
            seen.extend(s.iteration(w, 2));
        }
        assert!(plans(&seen).is_empty());
        seen.clear();
        for _ in 0..2 {
            seen.extend(s.iteration(w, 2));
        }
        let found = plans(&seen);
        assert_eq!(found.len(), 1, "found once, at a check");
        assert_eq!(found[0].period, 7);
        // Boundaries are the iterations' first calls (an alloc of 4096 B after the weight).
        assert_eq!((found[0].boundary - 1) % 7, 0);
        // The tensors of the current iteration are named as the plan names them.
        assert_eq!(
            resolve_in(
                &s.t,
                TensorId::Persistent {
                    alloc: w,
                    size: 1 << 20
                }
            ),
            Some(w)
        );
        // The same iteration again: followed, nothing said.
        let again = s.iteration(w, 2);
        assert!(again.iter().all(|a| matches!(a, After::Nothing)));
        let k0 = resolve_in(
            &s.t,
            TensorId::Rel {
                back: 0,
                k: 0,
                size: 4096,
            },
        );
        assert_eq!(
            k0,
            Some(s.next_alloc - 2),
            "the 0th allocation of this iteration"
        );
        // Another kernel at call 3: a divergence there, once.
        let changed = s.iteration(w, 9);
        let div: Vec<(usize, usize)> = changed
            .iter()
            .filter_map(|a| match a {
                After::Diverged { call, period, .. } => Some((*call, *period)),
                _ => None,
            })
            .collect();
        assert_eq!(div, vec![(3, 7)]);
        assert!(s.t.found.is_none());
        // The new sequence repeats: found again, from the divergence on.
        let mut seen = Vec::new();
        for _ in 0..60 {
            seen.extend(s.iteration(w, 9));
        }
        let found = plans(&seen);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].period, 7);
    }

    #[test]
    fn the_models_cut_becomes_the_iteration_boundary() {
        let mut s = Stream::new();
        let (w, _) = s.alloc(1 << 20);
        let mut seen = Vec::new();
        for _ in 0..CHECK / 7 + 2 {
            seen.extend(s.iteration(w, 2));
        }
        let f = plans(&seen)[0].clone();
        // Cut two calls later (after the iteration's two allocations): those two now belong to
        // the iteration before, and the next iteration starts at its first launch.
        assert!(realign_in(&mut s.t, f.generation, f.boundary + 2));
        let g = s.t.found.clone().unwrap();
        assert_eq!((g.boundary - f.boundary) % 7, 2);
        let before = s.t.made.len();
        let (a, _) = s.alloc(4096);
        assert_eq!(
            s.t.made.len(),
            before,
            "an allocation ends the iteration now"
        );
        assert_eq!(s.t.made.last().unwrap().last(), Some(&a));
        s.alloc(8192);
        s.launch(1, &[w, a]);
        assert_eq!(s.t.made.len(), before + 1, "the first launch starts one");
        // A stale generation changes nothing.
        assert!(!realign_in(&mut s.t, f.generation + 1, f.boundary));
    }

    fn realign_in(t: &mut Tracker, generation: u64, start: usize) -> bool {
        t.realign(generation, start)
    }

    fn next_offset_in(t: &Tracker) -> Option<usize> {
        let f = t.found.as_ref()?;
        Some((t.tokens.len() - f.boundary) % f.period)
    }

    fn resolve_in(t: &Tracker, name: TensorId) -> Option<u64> {
        t.resolve(name)
    }

    /// The calls of the last `period` calls seen (the kind of the iteration just run, from its
    /// first call), with the tracker's iterations cut there, as the bridge cuts them where the
    /// planner's model did.
    fn last_kind(t: &mut Tracker, period: usize) -> Arc<[u64]> {
        let start = t.tokens.len() - period;
        let generation = t.generation;
        assert!(t.realign(generation, start + t.dropped));
        t.tokens[start..].into()
    }

    #[test]
    fn a_kind_planned_before_is_followed_from_its_first_call() {
        let mut s = Stream::new();
        let (w, _) = s.alloc(1 << 20);
        // Kind A (first allocation 4096 B) found; its calls kept as a planned kind would be.
        let mut seen = Vec::new();
        for _ in 0..CHECK / 7 + 2 {
            seen.extend(s.iteration_from(w, 2, 4096));
        }
        assert_eq!(plans(&seen).len(), 1);
        let a = last_kind(&mut s.t, 7);
        // Kind B (first allocation 2048 B) found too.
        seen.clear();
        for _ in 0..CHECK / 7 + 2 {
            seen.extend(s.iteration_from(w, 2, 2048));
        }
        assert!(!plans(&seen).is_empty(), "kind B found");
        let b = last_kind(&mut s.t, 7);
        assert_ne!(a, b);
        s.kinds = vec![a.clone(), b.clone()];
        // A again: a divergence from B at its first call; the calls from there begin A and
        // only A, recognised at the next call (A's call 1) and followed.
        let back = s.iteration_from(w, 2, 4096);
        let said: Vec<&After> = back
            .iter()
            .filter(|x| !matches!(x, After::Nothing))
            .collect();
        assert_eq!(said.len(), 2, "{}", said.len());
        assert!(matches!(said[0], After::Diverged { call: 0, .. }));
        assert!(matches!(
            said[1],
            After::Adopted {
                call: 1,
                kind: 7,
                ..
            }
        ));
        // Followed from there: a whole iteration more says nothing.
        let again = s.iteration_from(w, 2, 4096);
        assert!(again.iter().all(|x| matches!(x, After::Nothing)));
        let f = s.t.found.clone().expect("followed");
        assert_eq!(f.expected.as_deref(), Some(&a[..]));
        // Offsets are the kind's: the next call is its call 0.
        assert_eq!(next_offset_in(&s.t), Some(0));
        // The adopted iteration's allocations are named exactly.
        assert_eq!(
            resolve_in(
                &s.t,
                TensorId::Rel {
                    back: 1,
                    k: 0,
                    size: 4096
                }
            ),
            Some(s.next_alloc - 4)
        );
        // B again is recognised the same way; an unknown kind (kernel 5 at call 3) diverges,
        // and detection starts again.
        let to_b = s.iteration_from(w, 2, 2048);
        assert!(to_b.iter().any(|x| matches!(x, After::Adopted { .. })));
        let other = s.iteration_from(w, 5, 2048);
        assert!(
            other
                .iter()
                .any(|x| matches!(x, After::Diverged { call: 3, .. }))
        );
        assert!(s.t.found.is_none());
    }

    #[test]
    fn a_followed_iteration_keeps_only_its_last_two_iterations() {
        let mut s = Stream::new();
        let (w, _) = s.alloc(1 << 20);
        for _ in 0..CHECK / 7 + 2 {
            s.iteration(w, 2);
        }
        let found = s.t.found.clone().expect("found");
        let generation = found.generation;
        // As if the records had reached the bound: the calls before the previous iteration go.
        let n = s.t.tokens.len();
        let kept_before = s.t.records.len();
        while s.t.tokens.len() < MAX_RECORDS / 4 + 3 * 7 {
            s.iteration(w, 2);
        }
        assert!(s.t.compact());
        // The previous iteration and the one just ended: 14 calls, their 14 records and the
        // weight's allocation.
        assert_eq!(s.t.tokens.len(), 14);
        assert!(s.t.dropped >= MAX_RECORDS / 4);
        assert_eq!(s.t.records.len(), 15, "{kept_before}");
        // Followed on: the next iteration says nothing, and offsets and names still hold.
        let next = s.iteration(w, 2);
        assert!(next.iter().all(|x| matches!(x, After::Nothing)));
        assert_eq!(next_offset_in(&s.t), Some(0));
        assert_eq!(
            resolve_in(
                &s.t,
                TensorId::Rel {
                    back: 0,
                    k: 1,
                    size: 8192
                }
            ),
            Some(s.next_alloc - 1)
        );
        // An index from before the drop realigns to the same phase.
        assert!(s.t.realign(generation, found.boundary));
        assert_eq!(next_offset_in(&s.t), Some(0));
        let _ = n;
    }
}
