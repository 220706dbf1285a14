//! Capuchin (Peng et al., ASPLOS '20): the selection driven by measured execution. At the worst
//! excess, tensors alive across it are ranked (swaps that hide in their FreeTime first, then by
//! MSPS, swap or recompute whichever costs less), in-triggers are placed and moved earlier by
//! the feedback of the replay's stalls.

mod candidates;

use super::analysis::Analysis;
use super::engines::Engines;
use super::passive::online;
use super::{DROPS, Deadline, Mechanism, best, rank_outcomes, with_passive};
use crate::model::Trace;
use crate::timeline::{Decision, Evict, Link, Outcome, Plan, Stall, simulate, simulate_within};
use candidates::{Candidate, Round, candidates};

/// One way of running Capuchin's selection: the mechanisms it may use, how it ranks candidates
/// that cost time, the smallest tensor it considers, and whether it takes tensors accessed once
/// per iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Selection {
    pub(super) mech: Mechanism,
    pub(super) rank: Rank,
    pub(super) min_size: u64,
    /// A tensor that outlives the iteration and is accessed once in it (an optimizer's
    /// momentum) may be swapped from that access to the same access in the next iteration.
    /// Capuchin's own candidates are tensors accessed more than once (§4.5); its policy keeps
    /// to that ([`Selection::capuchin`]), the other selections take them too.
    pub(super) once_per_iteration: bool,
    /// A swap taken to relieve the operation over the budget comes back after it: its
    /// in-trigger is no earlier than the next operation. The in-trigger by time alone (the
    /// latest start that leaves the copy its time) may fall before that operation where the
    /// tensor is needed soon after it, and the tensor is then back in memory where it was to
    /// be away: the selection takes swap after swap and the excess stays (an SGD step at
    /// three tenths of BERT's peak: the weights, needed by the update one operation later,
    /// could not make room for the momentum's). Neither rule is better everywhere (on DTR's
    /// logs the swap selection with it is slower at some budgets): Capuchin's policy and `auto`
    /// run both. (Such a prefetch is late by design; the shim's feedback leaves it where it is.)
    pub(super) relieve: bool,
}

impl Selection {
    pub(super) fn of(mech: Mechanism) -> Selection {
        Selection {
            mech,
            rank: Rank::Msps,
            min_size: 0,
            once_per_iteration: true,
            relieve: false,
        }
    }

    /// Capuchin's policy's own selection: both mechanisms, MSPS, its candidates accessed more
    /// than once in the iteration. (ResNet-50 at 0.3, simulated H100, offline: 1.374x -> 1.343x;
    /// its FreeTime rule had taken the momentum buffers first, whose gap spans the iteration,
    /// and they came back at the end of the backward pass, where the engine was full.)
    pub(super) fn capuchin() -> Selection {
        Selection {
            once_per_iteration: false,
            ..Selection::of(Mechanism::Both)
        }
    }
}

/// How the selection ranks the candidates that cost time: by memory saving per second (MSPS,
/// Capuchin's), or by memory-time saved per second (MSPS x the time the tensor is away, which
/// favours long absences, as DTR's staleness does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rank {
    Msps,
    Area,
}

/// Capuchin's selection (and its one-mechanism variants), driven by the simulator: while the
/// replay exceeds the budget, take the operation where it exceeds most, and among the tensors
/// alive across it with an access gap around it choose: swaps with no overhead first (largest
/// FreeTime first), then by memory saving per second, swap or recompute, whichever costs less
/// (recompute costs count sources already chosen for recomputation), until the excess is covered.
/// Then in-triggers move earlier by the stalls the replay shows.
pub(super) fn iterative(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    mech: Mechanism,
    more: Deadline,
) -> (Plan, Outcome) {
    iterative_from(t, a, budget, link, Selection::of(mech), Vec::new(), more)
}

