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

mod cycles;
mod detection;
mod matcher;
mod periods;
use matcher::Matcher;
pub use matcher::kind_hash;
use periods::Periods;
use std::collections::VecDeque;

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
    /// A kind followed whose plan was made from one occurrence: when it repeats back to back,
    /// the repetition is detected and planned again (see [`Tracker::call`]).
    pub provisional: bool,
    /// An iteration seen once, between two of kinds planned before: planned as a kind of its
    /// own, not followed (the program has moved on to the next).
    pub once: Option<Once>,
}

/// An iteration seen once (see [`Found::once`]).
#[derive(Debug, Clone)]
pub struct Once {
    /// The `seq` of the first call after it.
    pub end_seq: u64,
    /// Its calls: the kind's.
    pub tokens: Arc<[u64]>,
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
    /// The latest calls are a kind planned before, of `kind` calls, the latest its call
    /// `call`: it is followed now. `once`: the calls since the program left a plan, up to
    /// this kind's first, are an iteration of a new kind, to plan from these records.
    Adopted {
        seq: u64,
        call: usize,
        kind: usize,
        once: Option<(Found, Vec<Record>)>,
    },
    /// The tracker stopped: nothing is followed any more.
    Stopped,
}

/// The plan's names of the kind planned before that `hash` names, if it is still kept (Some:
/// kept, with its names where its plan has them, and whether that plan was made from one
/// occurrence).
pub type Recognise<'a> = &'a mut dyn FnMut(u64) -> Option<(Option<Names>, bool)>;

