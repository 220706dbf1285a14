//! The joint plan: convolutions' configurations chosen with the memory plan. A convolution
//! that could run other configurations (its front, [`crate::model::Configs::front`]) runs, in
//! the workspace the program provides, the fastest that fits there, or a faster one in a
//! workspace the executor lends it beside the program's, for as long as it runs. Each lent
//! workspace is memory the plan must leave room for at that point of the iteration, traded
//! against the evictions it forces; a replay of the convolution runs the configuration its
//! forward ran, so it brings that workspace too.
//!
//! The choice is one cap on what any convolution may be lent, from a few candidates spaced by
//! two from a third of the budget down to nothing lent, then finer about the best: each is
//! planned, and the fastest prediction within the budget wins (the first weighed on a tie).
//! One cap for every convolution keeps the search at a handful of plans; the cap the plan chose
//! is what the executor lends up to.

use crate::model::{Step, Storage, Trace};
use crate::timeline::{Link, Outcome, Plan};

/// The trace as it runs where each convolution with a front may be lent up to `cap` bytes of
/// workspace: the fastest configuration within the program's workspace or the cap, its time,
/// and a lent workspace beside the program's where it needs more than the program provides
/// (a storage of the operation's, freed right after it; a replay brings it too). None: no
/// operation has a front.
pub fn capped(t: &Trace, cap: u64) -> Option<Trace> {
    if !t
        .ops
        .iter()
        .any(|o| o.configs.as_ref().is_some_and(|c| !c.front.is_empty()))
    {
        return None;
    }
    let mut out = t.clone();
    out.lends_workspaces = false;
    // Per operation, the lent workspace's storage.
    let mut lent: Vec<Option<usize>> = vec![None; t.ops.len()];
    for (i, op) in t.ops.iter().enumerate() {
        let Some(c) = op.configs.as_ref().filter(|c| !c.front.is_empty()) else {
            continue;
        };
        let own: u64 = c.workspace.iter().map(|&s| t.storages[s].size).sum();
        let room = cap.max(own);
        let Some(&(time_s, workspace)) = c
            .front
            .iter()
            .find(|x| x.1 <= room)
            .or_else(|| c.front.iter().min_by_key(|x| x.1))
        else {
            continue;
        };
        out.ops[i].time_s = time_s;
        if workspace > own {
            // In whole pages where the model is as the allocator holds memory.
            let size = workspace.div_ceil(t.page.max(1)) * t.page.max(1);
            let s = out.storages.len();
            out.storages.push(Storage {
                size,
                constant: false,
                producer: None,
            });
            if !out.copied.is_empty() {
                out.copied.push(size);
            }
            out.ops[i].outputs.push(s);
            // A replay brings the program's workspace and the lent one (an operation that is
            // never replayed never uses its scratch).
            out.ops[i].scratch += size;
            lent[i] = Some(s);
        }
    }
    out.steps = Vec::with_capacity(t.steps.len() + lent.iter().flatten().count());
    for &step in &t.steps {
        out.steps.push(step);
        if let Step::Op(i) = step
            && let Some(s) = lent[i]
        {
            out.steps.push(Step::Free(s));
        }
    }
    Some(out)
}

/// The caps weighed under `budget`: a third of it, then half the one before, eight times (down
/// to 1/768 of the budget), then nothing lent (largest first).
pub fn caps(budget: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..9).map(|k| budget / 3 / 2u64.pow(k)).collect();
    v.push(0);
    v.dedup();
    v
}

/// A policy run on one capped trace (given its cap): its plan and outcome.
pub type PlanEach<'a> = dyn FnMut(u64, &Trace) -> Option<(Plan, Outcome)> + 'a;

/// The plan with the convolutions' configurations chosen jointly: the cap, from [`caps`] then
/// finer about the best, whose trace ([`capped`]) `plan` plans fastest within the budget, that
/// plan (its decisions only on the trace's own storages: a lent workspace is never evicted)
/// and its outcome. `plan` is the policy, run on each capped trace (given its cap). None: no
/// operation has a front, or `plan` gave nothing.
pub fn choose(t: &Trace, budget: u64, plan: &mut PlanEach) -> Option<(u64, Plan, Outcome)> {
    let mut best: Option<(u64, Plan, Outcome)> = None;
    let mut weigh = |cap: u64, best: &mut Option<(u64, Plan, Outcome)>| -> Option<()> {
        let (p, outcome) = plan(cap, &capped(t, cap)?)?;
        let better = match best {
            None => true,
            Some((_, _, b)) => {
                (outcome.feasible && !b.feasible)
                    || (outcome.feasible == b.feasible && outcome.makespan < b.makespan)
            }
        };
        if better {
            *best = Some((cap, p, outcome));
        }
        Some(())
    };
    for cap in caps(budget) {
        weigh(cap, &mut best)?;
    }
    // Then finer about the best: a step of 2^(1/2), 2^(1/4), then 2^(1/8), each way.
    for step in [2f64.powf(0.5), 2f64.powf(0.25), 2f64.powf(0.125)] {
        let Some(at) = best.as_ref().map(|b| b.0).filter(|&c| c > 0) else {
            break;
        };
        for cap in [at as f64 * step, at as f64 / step] {
            weigh((cap as u64).min(budget), &mut best)?;
        }
    }
    best.map(|(cap, mut p, outcome)| {
        p.retain(|&(s, _)| s < t.storages.len());
        (cap, p, outcome)
    })
}