/// Capuchin's first pass over the load peak as a whole: the tensors (of at least 1 MiB) alive
/// across the peak of the unconstrained run, swapped in order of their FreeTime (`by_area`:
/// of FreeTime x bytes, the memory-time they give back), until the peak's excess is covered.
/// The iterative selection then continues from it.
pub(super) fn peak_seed(t: &Trace, a: &Analysis, budget: u64, link: Link, by_area: bool) -> Plan {
    let probe = simulate(t, budget, link, &Vec::new());
    let Some((p, over)) = probe.worst else {
        return Vec::new();
    };
    let planned = vec![Vec::new(); t.storages.len()];
    let recomputed = vec![false; t.storages.len()];
    let mut round = Round::new(t, &planned, &recomputed);
    // Small tensors are not worth a transfer slot of their own (AutoSwap's 1 MB floor).
    let mut cands: Vec<Candidate> = candidates(
        t,
        a,
        link,
        Selection::of(Mechanism::Swap),
        p,
        &mut round,
        &Engines::new(a, link),
    )
    .into_iter()
    .filter(|c| t.storages[c.2].size >= 1 << 20)
    .map(|mut c| {
        // Rank every candidate by FreeTime alone (largest first).
        if let Decision::Swap { after, back, .. } = c.3 {
            let size = t.storages[c.2].size as f64;
            let copy = t.copy_bytes(c.2) as f64;
            c.0 = 0;
            let free_time = a.start[back] - a.end[after] - copy / link.d2h - copy / link.h2d;
            c.1 = if by_area {
                -(free_time.max(0.0) + copy / link.h2d) * size
            } else {
                -free_time
            };
        }
        c
    })
    .collect();
    cands.sort_by(|x, y| x.1.total_cmp(&y.1).then(x.2.cmp(&y.2)));
    let mut plan = Vec::new();
    let mut got = 0;
    for (_, _, s, d, _) in cands {
        if got >= over {
            break;
        }
        plan.push((s, d));
        got += t.storages[s].size;
    }
    plan
}

/// The selection loop `sel` from a `seed` plan.
///
/// A greedy selection can trap itself: recomputations that all land on one operation make a new
/// peak there that nothing can lower. Then it starts over with those recomputations (storage,
/// back-access) ruled out, a few times, keeping the best result.
pub(super) fn iterative_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: Selection,
    seed: Plan,
    more: Deadline,
) -> (Plan, Outcome) {
    let first = select(t, a, budget, link, sel, seed.clone(), &[], more);
    iterative_after(t, a, budget, link, sel, seed, first, more)
}

/// [`iterative_from`] after its first run of the selection loop (`first`): the reruns with
/// stuck recomputations ruled out.
#[allow(clippy::too_many_arguments)]
pub(super) fn iterative_after(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: Selection,
    seed: Plan,
    first: (Plan, Outcome),
    more: Deadline,
) -> (Plan, Outcome) {
    let mut banned: Vec<(usize, usize)> = Vec::new();
    let mut best = first;
    let mut last = best.clone();
    for _ in 0..6 {
        if best.1.feasible || !more() {
            break;
        }
        // The largest recomputation landing on an operation still over the budget.
        let stuck: Vec<usize> = last.1.overs.iter().map(|o| o.0).collect();
        let Some(worst) = last
            .0
            .iter()
            .filter_map(|&(s, d)| match d {
                Decision::Recompute { back, .. } if stuck.contains(&back) => Some((s, back)),
                _ => None,
            })
            .filter(|x| !banned.contains(x))
            .max_by_key(|x| (t.storages[x.0].size, std::cmp::Reverse(x.0)))
        else {
            break;
        };
        banned.push(worst);
        last = select(t, a, budget, link, sel, seed.clone(), &banned, more);
        if rank_outcomes(&last.1, &best.1).is_lt() {
            best = last.clone();
        }
    }
    best
}

