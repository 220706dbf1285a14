//! The replay itself: a plan read into per-operation moves, the steps run in order, and the
//! outcome. The mechanisms each step uses (taking memory, evicting, recomputing, swapping) are
//! [`Sim`]'s, in the module above.

use super::{
    ByOp, Candidates, Decision, Evict, Link, Map, Outcome, Passive, Plan, Set, Sim, Stall, State,
    Usage, Walk,
};
use crate::model::{Direction, Step, Trace};
use std::collections::BinaryHeap;

impl<'a> Sim<'a> {
    /// A replay of `plan` about to run its first step (the constants taken); with the plan's
    /// swap-ins by the operation that triggers them.
    pub(super) fn new(
        t: &'a Trace,
        budget: u64,
        link: Link,
        plan: &Plan,
        passive: Option<&'a Passive<'a>>,
    ) -> (Sim<'a>, ByOp<usize>) {
        let n_ops = t.ops.len();
        let n = t.storages.len();
        let mut consumers = Vec::new();
        if passive.is_some() {
            consumers = vec![Vec::new(); n];
            for (i, op) in t.ops.iter().enumerate() {
                for &s in &op.inputs {
                    consumers[s].push(i);
                }
            }
        }
        let mut sim = Sim {
            t,
            budget,
            link,
            now: 0.0,
            d2h_free: 0.0,
            h2d_free: 0.0,
            link_free: 0.0,
            ready: vec![0.0; n],
            mem: 0,
            state: t
                .storages
                .iter()
                .map(|s| {
                    if s.constant {
                        State::Resident
                    } else {
                        State::Freed
                    }
                })
                .collect(),
            leaving: BinaryHeap::new(),
            cancels: vec![0; n],
            out: Outcome {
                feasible: true,
                usage: Usage {
                    mem_at: vec![0; n_ops],
                    read_late: vec![usize::MAX; n],
                },
                ..Outcome::default()
            },
            pinned: vec![false; n],
            pins: Vec::new(),
            made: Vec::new(),
            is_made: vec![false; n],
            uses: vec![0; n],
            last_use: vec![0.0; n],
            early: Set::default(),
            passive,
            evicted: Vec::new(),
            prev_op: None,
            after: ByOp::default(),
            extended: Vec::new(),
            meta: Map::default(),
            meta_used: Set::default(),
            deferred: vec![Vec::new(); n_ops],
            freed_late: vec![false; n],
            dead: vec![false; n],
            dead_planned: Set::default(),
            consumers,
            index: None,
        };
        let triggers = sim.set_plan(plan);
        if let Some(p) = passive
            && let Some(gone_from) = p.gone_from
        {
            let sizes: Vec<u64> = t.storages.iter().map(|s| s.size).collect();
            // The least a score's cost can be: the producer's time, or where a swap may stand
            // in for a rebuild, a copy out and back in if that is less.
            let own: Vec<f64> = (0..n)
                .map(|s| {
                    let own = t.storages[s]
                        .producer
                        .map_or(f64::INFINITY, |p| t.ops[p].time_s);
                    if p.evict == Evict::DtrOrSwap {
                        own.min(sim.round_trip(s))
                    } else {
                        own
                    }
                })
                .collect();
            sim.index = Some((
                Candidates::new(&sizes, &own, gone_from.to_vec()),
                Walk::new(t),
            ));
            for s in 0..n {
                if sim.state[s] == State::Resident {
                    sim.enter(s);
                }
            }
        }
        sim.take(t.constant_bytes(), 0.0, 0);
        (sim, triggers)
    }

    /// What the replay reads of `plan`, and the swap-ins by the operation that triggers them.
    pub(super) fn set_plan(&mut self, plan: &Plan) -> ByOp<usize> {
        let n_ops = self.t.ops.len();
        // By operation (one past the last: never happens).
        let mut triggers = Vec::new();
        let mut after = Vec::new();
        let mut extended: Vec<Option<usize>> = vec![None; self.t.storages.len()];
        let mut early = Set::default();
        let mut dead_planned = Set::default();
        for &(s, d) in plan {
            match d {
                Decision::Swap {
                    after: a, trigger, ..
                } => {
                    after.push((a, (s, true)));
                    triggers.push((trigger, s));
                }
                Decision::Recompute { after: a, back } => {
                    after.push((a, (s, false)));
                    early.insert((s, a));
                    if back == usize::MAX {
                        dead_planned.insert((s, a));
                    }
                }
                Decision::Extend { until } => {
                    let u = &mut extended[s];
                    *u = Some(u.map_or(until, |u| u.max(until)));
                }
            }
        }
        self.after = ByOp::new(n_ops, after);
        self.extended = extended;
        self.early = early;
        self.dead_planned = dead_planned;
        ByOp::new(n_ops, triggers)
    }

