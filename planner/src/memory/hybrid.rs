//! Ito et al.'s hybrid of swapping and recomputation: each tensor kept, swapped or recomputed,
//! whichever costs least given all the others. Swapping costs nothing where the copy engines can
//! hide it (its FreeTime), recomputing costs its producer's time, keeping costs memory.

use super::analysis::Analysis;
use super::capuchin::{both_selection, recompute_only, refine_swaps, swap_only};
use super::descent::replays_for;
use super::{Deadline, best};
use crate::model::Trace;
use crate::timeline::{Decision, Link, Outcome, Plan, simulate_within};

/// Replays per binary digit of the trace's length for each mix: fewer than the descent's 8, as
/// the hybrid runs up to three such searches, one per start.
const MIX_REPLAYS_PER_DIGIT: usize = 6;

/// The search: from each of the one-mechanism plans (Capuchin's selection restricted to
/// swapping, to recomputing) and the combined selection, move tensors between mechanisms while
/// the replay gets faster ([`mix`]); the best replay wins, so the result is never above the
/// better of `swap` and `recompute`.
pub(super) fn hybrid(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    let starts = [
        recompute_only(t, a, budget, link, more),
        swap_only(t, a, budget, link, more),
        both_selection(t, a, budget, link, more),
    ];
    hybrid_from(t, a, budget, link, more, starts)
}

/// [`hybrid`] from its starting plans (`auto` has them already).
pub(super) fn hybrid_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    starts: [(Plan, Outcome); 3],
) -> (Plan, Outcome) {
    let mut v = Vec::new();
    for (plan, out) in starts {
        if out.feasible && more() {
            v.push(mix(t, a, budget, link, more, plan.clone(), out.clone()));
        }
        v.push((plan, out));
    }
    best(v)
}

/// Local search over one feasible plan, a few passes while it improves: recomputations move to
/// swaps where the copy engines have room (the costliest recomputation first, in halving
/// groups), and stalled swaps move to recomputations where recomputing is cheaper. Every move
/// is kept only if the replay stays within the budget and gets faster. (What neither pays for
/// is kept already: the selections undo what they took beyond need.) The moves to swaps share
/// one budget of replays over the passes, O(log n).
fn mix(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    mut plan: Plan,
    mut out: Outcome,
) -> (Plan, Outcome) {
    let mut left = replays_for(t, MIX_REPLAYS_PER_DIGIT);
    for _ in 0..3 {
        let before = out.makespan;
        to_swaps(t, a, budget, link, more, &mut left, &mut plan, &mut out);
        refine_swaps(t, a, budget, link, &mut plan, &mut out, more);
        if out.makespan >= before || !more() {
            break;
        }
    }
    (plan, out)
}

/// Recomputations whose absence leaves the copy engines room to swap the tensor out and back
/// (in the baseline's times), the costliest first, turned into swaps: a group at a time,
/// halved when the replay does not improve, one try (of the `left`) per group.
#[allow(clippy::too_many_arguments)]
fn to_swaps(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    left: &mut usize,
    plan: &mut Plan,
    out: &mut Outcome,
) {
    // (saving, storage, the recomputation, its place in the plan: moves change decisions in
    // place, so places hold).
    let mut cands: Vec<(f64, usize, Decision, usize)> = Vec::new();
    for (at, &(s, d)) in plan.iter().enumerate() {
        let Decision::Recompute { after, back } = d else {
            continue;
        };
        if back == usize::MAX || !a.accesses[s].contains(&back) {
            continue;
        }
        let Some(p) = t.storages[s].producer else {
            continue;
        };
        let copy = t.copy_bytes(s) as f64;
        let transfer = copy / link.d2h + copy / link.h2d;
        // Room in the gap (FreeTime >= 0), or a swap's exposed part cheaper than recomputing.
        let exposed = (transfer - (a.start[back] - a.end[after])).max(0.0);
        if exposed < t.ops[p].time_s {
            cands.push((t.ops[p].time_s - exposed, s, d, at));
        }
    }
    cands.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let (mut i, mut k) = (0, cands.len().max(1));
    while i < cands.len() && *left > 0 && more() {
        *left -= 1;
        let group = &cands[i..(i + k).min(cands.len())];
        let mut cand = plan.clone();
        for &(_, s, d, at) in group {
            let Decision::Recompute { after, back } = d else {
                continue;
            };
            let copy = t.copy_bytes(s) as f64;
            cand[at].1 = Decision::Swap {
                after,
                trigger: a.trigger(after, back, copy / link.h2d),
                back,
            };
        }
        if let Some(o) = simulate_within(t, budget, link, &cand, out.makespan, false) {
            *plan = cand;
            *out = o;
            i += group.len();
        } else if k > 1 {
            k /= 2;
        } else {
            i += 1;
        }
    }
}