/// One run of the selection loop; `banned` (storage, back-access) recomputations are not taken.
#[allow(clippy::too_many_arguments)]
fn select(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: Selection,
    seed: Plan,
    banned: &[(usize, usize)],
    more: Deadline,
) -> (Plan, Outcome) {
    let mut plan: Plan = seed;
    // Lifetimes grow as recomputations keep their sources.
    let mut a = a.clone().extended(&plan);
    let a = &mut a;
    // Per storage: the (after, back) intervals already planned.
    let mut planned: Vec<Vec<(usize, usize)>> = vec![Vec::new(); t.storages.len()];
    let mut recomputed: Vec<bool> = vec![false; t.storages.len()];
    for (s, d) in &plan {
        match *d {
            Decision::Swap { after, back, .. } => planned[*s].push((after, back)),
            Decision::Recompute { after, back } => {
                planned[*s].push((after, back));
                recomputed[*s] = true;
            }
            Decision::Extend { .. } => {}
        }
    }
    // The copy engines under the swaps chosen so far (Capuchin's FreeTime with the queue): the
    // plan only grows in the loop, and each swap it takes is taken from the engines there.
    let mut engines = Engines::new(a, link);
    for &(s, d) in &plan {
        if let Decision::Swap { after, back, .. } = d {
            engines.take(t.copy_bytes(s), after, back);
        }
    }
    let mut out = simulate(t, budget, link, &plan);
    'outer: for _ in 0..4000 {
        if out.feasible || !more() {
            break;
        }
        // The worst excess first; where nothing can move there, the next one.
        let mut found: Option<(usize, u64, Vec<Candidate>)> = None;
        let mut round = Round::new(t, &planned, &recomputed);
        for &(p, over) in out.overs.iter().take(64) {
            let mut c = candidates(t, a, link, sel, p, &mut round, &engines);
            c.retain(|c| {
                t.storages[c.2].size >= sel.min_size
                    && !matches!(c.3, Decision::Recompute { back, .. } if banned.contains(&(c.2, back)))
            });
            if !c.is_empty() {
                found = Some((p, over, c));
                break;
            }
        }
        let Some((p, over, mut cands)) = found else {
            break 'outer;
        };
        cands.sort_by(|x, y| x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)).then(x.2.cmp(&y.2)));
        let mut freed = 0u64;
        // Candidates were found against the plan as the round began: one dropped for good in
        // this round must not be a source of another's recomputation in the same round.
        let mut dead_now = vec![false; t.storages.len()];
        let mut sourced_now = vec![false; t.storages.len()];
        for (tier, key, s, d, ext) in cands {
            if freed >= over {
                break;
            }
            // A swap ranked may have lost its room to those chosen before it in this round:
            // then it waits for the next round, to be weighed against recomputation again.
            if let Decision::Swap { after, back, .. } = d {
                let size = t.storages[s].size;
                let copy = t.copy_bytes(s);
                let cost = (-engines.free_time(a, copy, (after, p, back))).max(0.0);
                let weight = match sel.rank {
                    Rank::Msps => 1.0,
                    Rank::Area => (a.start[back] - a.end[after]).max(1e-9),
                };
                let ranked = if tier == 0 {
                    0.0
                } else {
                    size as f64 * weight / -key
                };
                if cost > ranked * 1.25 {
                    continue;
                }
                engines.take(copy, after, back);
            }
            let (after, back) = match d {
                Decision::Swap { after, back, .. } | Decision::Recompute { after, back } => {
                    (after, back)
                }
                Decision::Extend { .. } => continue,
            };
            if let Decision::Recompute { .. } = d {
                if back == usize::MAX {
                    if sourced_now[s] {
                        continue;
                    }
                    dead_now[s] = true;
                } else {
                    let sources: Vec<usize> = std::iter::once(s)
                        .chain(ext.dropped.iter().map(|x| x.0))
                        .chain(ext.revived.iter().copied())
                        .filter_map(|x| t.storages[x].producer)
                        .flat_map(|pr| t.ops[pr].inputs.iter().copied())
                        .collect();
                    if sources.iter().any(|&i| dead_now[i]) {
                        continue;
                    }
                    for i in sources {
                        sourced_now[i] = true;
                    }
                }
            }
            // A source kept by an earlier candidate of this round may be alive already.
            let alive = |i: usize| a.freed_before[i] > back;
            let kept_ids: Vec<usize> = ext.kept.into_iter().filter(|&i| !alive(i)).collect();
            let dropped: Vec<(usize, usize)> = ext
                .dropped
                .into_iter()
                .filter(|&(i, _)| !alive(i))
                .collect();
            let kept: u64 = kept_ids.iter().map(|&i| t.storages[i].size).sum();
            if kept >= t.storages[s].size {
                continue;
            }
            planned[s].push((after, back));
            if matches!(d, Decision::Recompute { .. }) {
                recomputed[s] = true;
            }
            plan.push((s, d));
            for i in kept_ids {
                plan.push((i, Decision::Extend { until: back }));
                a.extend(i, back);
            }
            for (i, last) in dropped {
                plan.push((i, Decision::Extend { until: back }));
                plan.push((i, Decision::Recompute { after: last, back }));
                planned[i].push((last, back));
                recomputed[i] = true;
                a.extend(i, back);
            }
            for i in ext.revived {
                if a.freed_before[i] <= back {
                    plan.push((i, Decision::Extend { until: back }));
                    a.extend(i, back);
                }
                let last = a.accesses[i].last().copied().unwrap_or(0);
                planned[i].push((last, back));
                recomputed[i] = true;
            }
            freed += t.storages[s].size - kept;
        }
        out = simulate(t, budget, link, &plan);
    }
    if out.feasible {
        super::prune::prune(t, budget, link, &mut plan, &mut out, more);
        super::prune::prune_swaps(t, budget, link, &mut plan, &mut out, more);
        super::triggers::adjust_triggers(t, a, budget, link, &mut plan, &mut out, more);
    }
    (plan, out)
}

