//! Undoing what a greedy selection took beyond need: each pass tries plans without some of
//! its decisions (the costliest or most stalled first, a group at a time where the replay's
//! memory curve shows room) and keeps one only where the replay stays within the budget and
//! gets faster.

use super::{Deadline, in_groups};
use crate::model::Trace;
use crate::timeline::hash::Map;
use crate::timeline::{Decision, Link, Outcome, Plan, Stall, simulate_within};

/// Undoes what the selection took beyond need: recomputations (the costliest first) are dropped
/// from the plan while the replay stays within the budget and gets faster; then the extensions
/// nothing needs any more.
///
/// The replay's memory curve says which removals have room: keeping a tensor that a
/// recomputation brought back holds its bytes from its evicted-access to its back-access. Only
/// those with room are tried, the costliest first: a run of them at once (each counted against
/// the room the earlier ones took), halved where the replay does not agree. The extensions a
/// recomputation read past the program's free of their storage are known from the replay too:
/// the others go in one replay.
pub(super) fn prune(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &mut Plan,
    out: &mut Outcome,
    more: Deadline,
) {
    let cost = |d: &(usize, Decision)| match d.1 {
        Decision::Recompute { back, .. } if back != usize::MAX => {
            t.storages[d.0].producer.map_or(0.0, |p| t.ops[p].time_s)
        }
        _ => 0.0,
    };
    let mut order: Vec<(usize, Decision)> =
        plan.iter().copied().filter(|d| cost(d) > 0.0).collect();
    order.sort_by(|x, y| cost(y).total_cmp(&cost(x)).then(x.0.cmp(&y.0)));
    // Keeping a tensor a recomputation brought back adds its bytes from its evicted-access to
    // its back-access, except where the replay recomputed it anyway (as another's source).
    let span = |d: &(usize, Decision), len: usize| match d.1 {
        Decision::Recompute { after, back } => (after + 1).min(len)..back.min(len),
        _ => 0..0,
    };
    let mut order = std::collections::VecDeque::from(order);
    while !order.is_empty() && more() {
        let mut made: Vec<(usize, usize)> = (out.stalls.iter())
            .filter_map(|x| match *x {
                Stall::Recompute { op, storage, .. } => Some((storage, op)),
                _ => None,
            })
            .collect();
        made.sort_unstable();
        let adds = |d: (usize, Decision), len: usize| {
            let sp = span(&d, len);
            let lo = made.partition_point(|&x| x < (d.0, sp.start));
            let hi = made.partition_point(|&x| x < (d.0, sp.end));
            let anyway = &made[lo..hi];
            sp.filter(move |q| anyway.binary_search(&(d.0, *q)).is_err())
        };
        let group = with_room(t, budget, &out.usage.mem_at, &mut order, |d, len| {
            adds(*d, len)
        });
        in_groups(group.len(), more, |g| {
            faster_without(t, budget, link, plan, out, &group[g], false)
        });
    }
    if !more() {
        return;
    }
    // Per storage, the extension to keep: the shortest one that reaches the last operation at
    // which a recomputation read it past the program's free (none: nothing did).
    let read_late = &out.usage.read_late;
    let mut keep_until = vec![usize::MAX; t.storages.len()];
    for &(s, d) in plan.iter() {
        if let Decision::Extend { until } = d
            && read_late[s] != usize::MAX
            && until >= read_late[s]
        {
            keep_until[s] = keep_until[s].min(until);
        }
    }
    let needed = |&(s, d): &(usize, Decision)| match d {
        Decision::Extend { until } => keep_until[s] == until,
        _ => true,
    };
    let mut gone: Vec<(usize, Decision)> = plan.iter().copied().filter(|d| !needed(d)).collect();
    // The same extension twice: one goes.
    let mut cand: Plan = Vec::with_capacity(plan.len());
    let mut once = vec![false; t.storages.len()];
    for &d in plan.iter() {
        if needed(&d) {
            if let Decision::Extend { .. } = d.1 {
                if once[d.0] {
                    gone.push(d);
                    continue;
                }
                once[d.0] = true;
            }
            cand.push(d);
        }
    }
    if gone.is_empty() {
        return;
    }
    if let Some(o) = simulate_within(t, budget, link, &cand, out.makespan, true) {
        *plan = cand;
        *out = o;
        return;
    }
    // The replay disagrees (it can where swaps move in time): a group at a time.
    in_groups(gone.len(), more, |group| {
        faster_without(t, budget, link, plan, out, &gone[group], true)
    });
}

