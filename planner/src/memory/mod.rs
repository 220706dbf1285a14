//! Memory policies: functions from (trace, budget, link) to a plan that the timeline simulator
//! replays, one file per paper: Capuchin's selection ([`capuchin`]), the portfolio ([`auto`]),
//! the lower bound ([`bound`]), vDNN ([`vdnn`]), SINGA's
//! AutoSwap ([`autoswap`]), Ito et al.'s hybrid ([`hybrid`]), DTR ([`dtr`]) and the passive
//! LRU baseline ([`lru`]), over the shared analysis ([`analysis`]) and the passive mode
//! ([`passive`]). Names from the papers: evicted-access (the access after which a tensor
//! leaves), back-access (the access that needs it again), in-trigger (the operation at whose
//! start its swap-in begins), FreeTime (time a swap can hide in), MSPS (memory saving per
//! second).

mod analysis;
mod auto;
mod autoswap;
pub mod bound;
mod capuchin;
pub mod carried_out;
mod descent;
mod dtr;
mod engines;
mod hybrid;
pub mod joint;
mod lru;
mod passive;
mod prune;
mod triggers;
mod vdnn;

pub use analysis::Analysis;
pub use bound::Bound;
use passive::online_from;

use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Plan};

/// Every policy `marmoset plan` knows; `auto`, the portfolio, is the default.
pub const POLICIES: &[&str] = &[
    "auto",
    "capuchin",
    "swap",
    "recompute",
    "dtr",
    "lru",
    "vdnn-all",
    "vdnn-conv",
    "autoswap",
    "hybrid",
];

/// Which mechanisms a selection may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mechanism {
    Swap,
    Recompute,
    Both,
}

/// Which of two replays is better: feasible before infeasible; among feasible ones the faster;
/// among infeasible ones the one closer to the budget (its worst excess), then the faster.
pub(super) fn rank_outcomes(x: &Outcome, y: &Outcome) -> std::cmp::Ordering {
    let over = |o: &Outcome| {
        if o.invalid {
            u64::MAX
        } else {
            o.worst.map_or(0, |w| w.1)
        }
    };
    (!x.feasible)
        .cmp(&!y.feasible)
        .then_with(|| {
            if x.feasible {
                std::cmp::Ordering::Equal
            } else {
                over(x).cmp(&over(y))
            }
        })
        .then_with(|| x.makespan.total_cmp(&y.makespan))
}

/// A plan and, where it does not fit, Capuchin's passive mode behind it: the replay evicts on
/// demand where the plan leaves memory over the budget, by each mechanism `mech` allows, and the
/// evictions join the plan. A run that `more` cuts short does not fit.
pub(super) fn with_passive(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    mech: Mechanism,
    (plan, out): (Plan, Outcome),
    more: Deadline,
) -> Vec<(Plan, Outcome)> {
    let modes: &[Evict] = match (out.feasible, mech) {
        (true, _) => &[],
        (false, Mechanism::Swap) => &[Evict::Lru],
        (false, Mechanism::Recompute) => DROPS,
        (false, Mechanism::Both) => &[Evict::Lru, Evict::Dtr],
    };
    let mut v: Vec<(Plan, Outcome)> = modes
        .iter()
        .map(|&evict| online_from(t, a, budget, link, evict, plan.clone(), more))
        .collect();
    v.push((plan, out));
    v
}

/// The passive modes that drop: DTR's heuristic, and the variant whose cost counts only what
/// would come back with a tensor (better on some traces, by replay).
pub(super) const DROPS: &[Evict] = &[Evict::Dtr, Evict::DtrUpstream];

/// The best of several replays (see [`rank_outcomes`]).
pub(super) fn best(v: impl IntoIterator<Item = (Plan, Outcome)>) -> (Plan, Outcome) {
    v.into_iter()
        .min_by(|x, y| rank_outcomes(&x.1, &y.1))
        .expect("at least one plan")
}

/// Tries `n` moves, in order, a group at a time: `keep(range)` applies moves `range` to the plan,
/// replays it and says whether it kept them. A group kept makes the next one twice as large; a
/// group not kept is halved, and a single move not kept is passed over. Where most moves are
/// kept that is a few replays instead of one per move; where few are, at most about two per
/// move.
pub(super) fn in_groups(
    n: usize,
    more: Deadline,
    mut keep: impl FnMut(std::ops::Range<usize>) -> bool,
) {
    let (mut i, mut k) = (0, n.max(1));
    while i < n && more() {
        let group = i..(i + k).min(n);
        let len = group.len();
        if keep(group) {
            i += len;
            k = 2 * len;
        } else if len > 1 {
            k = len.div_ceil(2);
        } else {
            i += 1;
        }
    }
}

/// Asked between (and inside) the steps of a search: false once time is up, and the search
/// returns its best plan so far. The caller owns the clock (the crate reads none): the
/// `marmoset` command and the shim ask a [`Pace`] with the time now; a test can count calls.
pub type Deadline<'a> = &'a dyn Fn() -> bool;

