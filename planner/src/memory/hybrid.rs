//! Ito et al.'s hybrid of swapping and recomputation (keep / swap / recompute per tensor).

use super::Mechanism;
use super::analysis::Analysis;
use super::capuchin::{iterative, refine_swaps};
use crate::model::Trace;
use crate::timeline::{Link, Outcome, Plan};

/// Ito et al.'s hybrid: start from swaps (Capuchin's swap selection), keep what the swaps can
/// hide, and turn into recomputations the swaps whose stalls cost more than recomputing.
pub(super) fn hybrid(t: &Trace, a: &Analysis, budget: u64, link: Link) -> (Plan, Outcome) {
    let (mut plan, mut out) = iterative(t, a, budget, link, Mechanism::Swap);
    refine_swaps(t, a, budget, link, &mut plan, &mut out);
    (plan, out)
}