/// Turns a swap into a recomputation where recomputing costs less than the stall the swap
/// causes, smallest ratio first, keeping a change only if the replay improves. The changes are
/// tried a group at a time: first one, then a group twice as large after each one kept (at
/// most a sixteenth of the list: about sixteen replays where most are kept, however many); a
/// group not kept is halved, and a single change not kept is passed over.
pub(super) fn refine_swaps(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    plan: &mut Plan,
    out: &mut Outcome,
    more: Deadline,
) {
    let mut stall_of = vec![0.0; t.storages.len()];
    for st in &out.stalls {
        if let Stall::SwapIn { storage, secs, .. } = *st {
            stall_of[storage] += secs;
        }
    }
    let mut tries: Vec<(f64, usize)> = Vec::new();
    for (i, &(s, d)) in plan.iter().enumerate() {
        if let Decision::Swap { back, .. } = d
            && a.recomputable(t, s, back)
        {
            let stall = stall_of[s];
            let rec = t.ops[t.storages[s].producer.unwrap()].time_s;
            if stall > 0.0 && rec < stall {
                tries.push((rec / stall, i));
            }
        }
    }
    tries.sort_by(|x, y| x.0.total_cmp(&y.0));
    let (mut i, mut k) = (0, 1);
    let most = tries.len().div_ceil(16);
    while i < tries.len() && more() {
        let group = &tries[i..(i + k.min(most)).min(tries.len())];
        let mut cand = plan.clone();
        for &(_, j) in group {
            if let (s, Decision::Swap { after, back, .. }) = cand[j] {
                cand[j] = (s, Decision::Recompute { after, back });
            }
        }
        if let Some(o) = simulate_within(t, budget, link, &cand, out.makespan, false) {
            *plan = cand;
            *out = o;
            i += group.len();
            k = 2 * group.len();
        } else if group.len() > 1 {
            k = group.len().div_ceil(2);
        } else {
            i += 1;
        }
    }
}

/// Capuchin's selection with both mechanisms (MSPS ranking, FreeTime first, in-trigger
/// feedback), and its stalled swaps turned into recomputations where cheaper.
pub(super) fn both_selection(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    refined(t, a, budget, link, Selection::capuchin(), more)
}

