//! Replays that resume. A local search changes a few decisions of its best plan and replays
//! the whole iteration, though every step before the first one a changed decision touches
//! replays exactly as before. [`Resumable`] keeps the best plan's replay state before a few
//! steps (snapshots) and replays a candidate from the last snapshot before its first change,
//! stopping as [`super::simulate_within`] does: the same outcome, to the bit, for about half
//! the steps on average.

use super::{Decision, Link, Outcome, Plan, Resume, Sim};
use crate::model::{Step, Trace};
use std::rc::Rc;

/// Snapshots per replay, at most: each holds a replay's state (tens of bytes per storage and
/// operation), and resuming from the last one before a change replays on average half the
/// distance between two.
const SNAPSHOTS: usize = 16;

/// A plan's replay, kept so that plans differing from it in a few decisions replay from where
/// they first differ.
pub struct Resumable<'a> {
    t: &'a Trace,
    budget: u64,
    link: Link,
    plan: Plan,
    out: Outcome,
    /// Per operation, its step; per storage, the step of the program's first free of it (the
    /// number of steps: none).
    op_step: Vec<usize>,
    free_step: Vec<usize>,
    /// Steps between two snapshots.
    stride: usize,
    /// `snaps[j]`: the replay of `plan` before step `j * stride`.
    snaps: Vec<Rc<(Resume, Sim<'a>)>>,
}

impl<'a> Resumable<'a> {
    /// Replays `plan` under `budget`, keeping snapshots.
    pub fn new(t: &'a Trace, budget: u64, link: Link, plan: Plan) -> Resumable<'a> {
        let n = t.steps.len();
        let mut op_step = vec![n; t.ops.len()];
        let mut free_step = vec![n; t.storages.len()];
        for (k, step) in t.steps.iter().enumerate() {
            match *step {
                Step::Op(i) => op_step[i] = op_step[i].min(k),
                Step::Free(s) => free_step[s] = free_step[s].min(k),
            }
        }
        let mut r = Resumable {
            t,
            budget,
            link,
            plan: Vec::new(),
            out: Outcome::default(),
            op_step,
            free_step,
            stride: n.div_ceil(SNAPSHOTS).max(1),
            snaps: Vec::new(),
        };
        r.keep(plan);
        r
    }

    /// The kept plan's outcome.
    pub fn outcome(&self) -> &Outcome {
        &self.out
    }

    /// The kept plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// [`super::simulate_within`] of `cand`, resumed from the kept plan's replay.
    pub fn within(&self, cand: &Plan, bar: f64) -> Option<Outcome> {
        let first = self.first_change(cand);
        let Some(snap) = self.snaps.get(first / self.stride) else {
            // No step replays differently.
            return self.out.feasible.then(|| self.out.clone());
        };
        let (mut at, mut sim) = (snap.0, snap.1.clone());
        let triggers = sim.set_plan(cand);
        sim.run(&mut at, &triggers, bar, &mut |_, _| {});
        let out = sim.finish().1;
        out.feasible.then_some(out)
    }

    /// Keeps `plan` as the one the next candidates change: replayed from its first change,
    /// with new snapshots from there on.
    pub fn keep(&mut self, plan: Plan) {
        let j = self.first_change(&plan) / self.stride;
        let (mut at, mut sim, triggers) = match self.snaps.get(j.min(self.snaps.len().max(1) - 1)) {
            Some(snap) => {
                let (at, mut sim) = (snap.0, snap.1.clone());
                let triggers = sim.set_plan(&plan);
                (at, sim, triggers)
            }
            None => {
                let (sim, triggers) = Sim::new(self.t, self.budget, self.link, &plan, None);
                (Resume::START, sim, triggers)
            }
        };
        self.snaps.truncate(at.step / self.stride + 1);
        let stride = self.stride;
        let snaps = &mut self.snaps;
        sim.run(&mut at, &triggers, f64::INFINITY, &mut |at, sim| {
            if at.step == snaps.len() * stride {
                snaps.push(Rc::new((at, sim.clone())));
            }
        });
        self.out = sim.finish().1;
        self.plan = plan;
    }

    /// Keeps `cand` if its replay fits the budget and ends before the kept plan's (`ties`:
    /// or as it does); says whether it did.
    pub fn improves(&mut self, cand: Plan, ties: bool) -> bool {
        let bar = self.out.makespan;
        let better = self
            .within(&cand, bar)
            .is_some_and(|o| o.makespan < bar || ties && o.makespan == bar);
        if better {
            self.keep(cand);
        }
        better
    }

    /// The kept plan and its outcome.
    pub fn into_parts(self) -> (Plan, Outcome) {
        (self.plan, self.out)
    }

    /// The first step at which `cand` may replay otherwise than the kept plan (the number of
    /// steps: none). The replay reads a plan as a set, so only decisions outside the two
    /// plans' common start and end can differ: the earliest step any of them touches.
    fn first_change(&self, cand: &Plan) -> usize {
        let (a, b) = (&self.plan, cand);
        let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let tail = a[head..]
            .iter()
            .rev()
            .zip(b[head..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        a[head..a.len() - tail]
            .iter()
            .chain(&b[head..b.len() - tail])
            .map(|&(s, d)| self.touches(s, d))
            .min()
            .unwrap_or(self.t.steps.len())
    }

    /// The first step that decision `d` on storage `s` changes: its move after an operation
    /// or its trigger; an extension, the program's free of `s`.
    fn touches(&self, s: usize, d: Decision) -> usize {
        let op = |i: usize| self.op_step.get(i).copied().unwrap_or(self.t.steps.len());
        match d {
            Decision::Swap { after, trigger, .. } => op(after).min(op(trigger)),
            Decision::Recompute { after, .. } => op(after),
            Decision::Extend { .. } => self.free_step[s],
        }
    }
}
