//! The passive mode: the simulator evicts on demand when an allocation would exceed the budget
//! (Capuchin's first, measured iteration; DTR's runtime; the LRU baseline), and its evictions
//! become a plan that is replayed as any other.

use super::Deadline;
use super::analysis::Analysis;
use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Passive, Plan, simulate, simulate_passive};

/// The online policies, run by the simulator in passive mode from `plan` (empty: the policy
/// alone; else Capuchin's passive mode behind its plan): when an allocation would exceed the
/// budget, evict (see [`Evict`]): least recently used, swapped out and back on demand (the
/// passive baseline), or by DTR's heuristic, dropped and recomputed on demand, evicting during
/// recomputations too. The evictions join the plan, and the plan is replayed as any other (one
/// that `more` cut short does not fit).
pub(super) fn online_from(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    evict: Evict,
    mut plan: Plan,
    more: Deadline,
) -> (Plan, Outcome) {
    let (evicted, _) = passive_run(t, a, budget, link, evict, &plan, more);
    plan.extend(evicted);
    let out = simulate(t, budget, link, &plan);
    (plan, out)
}

/// The passive run behind [`online_from`]: its evictions, and its own outcome.
pub(super) fn passive_run(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    evict: Evict,
    plan: &Plan,
    more: Deadline,
) -> (Plan, Outcome) {
    passive_run_by(t, a, budget, link, evict, plan, more, true, f64::INFINITY)
}

/// [`passive_run`], choosing each eviction through the simulator's index of candidates
/// (`indexed`) or by scanning every storage (the reference the index is tested against), and
/// stopped (not feasible) once it cannot end below `cutoff`.
#[allow(clippy::too_many_arguments)]
pub(super) fn passive_run_by(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    evict: Evict,
    plan: &Plan,
    more: Deadline,
    indexed: bool,
    cutoff: f64,
) -> (Plan, Outcome) {
    let a = a.clone().extended(plan);
    let swap = evict == Evict::Lru;
    let both = evict == Evict::DtrOrSwap;
    // Where the shim carries the plan out (`Trace::shim_carries_out`), it replays into the
    // program's memory and keeps nothing past the program's free of it: a drop is only
    // carried out where the producer's sources still hold their contents at the back-access
    // (`carried_out::carried_out`), and nothing goes for good before the program frees it.
    // DTR's runtime keeps freed sources as metadata instead (the horizon below).
    let shim = t.shim_carries_out;
    let for_good = (!shim).then_some(usize::MAX);
    let until = (shim && !swap).then(|| super::carried_out::valid_until(t));
    let sourced = |s: usize, back: usize| {
        until
            .as_ref()
            .is_none_or(|u| super::carried_out::sourced(t, u, s, back))
    };
    let evictable = |s: usize, op: usize| -> Option<usize> {
        let acc = &a.accesses[s];
        match acc.get(acc.partition_point(|&x| x <= op)) {
            // Weights stay: the optimizer and the next iteration read them.
            None if t.storages[s].constant => None,
            None if swap => for_good.filter(|_| a.horizon[s] <= op),
            // Nothing reads it again, nor anything made from it: it goes for good.
            None if a.horizon[s] <= op => for_good,
            // Something made from it may be recomputed until its horizon: recomputable until
            // then, as DTR's evictions are.
            None => Some(a.horizon[s]).filter(|&h| sourced(s, h)),
            Some(&back) => Some(back).filter(|&b| swap || both || sourced(s, b)),
        }
    };
    // Dropping or swapping, by which costs less: a swap where something reads it again, a drop
    // where its sources hold their contents then.
    let ways = |s: usize, op: usize, back: usize| {
        let acc = &a.accesses[s];
        let read = acc.get(acc.partition_point(|&x| x <= op)) == Some(&back);
        (read, sourced(s, back))
    };
    // From which operation on `evictable` says `usize::MAX`: after the last access and the
    // horizon; weights never.
    let gone_from: Vec<usize> = (0..t.storages.len())
        .map(|s| {
            if t.storages[s].constant {
                usize::MAX
            } else {
                a.accesses[s].last().copied().unwrap_or(0).max(a.horizon[s])
            }
        })
        .collect();
    let passive = Passive {
        evict,
        evictable: &evictable,
        ways: both.then_some(&ways as &dyn Fn(usize, usize, usize) -> (bool, bool)),
        horizon: (!swap && !shim).then_some(&a.horizon),
        more: Some(more),
        gone_from: indexed.then_some(&gone_from[..]),
        cutoff,
    };
    simulate_passive(t, budget, link, plan, &passive)
}

pub(super) fn online(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    evict: Evict,
) -> (Plan, Outcome) {
    online_from(t, a, budget, link, evict, Vec::new(), &|| true)
}

/// [`online`] until `more` says time is up, or until it cannot end below `cutoff` (a cut run's
/// plan does not fit): the portfolio's best so far, which such a run could not beat (on a
/// recurrent network DTR's runtime thrashes for a third of a second to a 3.3x plan, where the
/// recomputation selection's first run found 1.15x).
pub(super) fn online_below(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    evict: Evict,
    more: Deadline,
    cutoff: f64,
) -> (Plan, Outcome) {
    let (plan, _) = passive_run_by(t, a, budget, link, evict, &Vec::new(), more, true, cutoff);
    let out = simulate(t, budget, link, &plan);
    (plan, out)
}