/// Recent calls kept at least, to follow a kind from its first call or plan an iteration seen
/// once (more when a kind is longer).
const RECENT: usize = 1 << 16;
/// The longest iteration seen once that is planned, in calls of the longest kind kept.
const ONCE_LONGEST: usize = 4;
/// Kinds the program ran, kept in order (the latest), to expect the next from.
const HISTORY: usize = 64;
/// The longest run of latest kinds looked for in the history.
const CONTEXT: usize = 16;

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
    /// Bytes freed by pooled frees since the last call (no calls themselves): the next call
    /// counts them freed, so that a period's balance of bytes holds them.
    freed_between: u64,
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
    /// The kinds planned before, matched against the calls as they come.
    matcher: Matcher,
    /// The latest calls (token, allocation made, `seq`), the first of them call `recent_from`
    /// of the whole stream; `seen` calls in all.
    recent: VecDeque<(u64, Option<u64>, u64)>,
    recent_from: usize,
    seen: usize,
    /// Where the program left a plan: the first call (of the whole stream) of the iteration it
    /// left, from which the calls up to the next kind recognised are an iteration of a new kind.
    open: Option<usize>,
    /// The kinds whose first calls the calls since `open` still are.
    since_open: Vec<(u64, Arc<[u64]>)>,
    /// The kinds of the latest iterations that ran to their end, in order (their names, and
    /// the call of the whole stream each ended before): what a program that cycles through
    /// kinds runs next (see [`Tracker::expected`]).
    history: VecDeque<(u64, usize)>,
    /// The records older than `records`' (dropped where the program moved to another kind),
    /// while their calls are among the recent ones: a cycle of kinds is planned from them.
    older: VecDeque<Record>,
    /// A cycle of kinds to try as one iteration: its calls, and the call of the whole stream
    /// from which it is tried.
    cycle: Option<(usize, usize)>,
    /// Iterations that ran to their end, in all (what [`Tracker::expected`] depends on).
    ran_count: usize,
    /// The kind expected among kinds that share their first calls, for the kinds' first call
    /// (of the whole stream), `ran_count` then, and whether the calls before ran as a kind
    /// (see [`Tracker::expected_at`]).
    tie: Option<((usize, usize, bool), Option<u64>)>,
    /// Cycles tried (their calls): each is tried twice at most (the second time, two whole
    /// cycles may verify where one did not).
    cycles_tried: Vec<usize>,
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
            freed_between: 0,
            made: Vec::new(),
            found: None,
            periods: Periods::new(),
            next_try: 0,
            next_check: CHECK,
            stopped: false,
            boundary: None,
            matcher: Matcher::default(),
            recent: VecDeque::new(),
            recent_from: 0,
            seen: 0,
            open: None,
            since_open: Vec::new(),
            history: VecDeque::new(),
            older: VecDeque::new(),
            cycle: None,
            cycles_tried: Vec::new(),
            ran_count: 0,
            tie: None,
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
            // No call, but a pooled free still ends its allocation.
            if let Event::Free {
                alloc: Some(id),
                result: 0,
                ..
            } = r.event
            {
                self.freed_between += self.sizes.remove(&id).unwrap_or(0);
            }
            return After::Nothing;
        };
        // The tracker follows and matches calls as kinds know them; detection tokenises the
        // records again, sizes of frees and all.
        let token = iteration::kind_token(&iteration::effect(&r.event), token);
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
            .unwrap_or(0)
            + std::mem::take(&mut self.freed_between);
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
        let alloc = match r.event {
            Event::Alloc {
                alloc, result: 0, ..
            } => Some(alloc),
            _ => None,
        };
        self.tokens.push(token);
        self.seqs.push(r.seq);
        self.allocs.push(alloc);
        self.recent(token, alloc, r.seq);
        self.matcher.feed(token);
        if let Some(f) = self.found.clone() {
            if let Some(planned) = self.try_cycle() {
                return planned;
            }
            if (index - f.boundary).is_multiple_of(f.period) {
                if index >= f.boundary + f.period {
                    self.ran(
                        kind_hash(&self.tokens[index - f.period..index]),
                        self.seen - 1,
                    );
                }
                // A kind planned from one occurrence, followed whole twice: its repetition is
                // detected and planned as any other (the plan of a steady repetition names what
                // crosses from one iteration into the next; one occurrence cannot).
                if f.provisional && index - f.boundary >= 2 * f.period {
                    let (found, made) = (self.found.take(), std::mem::take(&mut self.made));
                    let planned = self.detect();
                    if matches!(planned, After::Plan { .. }) {
                        return planned;
                    }
                    // Not found: followed as it was, its plan kept.
                    self.found = found.map(|f| Found {
                        provisional: false,
                        ..f
                    });
                    self.made = made;
                }
                self.made.push(Vec::new());
                self.boundary = Some(f.period);
                if let Some(a) = self.switch(r.seq, token, recognise) {
                    return a;
                }
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
                // The calls of the iteration it left, from its first, begin another.
                let from = self.seen - 1 - call;
                self.open = Some(from);
                self.since_open = self
                    .matcher
                    .kinds()
                    .filter(|(_, k)| {
                        k.len() > call
                            && self
                                .recent
                                .range(from - self.recent_from..)
                                .zip(k.iter())
                                .all(|(c, t)| c.0 == *t)
                    })
                    .map(|(h, k)| (h, k.clone()))
                    .collect();
                self.restart(index, index - call);
                return After::Diverged {
                    seq: r.seq,
                    call,
                    period: f.period,
                };
            }
            return After::Nothing;
        }
        if let Some(a) = self.adopt(r.seq, recognise) {
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

    /// Keeps call `token` (which made `alloc`, record `seq`) among the recent calls.
    fn recent(&mut self, token: u64, alloc: Option<u64>, seq: u64) {
        self.recent.push_back((token, alloc, seq));
        self.seen += 1;
        let keep = RECENT.max((ONCE_LONGEST + 1) * self.matcher.longest());
        while self.recent.len() > keep {
            self.recent.pop_front();
            self.recent_from += 1;
        }
    }

    /// The kinds planned before (their names and calls), matched from now on.
    fn set_kinds(&mut self, kinds: Vec<(u64, Arc<[u64]>)>) {
        self.matcher.set(kinds);
    }

    /// While no plan is followed: the kind planned before that the iteration under way is, if
    /// one is known, followed from here. Where the program left a plan an iteration began: the
    /// kinds whose first calls the calls since are, until one alone is left. Elsewhere, a kind
    /// the latest calls match (see `matcher`) from its first call; then the calls since the
    /// program left a plan, up to that first call, are an iteration of a new kind, to be
    /// planned from this one occurrence.
    fn adopt(&mut self, seq: u64, recognise: Recognise) -> Option<After> {
        if let Some(from) = self.open
            && !self.since_open.is_empty()
            && from >= self.recent_from
        {
            let n = self.seen - from;
            let latest = self.recent.back().map(|c| c.0);
            self.since_open
                .retain(|(_, k)| k.get(n - 1).copied() == latest);
            // One kind left, or, of kinds that share their first calls, the one expected.
            let pick = match self.since_open.len() {
                0 => return None,
                1 => 0,
                _ => {
                    let expected = self.expected_at(from, false)?;
                    self.since_open.iter().position(|(h, _)| *h == expected)?
                }
            };
            let (hash, kind) = self.since_open.swap_remove(pick);
            self.since_open.clear();
            let (names, provisional) = recognise(hash)?;
            self.open = None;
            let calls = kind.len();
            self.follow(from, kind, names, provisional);
            return Some(After::Adopted {
                seq,
                call: n - 1,
                kind: calls,
                once: None,
            });
        }
        let (matched, mut tied) = self.matcher.under_way()?;
        let first = self.seen - matched;
        if first < self.recent_from {
            return None;
        }
        // The calls since the program left a plan, up to this kind's first, ran as a kind of
        // their own (planned from this occurrence): the kind expected next is the one after.
        let pick = match tied.len() {
            1 => 0,
            _ => {
                let expected = self.expected_at(first, true)?;
                tied.iter().position(|(h, _)| *h == expected)?
            }
        };
        let (hash, kind) = tied.swap_remove(pick);
        let (names, provisional) = recognise(hash)?;
        if let Some(h) = self.once_kind(first) {
            self.ran(h, first);
        }
        let once = self.open.take().and_then(|from| self.once(from, first));
        let calls = kind.len();
        self.follow(first, kind, names, provisional);
        Some(After::Adopted {
            seq,
            call: matched - 1,
            kind: calls,
            once,
        })
    }

    /// Calls `from .. to` (of the whole stream), an iteration seen once: what the bridge plans
    /// it from. None when it is not all among the recent calls and records, or longer than
    /// [`ONCE_LONGEST`] of the longest kind kept (calls of a program that no plan fits).
    fn once(&self, from: usize, to: usize) -> Option<(Found, Vec<Record>)> {
        if from < self.recent_from
            || to <= from + 1
            || to - from > ONCE_LONGEST * self.matcher.longest()
        {
            return None;
        }
        let at = |g: usize| self.recent[g - self.recent_from];
        let tokens: Arc<[u64]> = (from..to).map(|g| at(g).0).collect();
        let (start_seq, end_seq) = (at(from).2, at(to).2);
        if !self.records.iter().any(|r| r.seq == start_seq) {
            return None;
        }
        let mut records = self.records.clone();
        records.sort_by_key(|r| r.seq);
        Some((
            Found {
                period: to - from,
                boundary: 0,
                start_seq,
                generation: self.generation,
                expected: None,
                one_period: true,
                names: None,
                provisional: false,
                once: Some(Once { end_seq, tokens }),
            },
            records,
        ))
    }

    /// The iteration under way, from call `first` of the whole stream (among the recent
    /// calls), is of a kind planned before (`kind`, its calls): followed from here as a
    /// detection of its own, its calls from there and the allocations still live before them
    /// kept. Only this iteration's allocations are named (`Rel { back: 0 }`): the iterations
    /// before it were of another kind.
    fn follow(&mut self, first: usize, kind: Arc<[u64]>, names: Option<Names>, provisional: bool) {
        let first_seq = self.recent[first - self.recent_from].2;
        let live = &self.sizes;
        let (kept, dropped): (Vec<Record>, Vec<Record>) =
            std::mem::take(&mut self.records).into_iter().partition(|r| {
                r.seq >= first_seq
                    || matches!(r.event, Event::Alloc { alloc, result: 0, .. } if live.contains_key(&alloc))
            });
        self.records = kept;
        self.shelve(dropped);
        let none: HashMap<u64, u64> = HashMap::new();
        let before: Vec<(u64, Option<u64>, u64)> = self
            .records
            .iter()
            .filter(|r| r.seq < first_seq)
            .filter_map(|r| match r.event {
                Event::Alloc { alloc, .. } => {
                    Some((iteration::token(&r.event, &none)?, Some(alloc), r.seq))
                }
                _ => None,
            })
            .collect();
        let boundary = before.len();
        let calls = before
            .into_iter()
            .chain(self.recent.range(first - self.recent_from..).copied());
        (self.tokens, self.allocs, self.seqs) = (Vec::new(), Vec::new(), Vec::new());
        for (token, alloc, seq) in calls {
            self.tokens.push(token);
            self.allocs.push(alloc);
            self.seqs.push(seq);
        }
        self.dropped = 0;
        self.generation += 1;
        self.made = vec![self.allocs[boundary..].iter().flatten().copied().collect()];
        let index = self.tokens.len() - 1;
        self.boundary = (boundary == index).then_some(kind.len());
        self.found = Some(Found {
            period: kind.len(),
            boundary,
            start_seq: first_seq,
            generation: self.generation,
            expected: Some(kind),
            one_period: false,
            names,
            provisional,
            once: None,
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

/// The kinds planned before (their names and calls): recognised wherever they begin.
pub fn set_kinds(kinds: Vec<(u64, Arc<[u64]>)>) {
    if let Ok(mut g) = TRACKER.lock() {
        g.get_or_insert_with(Tracker::new).set_kinds(kinds);
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

/// For each allocation that the tensors `uses` names per call offset (of the iteration
/// followed) stand for, how many calls ahead of the next call it is first named, over one
/// iteration. None while no iteration is followed by a plan's names.
pub fn next_uses(uses: &[Vec<TensorId>]) -> Option<HashMap<u64, usize>> {
    TRACKER.lock().ok()?.as_ref()?.next_uses(uses)
}

impl Tracker {
    /// See [`next_uses`]: the rest of this iteration's calls by their names now, then the next
    /// iteration's up to here, whose names of an iteration `back` before are this one's
    /// `back - 1` (those of its own allocations are not made yet).
    fn next_uses(&self, names: &[Vec<TensorId>]) -> Option<HashMap<u64, usize>> {
        let f = self.found.as_ref()?;
        if f.period == 0 || f.names.is_none() || names.len() != f.period {
            return None;
        }
        let now = (self.tokens.len() - f.boundary) % f.period;
        let mut ahead = HashMap::new();
        for d in 0..f.period {
            let (offset, next) = match now + d {
                o if o < f.period => (o, false),
                o => (o - f.period, true),
            };
            for &name in &names[offset] {
                let name = match name {
                    TensorId::Rel { back: 0, .. } if next => continue,
                    TensorId::Rel { back, k, size } if next => TensorId::Rel {
                        back: back - 1,
                        k,
                        size,
                    },
                    other => other,
                };
                if let Some(id) = self.resolve(name) {
                    ahead.entry(id).or_insert(d);
                }
            }
        }
        Some(ahead)
    }
}

#[cfg(test)]
mod tests;