/// The selection `sel` (both mechanisms), its stalled swaps turned into recomputations where
/// cheaper.
fn refined(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: Selection,
    more: Deadline,
) -> (Plan, Outcome) {
    let (mut plan, mut out) = iterative_from(t, a, budget, link, sel, Vec::new(), more);
    if out.feasible {
        refine_swaps(t, a, budget, link, &mut plan, &mut out, more);
    }
    (plan, out)
}

/// Capuchin's policy: its first, measured iteration in passive mode (swapping on demand), then
/// its selection ([`both_selection`]) with the passive mode behind it where it falls short. Ours
/// on top (README): a passive mode that may also drop by DTR's score, stuck recomputations
/// ruled out and the selection rerun, what the selection took beyond need undone (prune),
/// stalled swaps turned into recomputations, the selection run again with recomputation first
/// ([`swaps_after_recomputation`]), and the feedback generalised ([`capuchin_from`]).
pub(super) fn capuchin(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    let sel = both_selection(t, a, budget, link, more);
    let passive = [Evict::Lru, Evict::Dtr].map(|e| online(t, a, budget, link, e));
    let mut seeded = Vec::new();
    if more() {
        let up = online(t, a, budget, link, Evict::DtrUpstream);
        let rec = recompute_after(t, a, budget, link, more, [passive[1].clone(), up], None);
        seeded = swaps_after_recomputation(t, a, budget, link, &rec, more);
    }
    capuchin_from(t, a, budget, link, passive, sel, seeded, more, true)
}

/// [`capuchin`] from the passive runs alone (LRU, DTR), its selection's result, and the plans
/// its selection made after recomputation (`seeded`); with `feedback`, the best of them is
/// then moved one tensor at a time by what its replay shows ([`super::descent`]: Capuchin's
/// feedback, a stalled swap-in triggered earlier, generalised to every decision; `auto` runs
/// it once, on its own best plan).
#[allow(clippy::too_many_arguments)]
pub(super) fn capuchin_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    passive: [(Plan, Outcome); 2],
    sel: (Plan, Outcome),
    seeded: Vec<(Plan, Outcome)>,
    more: Deadline,
    feedback: bool,
) -> (Plan, Outcome) {
    let mut v = passive.to_vec();
    v.extend(with_passive(t, a, budget, link, Mechanism::Both, sel, more));
    v.extend(by_pages(t, a, budget, link, Selection::capuchin(), more));
    if more() {
        let relieving = Selection {
            relieve: true,
            ..Selection::capuchin()
        };
        let r = refined(t, a, budget, link, relieving, more);
        v.extend(with_passive(t, a, budget, link, Mechanism::Both, r, more));
    }
    v.extend(seeded);
    let b = best(v);
    if feedback {
        super::descent::descend(t, a, budget, link, more, b)
    } else {
        b
    }
}

/// The swap selection (relieving) seeded by the recomputation selection's plan `rec` where that
/// falls short, with the passive mode behind: recomputation where it is cheap, the copy engines
/// kept for what it cannot move (the weights and an optimizer's state, which no operation made,
/// and what it left). Capuchin's order (swaps that hide first, §4.5) spends the engines on the
/// first swaps that hide, and where the traffic that must move exceeds what the engines carry
/// in the forward pass, those are often tensors cheap to recompute: a transformer's
/// activations at three tenths of its peak (BERT-like, simulated H100, offline on one trace:
/// 1.68x -> 1.46x of the compute time), ResNet-50's (1.37x -> 1.26x). None where `rec` fits.
pub(super) fn swaps_after_recomputation(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    rec: &(Plan, Outcome),
    more: Deadline,
) -> Vec<(Plan, Outcome)> {
    if rec.1.feasible || !more() {
        return Vec::new();
    }
    let sel = Selection {
        relieve: true,
        ..Selection::of(Mechanism::Swap)
    };
    let x = iterative_from(t, a, budget, link, sel, rec.0.clone(), more);
    with_passive(t, a, budget, link, Mechanism::Swap, x, more)
}

/// Capuchin's selection restricted to swapping, with its passive mode (LRU) behind it.
pub(super) fn swap_only(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    let sel = iterative(t, a, budget, link, Mechanism::Swap, more);
    swap_only_from(t, a, budget, link, sel, more)
}

