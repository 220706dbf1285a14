//! The policies against hand-computed timelines, random traces, an exhaustive optimum and DTR's
//! logs. The random traces and the exhaustive optimum they share are here; the tests, one file
//! per subject.

mod claims;
mod deadlines;
mod passive_mode;
mod recomputation;
mod replays;
mod selection;

use super::passive::{passive_run, passive_run_by};
use super::*;
use crate::model::Step;
use crate::model::{Op, Storage};
use crate::timeline::Plan;
use crate::timeline::{Decision, simulate};

pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A random iteration: constants, then operations reading live storages and creating new
/// ones, each storage freed after its last use; a backward half reads forward outputs again.
fn random_trace(r: &mut Rng, ops: usize) -> Trace {
    random_trace_with(r, ops, true)
}

/// `late_frees`: some storages are freed a few operations after their last use.
pub(super) fn random_trace_with(r: &mut Rng, ops: usize, late_frees: bool) -> Trace {
    let mut t = Trace::default();
    for _ in 0..2 {
        t.storages.push(Storage {
            size: 10 + r.below(40),
            constant: true,
            producer: None,
        });
    }
    let mut live: Vec<usize> = vec![0, 1];
    let mut uses: Vec<Vec<usize>> = vec![Vec::new(); 2];
    for i in 0..ops {
        random_op(r, &mut t, &mut live, &mut uses, (i, ops), |r| {
            0.5 + r.below(10) as f64 / 10.0
        });
    }
    // Program order with frees after each storage's last use: right after it, or (one in
    // three, as when a framework holds a reference) a few operations later.
    let free_at: Vec<usize> = uses
        .iter()
        .enumerate()
        .map(|(s, used)| {
            let last = used
                .last()
                .copied()
                .unwrap_or(t.storages[s].producer.unwrap_or(0));
            if late_frees && r.below(3) == 0 {
                (last + 1 + r.below(4) as usize).min(ops - 1)
            } else {
                last
            }
        })
        .collect();
    for i in 0..ops {
        t.steps.push(Step::Op(i));
        for (s, &at) in free_at.iter().enumerate().skip(2) {
            if at == i {
                t.steps.push(Step::Free(s));
            }
        }
    }
    t.validate().unwrap();
    t
}

/// Operation `i` of `ops` in a random iteration: it reads one or two live storages (in the
/// backward half, also one from the first half of those), and makes a new one, which becomes
/// live; `uses` records the reads, `time` draws its duration after everything else.
pub(super) fn random_op(
    r: &mut Rng,
    t: &mut Trace,
    live: &mut Vec<usize>,
    uses: &mut Vec<Vec<usize>>,
    (i, ops): (usize, usize),
    time: impl FnOnce(&mut Rng) -> f64,
) -> usize {
    let mut inputs = Vec::new();
    for _ in 0..1 + r.below(2) {
        let s = live[r.below(live.len() as u64) as usize];
        if !inputs.contains(&s) {
            inputs.push(s);
        }
    }
    if i >= ops / 2 && i >= 1 {
        // Backward: reach far back.
        let s = live[r.below((live.len() as u64 / 2).max(1)) as usize];
        if !inputs.contains(&s) {
            inputs.push(s);
        }
    }
    t.storages.push(Storage {
        size: 20 + r.below(100),
        constant: false,
        producer: Some(i),
    });
    let out = t.storages.len() - 1;
    uses.push(Vec::new());
    for &s in &inputs {
        uses[s].push(i);
    }
    let name = if r.below(3) == 0 { "conv" } else { "op" };
    let time_s = time(r);
    t.ops.push(Op {
        backward: i >= ops / 2,
        ..Op::new(name, time_s, inputs, vec![out])
    });
    live.push(out);
    out
}

pub(super) const LINK: Link = Link {
    h2d: 200.0,
    d2h: 200.0,
};

/// Infeasible counts as infinitely slow.
fn time(o: &Outcome) -> f64 {
    if o.feasible {
        o.makespan
    } else {
        f64::INFINITY
    }
}

/// The exact optimum over plans that move each tensor at most once per gap between two of its
/// accesses: kept, recomputed, or swapped with its in-trigger at any operation of the gap; by
/// enumeration (tiny traces only). `None` when no such plan fits, or there are too many.
pub(super) fn exhaustive(t: &Trace, budget: u64, link: Link) -> Option<Option<f64>> {
    let a = Analysis::new(t);
    let mut choices: Vec<Vec<Option<(usize, Decision)>>> = Vec::new();
    for s in 0..t.storages.len() {
        for w in a.accesses[s].windows(2) {
            let (after, back) = (w[0], w[1]);
            if back <= after + 1 {
                continue;
            }
            let mut c = vec![None];
            if a.recomputable(t, s, back) {
                c.push(Some((s, Decision::Recompute { after, back })));
            }
            for trigger in after + 1..=back {
                c.push(Some((
                    s,
                    Decision::Swap {
                        after,
                        trigger,
                        back,
                    },
                )));
            }
            choices.push(c);
        }
    }
    let count: f64 = choices.iter().map(|c| c.len() as f64).product();
    if count > 20_000.0 {
        return None;
    }
    let mut best: Option<f64> = None;
    let mut pick = vec![0usize; choices.len()];
    loop {
        let plan: Plan = pick
            .iter()
            .zip(&choices)
            .filter_map(|(&k, c)| c[k])
            .collect();
        let o = simulate(t, budget, link, &plan);
        if o.feasible && best.is_none_or(|b| o.makespan < b) {
            best = Some(o.makespan);
        }
        // The next combination (an odometer).
        let mut i = 0;
        while i < pick.len() {
            pick[i] += 1;
            if pick[i] < choices[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
        if i == pick.len() {
            return Some(best);
        }
    }
}
