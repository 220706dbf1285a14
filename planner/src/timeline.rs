//! The timeline simulator: one compute stream and two copy engines (H2D, D2H) at a device
//! profile's PCIe bandwidth, a memory budget, and a plan saying, per storage, whether it is kept,
//! swapped (out after its evicted-access, in from its in-trigger, needed by its back-access) or
//! recomputed (dropped after its evicted-access, its producer re-run before its back-access).
//!
//! The program's own copies between host and device (`Op::copy`) take their direction's engine
//! too, behind the swaps queued there, and the compute waits for them.
//!
//! Feedback rules (the papers'): a swap cannot start before the previous one in its direction
//! ends; an access waits for its tensor; an allocation waits for memory (swap-outs in flight
//! release theirs when they end). Every stall is explained by an event.

mod candidates;
pub(crate) mod hash;
mod neighbourhood;
mod outcome;
mod plan;
mod run;
pub mod stalls;

use crate::model::Trace;
use candidates::{Candidates, Verdict};
use hash::{Map, Set};
use neighbourhood::Walk;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

pub use outcome::{Outcome, Stall, Usage};
pub use plan::{Decision, Evict, Link, Passive, Plan};

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Resident,
    /// Copy out in flight until `.0`; memory still held.
    Leaving(f64),
    Out,
    /// Copy in until `.0`; memory held.
    Arriving(f64),
    Dropped,
    Freed,
}

/// Items by operation, each operation's in order (one array: a replay builds these per plan).
#[derive(Default)]
struct ByOp<T> {
    /// Operation `i`'s items are `items[start[i]..start[i + 1]]`.
    start: Vec<usize>,
    items: Vec<T>,
}

impl<T: Ord + Copy> ByOp<T> {
    /// From (operation, item) pairs; those past the last operation never happen.
    fn new(n_ops: usize, mut pairs: Vec<(usize, T)>) -> ByOp<T> {
        pairs.retain(|p| p.0 < n_ops);
        pairs.sort_unstable();
        let mut start = vec![0; n_ops + 1];
        for p in &pairs {
            start[p.0 + 1] += 1;
        }
        for i in 0..n_ops {
            start[i + 1] += start[i];
        }
        ByOp {
            start,
            items: pairs.into_iter().map(|p| p.1).collect(),
        }
    }

    fn range(&self, op: usize) -> std::ops::Range<usize> {
        self.start[op]..self.start[op + 1]
    }

    fn of(&self, op: usize) -> &[T] {
        &self.items[self.range(op)]
    }
}

struct Sim<'a> {
    t: &'a Trace,
    budget: u64,
    link: Link,
    now: f64,
    d2h_free: f64,
    h2d_free: f64,
    /// When the links are free: concurrent operations (collectives) run one after another.
    link_free: f64,
    /// When each storage's contents are ready: what a concurrent operation writes is ready when
    /// it ends (0: as soon as the compute reaches it). What it reads stays in use until then
    /// (`last_use`).
    ready: Vec<f64>,
    mem: u64,
    state: Vec<State>,
    /// Swap-outs in flight, the earliest end first: (end as bits, storage, its `cancels` when
    /// it began). Times are never negative, so their bits order as they do.
    leaving: BinaryHeap<Reverse<(u64, usize, u32)>>,
    /// Per storage: how often the program freed it during a swap-out (which cancels the
    /// swap-outs in flight then).
    cancels: Vec<u32>,
    out: Outcome,
    /// Storages the running operation (and its recomputations) still need: never evicted.
    pinned: Vec<bool>,
    pins: Vec<usize>,
    /// Storages recomputed for the running operation.
    made: Vec<usize>,
    /// `is_made[s]`: `s` is in `made` (an operation re-running a producer with thousands of
    /// inputs asks for each of them).
    is_made: Vec<bool>,
    /// Per storage: the steps of the running operation's recomputation still to read it (zero
    /// outside [`Sim::gather`]).
    uses: Vec<u32>,
    /// When each storage was last read or written.
    last_use: Vec<f64>,
    /// The plan's drops as (storage, after): a storage recomputed only as a source of another
    /// and dropped again after this operation goes as soon as the recomputation is done with it.
    early: Set<(usize, usize)>,
    passive: Option<&'a Passive<'a>>,
    evicted: Plan,
    prev_op: Option<usize>,
    /// The plan's moves by the operation after which they happen: (storage, swapped).
    after: ByOp<(usize, bool)>,
    /// Extensions: the operation until which each storage outlives the program's free of it.
    extended: Vec<Option<usize>>,
    /// Passive mode: the storages the program freed that stay as metadata (see
    /// [`Passive::horizon`]), with their decisions, and those a recomputation then needed.
    meta: Map<usize, Vec<Decision>>,
    meta_used: Set<usize>,
    /// Frees postponed by extensions, by the operation after which they happen (past the
    /// last operation: never).
    deferred: Vec<Vec<usize>>,
    /// The program has freed it, and an extension keeps it.
    freed_late: Vec<bool>,
    /// Dropped for good (nothing was to read it again): its sources may be gone.
    dead: Vec<bool>,
    /// The plan's drops for good, as (storage, after).
    dead_planned: Set<(usize, usize)>,
    /// The operations that read each storage (passive mode; empty otherwise).
    consumers: Vec<Vec<usize>>,
    /// Passive mode with [`Passive::gone_from`]: the eviction candidates, and the walk that
    /// costs their neighbourhoods.
    index: Option<(Candidates, Walk)>,
}