    /// Runs the steps from `at` to the end, or until it stops: in passive mode (see
    /// [`Passive`]), or once it cannot fit or end by `bar` (see [`simulate_within`]; `bar`
    /// infinite: never).
    pub(super) fn run(&mut self, triggers: &ByOp<usize>, bar: f64) {
        let t = self.t;
        let link = self.link;
        let passive = self.passive;
        // The program's compute time, and the compute left from each step on (for a passive
        // run's cutoff, and the bar): the whole less what the steps before took. Summed in
        // another order than the replay's clock: the bar allows for rounding.
        // Concurrent operations take no compute time.
        let compute = |i: usize| {
            if t.ops[i].concurrent {
                0.0
            } else {
                t.ops[i].time_s
            }
        };
        let whole: f64 = t
            .steps
            .iter()
            .map(|step| match *step {
                Step::Op(i) => compute(i),
                Step::Free(_) => 0.0,
            })
            .sum();
        let mut before = 0.0;
        // Passive mode gives up once it has recomputed for four times the program's own
        // compute time (it thrashes; DTR's slowdowns stay below 2x where it fits at all).
        let give_up = 4.0 * whole;
        let bar = bar * (1.0 + 1e-9);
        let sim = self;
        // The next operation to run.
        let mut next = 0;
        for step in &t.steps {
            let left = whole - before;
            if let Step::Op(i) = *step {
                before += compute(i);
            }
            if let Some(p) = passive
                && (sim.out.stall_s > give_up
                    || p.more.is_some_and(|more| !more())
                    || sim.now + left >= p.cutoff)
            {
                sim.out.feasible = false;
                break;
            }
            if bar.is_finite() && (!sim.out.feasible || sim.out.invalid || sim.now + left >= bar) {
                sim.out.feasible = false;
                break;
            }
            match *step {
                Step::Free(s) => match sim.extended[s] {
                    Some(u) if u >= next => {
                        sim.freed_late[s] = true;
                        sim.defer(s, u);
                    }
                    _ => sim.free_or_keep(s, next),
                },
                Step::Op(i) => {
                    next = i + 1;
                    let op = &t.ops[i];
                    if !triggers.of(i).is_empty() {
                        for &s in triggers.of(i) {
                            sim.release(sim.now);
                            match sim.state[s] {
                                // Wanted back before its swap-out ended: it stays (the
                                // copy's engine time is spent all the same). Releasing its
                                // memory at the copy's end, before this operation allocates,
                                // would count memory the device does not have yet.
                                State::Leaving(_) => {
                                    sim.set(s, State::Resident);
                                    sim.enter(s);
                                }
                                State::Out => {
                                    sim.swap_in(s, sim.now, i);
                                }
                                _ => {}
                            }
                        }
                    }
                    // What a collective wrote is ready when it ends: the program's own wait.
                    let ready = op
                        .inputs
                        .iter()
                        .chain(&op.mutates)
                        .map(|&s| sim.ready[s])
                        .fold(sim.now, f64::max);
                    sim.now = ready;
                    let bytes: u64 = op.outputs.iter().map(|&s| t.storages[s].size).sum();
                    let rebuilds = op
                        .inputs
                        .iter()
                        .chain(&op.mutates)
                        .any(|&s| sim.state[s] == State::Dropped);
                    if rebuilds {
                        // The program allocates a call's outputs before it makes the call, and
                        // the recomputations run inside the call's hook: the outputs are held
                        // while they run.
                        for &s in op.inputs.iter().chain(&op.mutates).chain(&op.outputs) {
                            sim.pin(s);
                        }
                        // What the recomputations read stays for them too: taken now, the
                        // outputs' room must not come from their sources.
                        let wanted: Vec<usize> =
                            op.inputs.iter().chain(&op.mutates).copied().collect();
                        for s in sim.chain(&wanted) {
                            if let Some(p) = t.storages[s].producer {
                                for &x in &t.ops[p].inputs {
                                    if sim.state[x] != State::Dropped {
                                        sim.pin(x);
                                    }
                                }
                            }
                        }
                        sim.now = sim.take(bytes, sim.now, i);
                        sim.gather(i);
                    } else {
                        sim.gather(i);
                        sim.now = sim.take(bytes, sim.now, i);
                    }
                    for &s in &op.outputs {
                        sim.set(s, State::Resident);
                    }
                    // In-place writes: the new version takes over the old one's memory; the
                    // old version is gone and can only come back by recomputation.
                    for &(old, new) in &op.inplace {
                        sim.set(new, State::Resident);
                        sim.set(old, State::Dropped);
                    }
                    // A concurrent operation holds its storages until it ends on the links;
                    // the compute goes on.
                    let end = if op.concurrent {
                        let end = sim.now.max(sim.link_free) + op.time_s;
                        sim.link_free = end;
                        for &s in op.mutates.iter().chain(&op.outputs) {
                            sim.ready[s] = end;
                        }
                        for &(_, new) in &op.inplace {
                            sim.ready[new] = end;
                        }
                        end
                    } else if let Some(dir) = op.copy {
                        let free = match dir {
                            Direction::H2d => &mut sim.h2d_free,
                            Direction::D2h => &mut sim.d2h_free,
                        };
                        let start = sim.now.max(*free);
                        *free = start + op.time_s;
                        if start > sim.now {
                            let secs = start - sim.now;
                            sim.out.stalls.push(Stall::Engine { op: i, secs });
                            sim.out.stall_s += secs;
                        }
                        sim.now = start + op.time_s;
                        sim.now
                    } else {
                        sim.now += op.time_s;
                        sim.now
                    };
                    for &s in op.inputs.iter().chain(&op.mutates).chain(&op.outputs) {
                        sim.last_use[s] = end;
                        sim.enter(s);
                    }
                    for &(_, new) in &op.inplace {
                        sim.last_use[new] = end;
                        sim.enter(new);
                    }
                    for k in 0..sim.pins.len() {
                        let s = sim.pins[k];
                        sim.pinned[s] = false;
                    }
                    sim.pins.clear();
                    for k in 0..sim.made.len() {
                        let s = sim.made[k];
                        sim.is_made[s] = false;
                    }
                    sim.made.clear();
                    sim.prev_op = Some(i);
                    for k in sim.after.range(i) {
                        let (s, swap) = sim.after.items[k];
                        if sim.state[s] != State::Resident {
                            continue;
                        }
                        let size = t.storages[s].size;
                        if swap {
                            let copy = t.copy_bytes(s);
                            // Not before the collective that last used it ends.
                            let start = sim.now.max(sim.d2h_free).max(sim.last_use[s]);
                            let end = start + copy as f64 / link.d2h;
                            sim.d2h_free = end;
                            sim.out.swapped_out += copy;
                            sim.leave(s, end);
                        } else {
                            sim.mem -= size;
                            sim.set(s, State::Dropped);
                            sim.dead[s] = sim.dead_planned.contains(&(s, i));
                            sim.touch(s);
                        }
                    }
                    for s in std::mem::take(&mut sim.deferred[i]) {
                        // Extended again since (passive mode): later.
                        match sim.extended[s] {
                            Some(u) if u > i => sim.defer(s, u),
                            _ => sim.free_or_keep(s, i + 1),
                        }
                    }
                }
            }
        }
    }

    /// The evictions a passive run made (with the metadata a recomputation needed), and the
    /// outcome.
    pub(super) fn finish(self) -> (Plan, Outcome) {
        let mut sim = self;
        // The iteration repeats, and a copy once issued runs (the shim cannot take back one
        // queued on its stream): each copy engine's work of an iteration must fit in one
        // iteration, or it falls further behind with every one. A swap cancelled by its own
        // in-trigger still spent its engine time.
        let busy = (sim.out.swapped_out as f64 / sim.link.d2h)
            .max(sim.out.swapped_in as f64 / sim.link.h2d);
        sim.out.makespan = sim.now.max(busy).max(sim.link_free);
        sim.out
            .overs
            .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if sim.out.invalid {
            sim.out.feasible = false;
        }
        // Metadata no recomputation needed: as well freed.
        let mut evicted = sim.evicted;
        let mut kept: Vec<_> = sim
            .meta
            .into_iter()
            .filter(|m| sim.meta_used.contains(&m.0))
            .collect();
        kept.sort_unstable_by_key(|m| m.0);
        evicted.extend(
            kept.into_iter()
                .flat_map(|(s, d)| d.into_iter().map(move |d| (s, d))),
        );
        (evicted, sim.out)
    }
}