/// Undoes swaps the selection took beyond need, as [`prune`] does recomputations: a swap the
/// FreeTime ranked free still queues on its copy engines, and the swaps behind it wait. Those
/// whose bytes fit in the replay's memory curve from their evicted-access to their back-access
/// are tried, the ones that stalled most (then the largest) first, a run at a time, each kept
/// out only where the replay stays within the budget and gets faster; at most 32 replays (a
/// plan of thousands of swaps that all stall would take thousands).
pub(super) fn prune_swaps(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &mut Plan,
    out: &mut Outcome,
    more: Deadline,
) {
    let mut stall: Map<(usize, usize), f64> = Map::default();
    for st in &out.stalls {
        if let Stall::SwapIn { op, storage, secs } = *st {
            *stall.entry((storage, op)).or_default() += secs;
        }
    }
    let mut order: Vec<(f64, (usize, Decision))> = plan
        .iter()
        .filter_map(|&(s, d)| match d {
            Decision::Swap { back, .. } if t.storages[s].size > 0 => {
                Some((stall.get(&(s, back)).copied().unwrap_or(0.0), (s, d)))
            }
            _ => None,
        })
        .collect();
    order.sort_by(|x, y| {
        y.0.total_cmp(&x.0)
            .then(t.storages[y.1.0].size.cmp(&t.storages[x.1.0].size))
            .then(x.1.0.cmp(&y.1.0))
    });
    let mut order: std::collections::VecDeque<(usize, Decision)> =
        order.into_iter().map(|x| x.1).collect();
    let span = |d: &(usize, Decision), len: usize| match d.1 {
        Decision::Swap { after, back, .. } => (after + 1).min(len)..back.min(len),
        _ => 0..0,
    };
    let replays = std::cell::Cell::new(0);
    let more = || more() && replays.get() < 32;
    while !order.is_empty() && more() {
        let group = with_room(t, budget, &out.usage.mem_at, &mut order, span);
        in_groups(group.len(), &more, |g| {
            replays.set(replays.get() + 1);
            faster_without(t, budget, link, plan, out, &group[g], false)
        });
    }
}

/// From the front of `order`, the removals with room in a replay's memory curve `curve`, in
/// order, each counted against the room the earlier ones took (`adds`: the operations at which
/// keeping it adds its bytes), until one whose room only the next replay can tell. One without
/// room at its turn is passed over, as its replay would be.
fn with_room<I: Iterator<Item = usize>>(
    t: &Trace,
    budget: u64,
    curve: &[u64],
    order: &mut std::collections::VecDeque<(usize, Decision)>,
    adds: impl Fn(&(usize, Decision), usize) -> I,
) -> Vec<(usize, Decision)> {
    let mut room = curve.to_vec();
    let fits = |room: &[u64], d: &(usize, Decision)| {
        let size = t.storages[d.0].size;
        adds(d, room.len()).all(|q| room[q].saturating_add(size) <= budget)
    };
    let mut group = Vec::new();
    while let Some(d) = order.front() {
        if group.is_empty() && !fits(&room, d) {
            order.pop_front();
        } else if fits(&room, d) {
            let size = t.storages[d.0].size;
            for q in adds(d, room.len()) {
                room[q] += size;
            }
            group.push(order.pop_front().unwrap());
        } else {
            break;
        }
    }
    group
}

/// Takes `plan` without `gone` where its replay stays feasible and gets faster (`ties`: or
/// as fast).
fn faster_without(
    t: &Trace,
    budget: u64,
    link: Link,
    plan: &mut Plan,
    out: &mut Outcome,
    gone: &[(usize, Decision)],
    ties: bool,
) -> bool {
    let cand = without(t, plan, gone);
    match simulate_within(t, budget, link, &cand, out.makespan, ties) {
        Some(o) => {
            *plan = cand;
            *out = o;
            true
        }
        _ => false,
    }
}

/// `plan` without one occurrence of each decision in `gone`.
fn without(t: &Trace, plan: &Plan, gone: &[(usize, Decision)]) -> Plan {
    let mut left: Vec<u32> = vec![0; t.storages.len()];
    for d in gone {
        left[d.0] += 1;
    }
    let mut gone = gone.to_vec();
    let mut cand = Vec::with_capacity(plan.len());
    for &d in plan {
        if left[d.0] > 0
            && let Some(k) = gone.iter().position(|x| *x == d)
        {
            gone.swap_remove(k);
            left[d.0] -= 1;
            continue;
        }
        cand.push(d);
    }
    cand
}
