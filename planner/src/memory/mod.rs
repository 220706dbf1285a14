//! Memory policies: functions from (trace, budget, link) to a plan that the timeline simulator
//! replays, one file per paper: Capuchin's selection ([`capuchin`]), vDNN ([`vdnn`]), SINGA's
//! AutoSwap ([`autoswap`]), Ito et al.'s hybrid ([`hybrid`]), DTR ([`dtr`]) and the passive
//! LRU baseline ([`lru`]), over the shared analysis ([`analysis`]) and the passive mode
//! ([`passive`]). Names from the papers: evicted-access (the access after which a tensor
//! leaves), back-access (the access that needs it again), in-trigger (the operation at whose
//! start its swap-in begins), FreeTime (time a swap can hide in), MSPS (memory saving per
//! second).

mod analysis;
mod autoswap;
mod capuchin;
mod dtr;
mod hybrid;
mod lru;
mod passive;
mod vdnn;

pub use analysis::Analysis;
use capuchin::{Rank, Selection, iterative_from, peak_seed, refine_swaps};
use passive::online_from;

use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Plan};

/// Every policy `marmoset plan` knows.
pub const POLICIES: &[&str] = &[
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
/// evictions join the plan.
pub(super) fn with_passive(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    mech: Mechanism,
    (plan, out): (Plan, Outcome),
) -> Vec<(Plan, Outcome)> {
    let modes: &[Evict] = match (out.feasible, mech) {
        (true, _) => &[],
        (false, Mechanism::Swap) => &[Evict::Lru],
        (false, Mechanism::Recompute) => DROPS,
        (false, Mechanism::Both) => &[Evict::Lru, Evict::Dtr],
    };
    let mut v: Vec<(Plan, Outcome)> = modes
        .iter()
        .map(|&evict| online_from(t, a, budget, link, evict, plan.clone()))
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

/// Runs policy `name`. Capuchin takes the better of its combined selection and of its selection
/// restricted to one mechanism, by simulation (its measured-execution / feedback loop); its
/// first, measured iteration runs in passive mode, kept where no plan beats it.
pub fn run(name: &str, t: &Trace, budget: u64, link: Link) -> Option<(Plan, Outcome)> {
    let a = Analysis::new(t);
    // The passive first iteration alone: swapping, or recomputing.
    let passive = |evict| passive::online(t, &a, budget, link, evict);
    Some(match name {
        "capuchin" => {
            let by_area = |mech| Selection {
                rank: Rank::Area,
                ..Selection::of(mech)
            };
            // Seeded by the whole-peak pass, tensors of 1 MiB and more.
            let large = Selection {
                min_size: 1 << 20,
                ..Selection::of(Mechanism::Both)
            };
            let mut variants: Vec<_> = [Evict::Lru]
                .iter()
                .chain(DROPS)
                .map(|&e| passive(e))
                .collect();
            for (sel, seed) in [
                (Selection::of(Mechanism::Both), Vec::new()),
                (by_area(Mechanism::Both), Vec::new()),
                (Selection::of(Mechanism::Swap), Vec::new()),
                (Selection::of(Mechanism::Recompute), Vec::new()),
                (by_area(Mechanism::Recompute), Vec::new()),
                (large, peak_seed(t, &a, budget, link, false)),
                (large, peak_seed(t, &a, budget, link, true)),
            ] {
                let (mut plan, mut out) = iterative_from(t, &a, budget, link, sel, seed);
                if out.feasible && sel.mech != Mechanism::Recompute {
                    refine_swaps(t, &a, budget, link, &mut plan, &mut out);
                }
                variants.extend(with_passive(t, &a, budget, link, sel.mech, (plan, out)));
            }
            best(variants)
        }
        "swap" => {
            let sel = capuchin::iterative(t, &a, budget, link, Mechanism::Swap);
            best(with_passive(t, &a, budget, link, Mechanism::Swap, sel))
        }
        // Capuchin's selection with recomputation only, under either ranking (the better by
        // replay, as capuchin itself picks), with its passive mode behind it where it falls
        // short, or alone (its first iteration) where that is better.
        "recompute" => {
            let mut variants: Vec<_> = DROPS.iter().map(|&e| passive(e)).collect();
            for rank in [Rank::Msps, Rank::Area] {
                let sel = Selection {
                    rank,
                    ..Selection::of(Mechanism::Recompute)
                };
                let got = iterative_from(t, &a, budget, link, sel, Vec::new());
                variants.extend(with_passive(t, &a, budget, link, sel.mech, got));
            }
            best(variants)
        }
        "dtr" => dtr::dtr(t, &a, budget, link),
        "lru" => lru::lru(t, &a, budget, link),
        "vdnn-all" => vdnn::vdnn(t, &a, budget, link, false),
        "vdnn-conv" => vdnn::vdnn(t, &a, budget, link, true),
        "autoswap" => autoswap::autoswap(t, &a, budget, link),
        "hybrid" => hybrid::hybrid(t, &a, budget, link),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