/// Policy `name` run to completion on each cap ([`choose`]).
pub fn run(name: &str, t: &Trace, budget: u64, link: Link) -> Option<(u64, Plan, Outcome)> {
    choose(t, budget, &mut |_, c| super::run(name, c, budget, link))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Configs, Op};

    const LINK: Link = Link { h2d: 1e9, d2h: 1e9 };

    /// A constant input, a convolution with a front (10 ms in 100 B, 40 ms in none) writing
    /// 100 B, and a reader of both; the program provides `own` bytes of workspace.
    fn conv(own: u64) -> Trace {
        let st = |size, constant, producer| Storage {
            size,
            constant,
            producer,
        };
        let mut t = Trace::default();
        t.storages
            .extend([st(100, true, None), st(100, false, Some(0))]);
        let mut c = Op::new("conv", 0.040, vec![0], vec![1]);
        let mut workspace = Vec::new();
        if own > 0 {
            t.storages.push(st(own, false, None));
            c.outputs.push(2);
            workspace.push(2);
        }
        c.configs = Some(Configs {
            fastest_s: 0.010,
            least_workspace: 0,
            workspace,
            front: vec![(0.010, 100), (0.040, 0)],
        });
        t.ops.push(c);
        t.ops.push(Op::new("read", 0.001, vec![0, 1], vec![]));
        t.steps = vec![Step::Op(0)];
        if own > 0 {
            t.steps.push(Step::Free(2));
        }
        t.steps.extend([Step::Op(1), Step::Free(1)]);
        t.validate().unwrap();
        t
    }

    #[test]
    fn a_lent_workspace_is_held_while_its_convolution_runs() {
        let t = capped(&conv(0), 100).unwrap();
        t.validate().unwrap();
        assert_eq!(t.ops[0].time_s, 0.010);
        assert_eq!(t.storages.len(), 3);
        assert_eq!(t.storages[2].size, 100);
        assert_eq!(t.steps[..2], [Step::Op(0), Step::Free(2)]);
        // Constant 100, output 100, lent 100.
        assert_eq!(t.peak(), 300);
        // Below the cap's need: the configuration that needs none, nothing lent.
        let t = capped(&conv(0), 99).unwrap();
        assert_eq!(
            (t.ops[0].time_s, t.storages.len(), t.peak()),
            (0.040, 2, 200)
        );
    }

    #[test]
    fn what_fits_the_programs_workspace_is_not_lent() {
        let t = capped(&conv(100), 0).unwrap();
        assert_eq!((t.ops[0].time_s, t.storages.len()), (0.010, 3));
        assert_eq!(t.peak(), 300);
    }

    #[test]
    fn the_cap_is_chosen_by_the_plan_it_allows() {
        let t = conv(0);
        // Room for everything: the fastest configuration, lent.
        let (cap, plan, o) = run("auto", &t, 10_000, LINK).unwrap();
        assert!(cap >= 100, "{cap}");
        assert!(plan.is_empty());
        assert!((o.makespan - 0.011).abs() < 1e-9, "{}", o.makespan);
        // Room for the constant and the output alone (300 B budget would lend 100 B; the
        // caps under 300 B are 100 B, 25 B, ...): 200 B leaves nothing to lend, so the slow
        // configuration is the only one that fits.
        let (cap, _, o) = run("auto", &t, 200, LINK).unwrap();
        assert!(cap < 100, "{cap}");
        assert!(o.feasible);
        assert!((o.makespan - 0.041).abs() < 1e-9, "{}", o.makespan);
    }

    #[test]
    fn a_trace_without_fronts_has_no_joint_choice() {
        let mut t = conv(0);
        t.ops[0].configs = None;
        assert!(capped(&t, 100).is_none());
        assert!(run("auto", &t, 10_000, LINK).is_none());
    }
}