impl Sim<'_> {
    /// Sets the state of `s` (the walk learns that it may have changed).
    fn set(&mut self, s: usize, st: State) {
        self.state[s] = st;
        self.touch(s);
    }

    /// Storage `s` may have changed state: costs kept across evictions may be out of date.
    fn touch(&mut self, s: usize) {
        if let Some((_, walk)) = &mut self.index {
            walk.touch(s);
        }
    }

    /// Releases the memory of swap-outs that have ended by `at`.
    fn release(&mut self, at: f64) {
        while let Some(&Reverse((bits, s, c))) = self.leaving.peek() {
            let end = f64::from_bits(bits);
            if end > at {
                break;
            }
            self.leaving.pop();
            if c == self.cancels[s] && self.state[s] == State::Leaving(end) {
                self.set(s, State::Out);
                self.mem -= self.t.storages[s].size;
            }
        }
    }

    /// A swap-out of `s` ending at `end` begins.
    fn leave(&mut self, s: usize, end: f64) {
        self.set(s, State::Leaving(end));
        self.leaving
            .push(Reverse((end.to_bits(), s, self.cancels[s])));
    }

    /// When the first swap-out in flight ends (infinity: none is).
    fn next_release(&mut self) -> f64 {
        while let Some(&Reverse((bits, s, c))) = self.leaving.peek() {
            if c == self.cancels[s] {
                return f64::from_bits(bits);
            }
            self.leaving.pop();
        }
        f64::INFINITY
    }

    /// The program (or an ended extension) frees `s`.
    fn free(&mut self, s: usize) {
        let size = self.t.storages[s].size;
        match self.state[s] {
            State::Resident | State::Arriving(_) => self.mem -= size,
            State::Leaving(_) => {
                self.mem -= size;
                self.cancels[s] += 1;
            }
            _ => {}
        }
        self.set(s, State::Freed);
    }

    /// The program (or an ended extension) frees `s` before operation `next`; in passive
    /// dropping, what a recomputation may still need stays as metadata instead (see
    /// [`Passive::horizon`]).
    fn free_or_keep(&mut self, s: usize, next: usize) {
        let until = self.passive.and_then(|p| p.horizon).map_or(0, |h| h[s]);
        let st = &self.t.storages[s];
        let keep = until >= next
            && self.prev_op.is_some()
            && match self.state[s] {
                State::Resident => st.producer.is_some() || st.constant,
                State::Dropped => !self.dead[s],
                // Swapped out (dropping and swapping mixed): kept out, swapped in if needed.
                State::Out | State::Leaving(_) => true,
                _ => false,
            };
        if !keep {
            return self.free(s);
        }
        let mut moves = vec![Decision::Extend { until }];
        if self.state[s] == State::Resident && st.producer.is_some() {
            self.mem -= st.size;
            self.set(s, State::Dropped);
            let after = self.prev_op.unwrap();
            moves.push(Decision::Recompute { after, back: until });
        }
        self.extended[s] = Some(until);
        self.defer(s, until);
        self.meta.entry(s).or_default().extend(moves);
    }

    /// The free of `s` happens after operation `until`.
    fn defer(&mut self, s: usize, until: usize) {
        if let Some(v) = self.deferred.get_mut(until) {
            v.push(s);
        }
    }

    fn pin(&mut self, s: usize) {
        if !self.pinned[s] {
            self.pinned[s] = true;
            self.pins.push(s);
        }
    }

    /// Bytes that swap-outs in flight will give back.
    fn leaving_bytes(&self) -> u64 {
        self.leaving
            .iter()
            .filter(|l| {
                let (bits, s, c) = l.0;
                c == self.cancels[s] && self.state[s] == State::Leaving(f64::from_bits(bits))
            })
            .map(|l| self.t.storages[l.0.1].size)
            .sum()
    }

    /// Takes `bytes` at time `at`; returns when it got them (after waiting for swap-outs, and
    /// in passive mode after evicting).
    fn take(&mut self, bytes: u64, mut at: f64, op: usize) -> f64 {
        self.release(at);
        while self.mem + bytes > self.budget {
            // One operation's evictions can take longer than many steps (DTR's search, run
            // after run): the caller's deadline is asked here too, and the run stops, not
            // feasible, when time is up.
            if self
                .passive
                .and_then(|p| p.more)
                .is_some_and(|more| !more())
            {
                self.out.feasible = false;
                break;
            }
            if self.passive.is_some()
                && self.mem - self.leaving_bytes() + bytes > self.budget
                && self.evict(op, at)
            {
                continue;
            }
            let next = self.next_release();
            if !next.is_finite() {
                break;
            }
            if next > at {
                self.out.stalls.push(Stall::Memory {
                    op,
                    secs: next - at,
                });
                self.out.stall_s += next - at;
                at = next;
            }
            self.release(next);
        }
        self.mem += bytes;
        if self.mem > self.budget {
            self.out.feasible = false;
            let over = self.mem - self.budget;
            if self.out.worst.is_none_or(|w| over > w.1) {
                self.out.worst = Some((op, over));
            }
            match self.out.overs.last_mut() {
                Some(last) if last.0 == op => last.1 = last.1.max(over),
                _ => self.out.overs.push((op, over)),
            }
        }
        self.out.peak = self.out.peak.max(self.mem);
        if let Some(m) = self.out.usage.mem_at.get_mut(op) {
            *m = (*m).max(self.mem);
        }
        at
    }

    /// What dropping `s` now would cost, DTR's evicted neighbourhood: its producer, and the
    /// dropped storages that would come back with it (its dropped sources) or (`downstream`)
    /// that would need it to come back (dropped storages made from it), transitively.
    fn remat_cost(&self, s: usize, downstream: bool) -> f64 {
        let t = self.t;
        let mut cost = 0.0;
        let mut todo = vec![s];
        // At most 65 entries: a short list beats hashing (this runs per candidate per eviction).
        let mut seen = vec![s];
        while let Some(x) = todo.pop() {
            let Some(p) = t.storages[x].producer else {
                return f64::INFINITY;
            };
            cost += t.ops[p].time_s;
            if seen.len() > 64 {
                break;
            }
            let made = self.consumers[x].iter().flat_map(|&o| {
                let o = &t.ops[o];
                o.outputs.iter().chain(o.inplace.iter().map(|v| &v.1))
            });
            for &i in t.ops[p].inputs.iter().chain(made.filter(|_| downstream)) {
                if self.state[i] == State::Dropped && !self.dead[i] && !seen.contains(&i) {
                    seen.push(i);
                    todo.push(i);
                }
            }
        }
        cost
    }

    /// Whether dropping `s` during `op` keeps every recomputation possible, as far as the
    /// run's own drops go: a recomputation of `s` must find its producer's sources (resident,
    /// away, or dropped and recomputable), and a drop for good must not take a source that a
    /// pending recomputation (a dropped or extended storage made from it) needs.
    fn may_leave(&self, s: usize, op: usize, back: usize, swap: bool) -> bool {
        let t = self.t;
        if back == usize::MAX {
            return !self.consumers[s].iter().any(|&o| {
                t.ops[o]
                    .outputs
                    .iter()
                    .chain(t.ops[o].inplace.iter().map(|v| &v.1))
                    .any(|&y| {
                        y != s
                            && (self.state[y] == State::Dropped && !self.dead[y]
                                || self.extended[y].is_some_and(|u| u > op))
                    })
            });
        }
        if swap {
            return true;
        }
        let Some(p) = t.storages[s].producer else {
            return false;
        };
        t.ops[p].inputs.iter().all(|&i| {
            i == s
                || !(self.state[i] == State::Freed
                    || self.dead[i] && self.state[i] == State::Dropped)
        })
    }

    /// Storage `s` is resident (again) or used: the index of candidates learns of it.
    fn enter(&mut self, s: usize) {
        if let Some((ix, _)) = &mut self.index {
            ix.enter(s);
        }
    }

    /// Passive mode: whether `s` may leave during `op` at `at` (its index entry made at last
    /// use `bits`; `u64::MAX`: whatever its last use), and if so its score and back-access.
    fn judge(
        &self,
        p: &Passive,
        s: usize,
        op: usize,
        at: f64,
        bits: u64,
        walk: Option<(&mut Walk, f64)>,
    ) -> (Verdict, usize) {
        let size = self.t.storages[s].size;
        if self.state[s] != State::Resident
            || size == 0
            || bits != u64::MAX && bits != self.last_use[s].to_bits()
        {
            return (Verdict::Stale, 0);
        }
        let Some(back) = (p.evictable)(s, op) else {
            return (Verdict::Skip, 0);
        };
        if self.pinned[s] {
            return (Verdict::Skip, 0);
        }
        let Some((swap, drop)) = self.ways(p, s, op, back) else {
            return (Verdict::Skip, 0);
        };
        let score = if back == usize::MAX {
            f64::NEG_INFINITY
        } else if p.evict == Evict::Lru {
            self.last_use[s]
        } else {
            let downstream = p.evict == Evict::Dtr;
            let per = size as f64 * (at - self.last_use[s]).max(1e-9);
            let copy = if swap {
                self.round_trip(s)
            } else {
                f64::INFINITY
            };
            let rebuild = if !drop {
                f64::INFINITY
            } else {
                match walk {
                    Some((w, best)) => {
                        let dropped = |i: usize| self.state[i] == State::Dropped && !self.dead[i];
                        // The walk may stop once its cost so far loses to the best score: it
                        // only grows (a sum of times), so the whole would lose too.
                        let loses = |cost: f64| cost / per > best;
                        w.cost(self.t, &self.consumers, &dropped, s, downstream, &loses)
                    }
                    None => self.remat_cost(s, downstream),
                }
            };
            copy.min(rebuild) / per
        };
        (Verdict::Score(score), back)
    }

    /// How `s` may leave during `op` until `back` under `p`, as `(swap, drop)`: `None` when it
    /// may not. A swap-out could not start before the recomputation that made it ended.
    fn ways(&self, p: &Passive, s: usize, op: usize, back: usize) -> Option<(bool, bool)> {
        let (swap, drop) = match p.evict {
            Evict::Lru if self.is_made[s] => return None,
            Evict::Lru => (true, false),
            Evict::Dtr | Evict::DtrUpstream => (false, true),
            Evict::DtrOrSwap => p.ways.map_or((false, true), |w| w(s, op, back)),
        };
        let swap = swap && !self.is_made[s] && back != usize::MAX;
        let drop = drop && self.may_leave(s, op, back, false);
        if back == usize::MAX {
            // Nothing reads it again: it goes for good where it may.
            return self
                .may_leave(s, op, back, p.evict == Evict::Lru)
                .then_some((false, true));
        }
        (swap || drop).then_some((swap, drop))
    }

    /// A copy of `s` out and back in at the link's speeds.
    fn round_trip(&self, s: usize) -> f64 {
        let copy = self.t.copy_bytes(s) as f64;
        copy / self.link.d2h + copy / self.link.h2d
    }

    /// The storage to evict during `op` at `at` and its back-access: the least (score,
    /// storage), through the index where there is one, else by scanning every storage.
    fn choose(&mut self, p: &Passive, op: usize, at: f64) -> Option<(usize, usize)> {
        if let Some((mut ix, mut walk)) = self.index.take() {
            walk.sync(&self.consumers, &|i| {
                self.state[i] == State::Dropped && !self.dead[i]
            });
            let lru = p.evict == Evict::Lru;
            let best = ix.best(op, at, lru, &self.last_use, &mut |s, bits, best| {
                self.judge(p, s, op, at, bits, Some((&mut walk, best))).0
            });
            self.index = Some((ix, walk));
            let (_, s) = best?;
            return (p.evictable)(s, op).map(|back| (s, back));
        }
        let mut best: Option<(f64, usize, usize)> = None;
        for s in 0..self.t.storages.len() {
            if let (Verdict::Score(score), back) = self.judge(p, s, op, at, u64::MAX, None)
                && best.is_none_or(|b| score < b.0)
            {
                best = Some((score, s, back));
            }
        }
        best.map(|b| (b.1, b.2))
    }

    /// Passive mode: evicts one storage during operation `op` at time `at`; false when nothing
    /// can go.
    fn evict(&mut self, op: usize, at: f64) -> bool {
        let (Some(p), Some(prev)) = (self.passive, self.prev_op) else {
            return false;
        };
        let Some((s, back)) = self.choose(p, op, at) else {
            return false;
        };
        // Recomputed for this operation: it goes once the recomputation is done with it,
        // which a replay does after `op` (see `early`); else before `op`.
        let after = if self.is_made[s] { op } else { prev };
        let size = self.t.storages[s].size;
        let swap = match self.ways(p, s, op, back) {
            Some((true, false)) => true,
            Some((true, true)) => self.round_trip(s) < self.remat_cost(s, false),
            _ => false,
        };
        if swap {
            let copy = self.t.copy_bytes(s);
            let start = at.max(self.d2h_free);
            let end = start + copy as f64 / self.link.d2h;
            self.d2h_free = end;
            self.out.swapped_out += copy;
            self.leave(s, end);
            self.evicted.push((
                s,
                Decision::Swap {
                    after,
                    trigger: back,
                    back,
                },
            ));
        } else {
            self.mem -= size;
            self.set(s, State::Dropped);
            self.dead[s] = back == usize::MAX;
            self.touch(s);
            self.evicted.push((s, Decision::Recompute { after, back }));
        }
        true
    }

    fn swap_in(&mut self, s: usize, at: f64, op: usize) -> f64 {
        let size = self.t.storages[s].size;
        // The room comes first, at `at`: where it waits for swap-outs to end, the host waits
        // with it (so does the shim's allocator), and nothing after it runs earlier. Taken at
        // the engine's free time instead, the memory of swap-outs ending before then would
        // count as free for the operations that run meanwhile.
        let got = self.take(size, at, op);
        self.now = self.now.max(got);
        let copy = self.t.copy_bytes(s);
        let start = got.max(self.h2d_free);
        let end = start + copy as f64 / self.link.h2d;
        self.h2d_free = end;
        self.out.swapped_in += copy;
        self.set(s, State::Arriving(end));
        end
    }

    /// Operation `op` waits for `s` to arrive at `end`.
    fn arrive(&mut self, s: usize, end: f64, op: usize) {
        if end > self.now {
            self.out.stalls.push(Stall::SwapIn {
                op,
                storage: s,
                secs: end - self.now,
            });
            self.out.stall_s += end - self.now;
            self.now = end;
        }
        self.set(s, State::Resident);
    }

    /// Makes `s`, which is not dropped, available to operation `op` at `self.now`.
    fn available(&mut self, s: usize, op: usize) {
        // A swap-out that has ended by now has given its memory back: the tensor is away.
        self.release(self.now);
        match self.state[s] {
            // Still on the device while its swap-out runs: usable.
            State::Resident | State::Leaving(_) => {}
            State::Out => {
                // Not triggered: fetched on demand.
                let e = self.swap_in(s, self.now, op);
                self.arrive(s, e, op);
            }
            State::Arriving(e) => self.arrive(s, e, op),
            State::Freed | State::Dropped => self.out.invalid = true,
        }
    }

    /// The dropped storages among `wanted` and their dropped sources, sources first.
    fn chain(&mut self, wanted: &[usize]) -> Vec<usize> {
        let mut order = Vec::new();
        let mut done = Set::default();
        let mut stack: Vec<(usize, bool)> = wanted
            .iter()
            .rev()
            .filter(|&&s| self.state[s] == State::Dropped)
            .map(|&s| (s, false))
            .collect();
        while let Some((s, expanded)) = stack.pop() {
            if done.contains(&s) {
                continue;
            }
            if expanded {
                done.insert(s);
                order.push(s);
                continue;
            }
            let Some(p) = self.t.storages[s].producer else {
                self.out.invalid = true;
                continue;
            };
            stack.push((s, true));
            for &i in self.t.ops[p].inputs.iter().rev() {
                if i != s && self.state[i] == State::Dropped && !done.contains(&i) {
                    stack.push((i, false));
                }
            }
        }
        order
    }

    /// Makes the inputs of operation `op` available: the dropped ones recomputed collectively
    /// (their dropped sources with them, sources first), then those away swapped in. A step of
    /// the recomputation holds what it reads from its start until the last step that reads it;
    /// before then a resident source may be evicted (passive mode) and is then recomputed
    /// right before the step, as DTR's recursive rematerialisation does. A storage recomputed
    /// only as a source, which the plan drops after `op`, goes once no step needs it.
    fn gather(&mut self, op: usize) {
        let t = self.t;
        let o = &t.ops[op];
        for &s in o.inputs.iter().chain(&o.mutates).chain(&o.outputs) {
            self.pin(s);
        }
        // Most operations find nothing dropped: no recomputation to lay out.
        let dropped = |s: &usize| self.state[*s] == State::Dropped;
        if !o.inputs.iter().chain(&o.mutates).any(dropped) {
            for &s in o.inputs.iter().chain(&o.mutates) {
                self.available(s, op);
            }
            return;
        }
        let wanted: Vec<usize> = o.inputs.iter().chain(&o.mutates).copied().collect();
        let inputs = |s: usize| {
            let p = t.storages[s].producer.unwrap();
            t.ops[p].inputs.iter().copied().filter(move |&i| i != s)
        };
        // The storages whose `uses` this operation counts (set back to zero at the end).
        let mut counted: Vec<usize> = Vec::new();
        let mut order = VecDeque::new();
        // Puts the recomputation of `of` (dropped sources first) at the front of `order`.
        let lay_out = |sim: &mut Self,
                       order: &mut VecDeque<usize>,
                       counted: &mut Vec<usize>,
                       of: &[usize]| {
            let steps = sim.chain(of);
            let laid = steps.len();
            for &s in &steps {
                sim.pin(s);
                for i in inputs(s) {
                    if sim.uses[i] == 0 {
                        counted.push(i);
                    }
                    sim.uses[i] += 1;
                }
            }
            for s in steps.into_iter().rev() {
                order.push_front(s);
            }
            laid
        };
        lay_out(self, &mut order, &mut counted, &wanted);
        while let Some(s) = order.pop_front() {
            let p = t.storages[s].producer.unwrap();
            if self.state[s] == State::Dropped {
                // Its sources from here on: held; those evicted since the layout come back
                // first (as chain members, held until read). One that nothing can bring back
                // (no producer) stays missing: the step finds it so (an invalid plan).
                for i in inputs(s) {
                    if self.state[i] != State::Dropped {
                        self.pin(i);
                    }
                }
                let gone: Vec<usize> = inputs(s)
                    .filter(|&i| self.state[i] == State::Dropped)
                    .collect();
                if !gone.is_empty() {
                    order.push_front(s);
                    if lay_out(self, &mut order, &mut counted, &gone) > 0 {
                        continue;
                    }
                    order.pop_front();
                }
                for i in inputs(s) {
                    self.available(i, op);
                }
                // An in-place version is recomputed in its old version's (recomputed) memory.
                match t.ops[p].inplace.iter().find(|v| v.1 == s) {
                    Some(&(old, _)) if self.state[old] == State::Resident => {
                        self.set(old, State::Dropped)
                    }
                    _ => self.now = self.take(t.storages[s].size, self.now, op),
                }
                // The replay's workspace (and, where its other outputs are written aside,
                // their scratch): held while it runs, counted against the budget.
                let aside: u64 = if t.ops[p].separate_outputs {
                    t.ops[p]
                        .outputs
                        .iter()
                        .filter(|&&y| y != s && t.storages[y].producer == Some(p))
                        .map(|&y| t.storages[y].size)
                        .sum()
                } else {
                    0
                };
                let scratch = t.ops[p].scratch + aside;
                if scratch > 0 {
                    self.now = self.take(scratch, self.now, op);
                }
                let secs = t.ops[p].time_s;
                self.out.stalls.push(Stall::Recompute {
                    op,
                    storage: s,
                    producer: p,
                    secs,
                });
                self.out.stall_s += secs;
                self.out.recomputed_ops += 1;
                self.now += secs;
                self.mem -= scratch;
                self.set(s, State::Resident);
                self.dead[s] = false;
                self.touch(s);
                self.made.push(s);
                self.is_made[s] = true;
                self.last_use[s] = self.now;
                self.enter(s);
                for i in inputs(s).chain([s]) {
                    if self.meta.contains_key(&i) {
                        self.meta_used.insert(i);
                    }
                    if self.freed_late[i] {
                        self.out.usage.read_late[i] = op;
                    }
                }
            }
            // Made (here, or already by a step laid out since): this step's reads are done.
            for i in inputs(s) {
                self.last_use[i] = self.now;
                self.enter(i);
                self.uses[i] -= 1;
                // What it found resident stays until the operation is done (the replay of an
                // eviction can only drop it before or after the operation).
                if self.uses[i] == 0 && self.is_made[i] && !wanted.contains(&i) {
                    self.pinned[i] = false;
                    if self.early.contains(&(i, op)) && self.state[i] == State::Resident {
                        self.mem -= t.storages[i].size;
                        self.set(i, State::Dropped);
                    }
                }
            }
        }
        for &s in &wanted {
            self.available(s, op);
        }
        for i in counted {
            self.uses[i] = 0;
        }
    }
}