/// A deadline kept, not overrun by one step: asked with the time now, it says whether another
/// step fits before the end, a step taking as long as the longest interval between two askings
/// so far (the search's steps between two askings vary little, and a loaded host stretches
/// them all). Plain `now < end` lets the step in flight finish past the end. It also keeps back
/// [`RESERVE`] of the time for what follows the last asking (a search's closing replay of its
/// best plan): `auto` on a 1,257-operation trace under 100 ms returned at up to 100.4 ms
/// without it.
#[derive(Debug)]
pub struct Pace {
    end: f64,
    last: std::cell::Cell<Option<f64>>,
    longest: std::cell::Cell<f64>,
}

impl Pace {
    /// A deadline `end` seconds after the clock's zero.
    pub fn new(end: f64) -> Pace {
        Pace {
            end,
            last: std::cell::Cell::new(None),
            longest: std::cell::Cell::new(0.0),
        }
    }

    /// Whether another step fits, the time now `now` (seconds, the same clock as `end`).
    pub fn more(&self, now: f64) -> bool {
        if let Some(last) = self.last.get() {
            self.longest.set(self.longest.get().max(now - last));
        }
        self.last.set(Some(now));
        now + self.longest.get() < self.end * (1.0 - RESERVE)
    }
}

/// The fraction of a [`Pace`]'s time kept back for returning.
const RESERVE: f64 = 0.01;

/// Policies' results by name.
pub type Named = Vec<(&'static str, (Plan, Outcome))>;

/// Runs policy `name` to completion.
pub fn run(name: &str, t: &Trace, budget: u64, link: Link) -> Option<(Plan, Outcome)> {
    run_until(name, t, budget, link, &|| true)
}

/// Runs policy `name` until `more` says time is up (see [`Deadline`]); `None` for a name not in
/// [`POLICIES`]. Where the shim carries the plan out ([`Trace::shim_carries_out`]), the plan
/// and its outcome are as it carries them out; where it lends convolutions workspace
/// ([`Trace::lends_workspaces`]), with the cap on it chosen too ([`joint::choose`]).
pub fn run_until(
    name: &str,
    t: &Trace,
    budget: u64,
    link: Link,
    more: Deadline,
) -> Option<(Plan, Outcome)> {
    if t.lends_workspaces
        && let Some((_, p, o)) = joint::choose(t, budget, &mut |_, c| {
            run_until(name, c, budget, link, more)
        })
    {
        return Some((p, o));
    }
    let a = Analysis::new(t);
    let planned = match name {
        "auto" => auto::portfolio(t, &a, budget, link, more, false).0,
        "capuchin" => capuchin::capuchin(t, &a, budget, link, more),
        "swap" => capuchin::swap_only(t, &a, budget, link, more),
        "recompute" => capuchin::recompute_only(t, &a, budget, link, more),
        "dtr" => dtr::dtr(t, &a, budget, link),
        "lru" => lru::lru(t, &a, budget, link),
        "vdnn-all" => vdnn::vdnn(t, &a, budget, link, false),
        "vdnn-conv" => vdnn::vdnn(t, &a, budget, link, true),
        "autoswap" => autoswap::autoswap(t, &a, budget, link),
        "hybrid" => hybrid::hybrid(t, &a, budget, link, more),
        _ => return None,
    };
    Some(carried(t, budget, link, planned))
}

/// A plan as the shim carries it out, where it does ([`Trace::shim_carries_out`]).
pub(super) fn carried(t: &Trace, budget: u64, link: Link, x: (Plan, Outcome)) -> (Plan, Outcome) {
    if t.shim_carries_out {
        carried_out::as_carried_out(t, budget, link, x)
    } else {
        x
    }
}

/// Every policy in [`POLICIES`] at once, each result exactly as [`run`] gives it, for the cost
/// of `auto` alone (its steps are the other policies' searches).
pub fn run_all(t: &Trace, budget: u64, link: Link) -> Named {
    let a = Analysis::new(t);
    let (best, named) = auto::portfolio(t, &a, budget, link, &|| true, true);
    let mut all = vec![("auto", best)];
    all.extend(
        named
            .into_iter()
            .map(|(n, x)| (n, carried(t, budget, link, x))),
    );
    all.sort_by_key(|x| POLICIES.iter().position(|p| *p == x.0));
    all
}

/// The lower bound on the makespan of any plan for `t` under `budget` (see [`bound`]).
pub fn lower_bound(t: &Trace, budget: u64, link: Link) -> Bound {
    // Over the convolutions' configurations too, where the trace names them.
    match t.at_least_configs() {
        Some(r) => bound::lower_bound(&r, &Analysis::new(&r), budget, link),
        None => bound::lower_bound(t, &Analysis::new(t), budget, link),
    }
}

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod tests;
