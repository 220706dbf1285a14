//! Where a swap-in starts (its in-trigger). The selection places it by the baseline's timing
//! (the latest start that lets the copy end by the back-access); the replay then shows where
//! that is too late: the back-access waits (Capuchin's feedback, §4.2).

use super::Deadline;
use super::analysis::Analysis;
use crate::model::Trace;
use crate::timeline::hash::Map;
use crate::timeline::{Decision, Link, Outcome, Plan, Stall, simulate_within};

/// Moves in-triggers earlier by the stalls the replay shows, keeping a move only when the replay
/// stays within the budget and gets faster. First the stalled swap-in alone; when that does not
/// help (it waited behind others on the H2D engine), with every swap-in queued in the same
/// window, so the whole queue starts earlier.
pub(super) fn adjust_triggers(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    plan: &mut Plan,
    out: &mut Outcome,
    more: Deadline,
) {
    for _ in 0..16 {
        if !more() {
            return;
        }
        let mut improved = false;
        for group in [false, true] {
            let Some(moved) = moved_triggers(a, plan, out, group) else {
                continue;
            };
            if let Some(o) = simulate_within(t, budget, link, &moved, out.makespan, false) {
                *plan = moved;
                *out = o;
                improved = true;
                break;
            }
        }
        if !improved {
            return;
        }
    }
}

/// The plan with triggers moved by the swap-in stalls of `out` (see [`adjust_triggers`]), or
/// `None` when nothing can move.
fn moved_triggers(a: &Analysis, plan: &Plan, out: &Outcome, group: bool) -> Option<Plan> {
    let mut moved = plan.clone();
    let mut any = false;
    // The plan's swaps by (storage, back-access), in plan order: a stall finds its own swap
    // without a scan of the plan (thousands of stalls, thousands of moves).
    let mut swaps: Map<(usize, usize), Vec<usize>> = Map::default();
    for (k, (s, d)) in plan.iter().enumerate() {
        if let Decision::Swap { back, .. } = *d {
            swaps.entry((*s, back)).or_default().push(k);
        }
    }
    let mut move_one = |k: usize, secs: f64, moved: &mut Plan| {
        if let Decision::Swap {
            after,
            trigger,
            back,
        } = &mut moved[k].1
        {
            let earlier = a.trigger(*after, *back, a.start[*back] - a.start[*trigger] + secs);
            if earlier < *trigger {
                *trigger = earlier;
                any = true;
            }
        }
    };
    for st in &out.stalls {
        let Stall::SwapIn { op, storage, secs } = *st else {
            continue;
        };
        // The stalled swap-in's window: from its trigger to the operation that waited.
        let Some(own) = swaps.get(&(storage, op)) else {
            continue;
        };
        let Decision::Swap { trigger: first, .. } = plan[own[0]].1 else {
            unreachable!("indexed as a swap")
        };
        if !group {
            for &k in own {
                move_one(k, secs, &mut moved);
            }
            continue;
        }
        for k in 0..moved.len() {
            // Queued in the same window (its original trigger, before any move).
            if let Decision::Swap { trigger, back, .. } = moved[k].1
                && back >= first
                && trigger <= op
            {
                move_one(k, secs, &mut moved);
            }
        }
    }
    any.then_some(moved)
}