/// Replays the trace under `budget` with `plan`.
pub fn simulate(t: &Trace, budget: u64, link: Link, plan: &Plan) -> Outcome {
    replay(t, budget, link, plan, None, f64::INFINITY).1
}

/// [`simulate`] for a search that keeps a plan only if it fits and ends before `bar` (its best
/// so far; `ties`: or at it): the outcome of such a plan, else `None`. A replay that goes over
/// the budget, or whose time so far and the compute left pass `bar` (by more than rounding),
/// stops there. So a search keeps what it would keep with `simulate`, and a rejected plan
/// costs only the replay up to where it lost.
pub fn simulate_within(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &Plan,
    bar: f64,
    ties: bool,
) -> Option<Outcome> {
    let out = replay(t, budget, link, plan, None, bar).1;
    (out.feasible && (out.makespan < bar || ties && out.makespan == bar)).then_some(out)
}

/// Replays the trace under `budget` with `plan` in passive mode: returns the evictions it made
/// (as decisions to add to the plan) and the outcome.
pub fn simulate_passive(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &Plan,
    passive: &Passive,
) -> (Plan, Outcome) {
    replay(t, budget, link, plan, Some(passive), f64::INFINITY)
}

fn replay(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &Plan,
    passive: Option<&Passive>,
    bar: f64,
) -> (Plan, Outcome) {
    let (mut sim, triggers) = Sim::new(t, budget, link, plan, passive);
    sim.run(&triggers, bar);
    sim.finish()
}

#[cfg(test)]
pub(crate) mod tests;