/// [`swap_only`] from its selection's result.
pub(super) fn swap_only_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: (Plan, Outcome),
    more: Deadline,
) -> (Plan, Outcome) {
    let mut v = with_passive(t, a, budget, link, Mechanism::Swap, sel, more);
    v.extend(by_pages(
        t,
        a,
        budget,
        link,
        Selection::of(Mechanism::Swap),
        more,
    ));
    best(v)
}

/// The selection `sel` made as if each swap copied the pages it frees, its plans (refined,
/// with the passive mode behind) judged by the exact replay; none where a trace's copies are
/// its storages' sizes. A trace held in pages (the shim's) copies each tensor's own bytes,
/// fewer. The selection's FreeTime sees the copy engines at the baseline's timing only, and
/// the queues they build up in the replay make copies late: estimated at the pages (the
/// estimate before copies were counted exactly), the selection leaves them that margin and may
/// choose other tensors (BERT at half its peak, simulated H100, `auto` predicted offline on
/// one trace: 82.97 ms against 90.78).
pub(super) fn by_pages(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    sel: Selection,
    more: Deadline,
) -> Vec<(Plan, Outcome)> {
    if t.copied.is_empty() || !more() {
        return Vec::new();
    }
    let mut paged = t.clone();
    paged.copied.clear();
    let (mut plan, mut out) = iterative_from(&paged, a, budget, link, sel, Vec::new(), more);
    let mut v = Vec::new();
    // (Refining turns swaps into recomputations: not for a selection that only swaps.)
    if out.feasible && sel.mech == Mechanism::Both {
        // Refined on the pages' estimate: the unrefined plan may replay faster exactly.
        v.push(plan.clone());
        refine_swaps(&paged, a, budget, link, &mut plan, &mut out, more);
    }
    v.extend(
        with_passive(&paged, a, budget, link, sel.mech, (plan, out), more)
            .into_iter()
            .map(|(p, _)| p),
    );
    v.into_iter()
        .map(|p| {
            let o = simulate(t, budget, link, &p);
            (p, o)
        })
        .collect()
}

/// Capuchin's selection restricted to recomputation, under either ranking (the better by
/// replay), with its passive mode (dropping) behind it where it falls short, or alone (its
/// first iteration) where that is better.
pub(super) fn recompute_only(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    let passive = [DROPS[0], DROPS[1]].map(|e| online(t, a, budget, link, e));
    recompute_from(t, a, budget, link, more, passive)
}

/// [`recompute_only`] from the passive runs alone (the [`DROPS`] modes).
pub(super) fn recompute_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    passive: [(Plan, Outcome); 2],
) -> (Plan, Outcome) {
    recompute_after(t, a, budget, link, more, passive, None)
}

/// The first run of the recomputation selection's loop (MSPS ranking), alone: cheap, and on
/// some traces already the best plan there is (`auto` takes it first).
pub(super) fn recompute_first(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
) -> (Plan, Outcome) {
    let sel = Selection::of(Mechanism::Recompute);
    select(t, a, budget, link, sel, Vec::new(), &[], more)
}

/// [`recompute_from`], given (where `auto` made it already) [`recompute_first`]'s result.
pub(super) fn recompute_after(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    passive: [(Plan, Outcome); 2],
    mut first: Option<(Plan, Outcome)>,
) -> (Plan, Outcome) {
    let mut variants: Vec<_> = passive.to_vec();
    for rank in [Rank::Msps, Rank::Area] {
        if !more() {
            break;
        }
        let sel = Selection {
            rank,
            ..Selection::of(Mechanism::Recompute)
        };
        let got = match first.take() {
            Some(f) if rank == Rank::Msps => {
                iterative_after(t, a, budget, link, sel, Vec::new(), f, more)
            }
            _ => iterative_from(t, a, budget, link, sel, Vec::new(), more),
        };
        variants.extend(with_passive(t, a, budget, link, sel.mech, got, more));
    }
    best(variants)
}
