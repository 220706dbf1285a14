//! DTR (Kirisame et al., ICLR '21): evict on demand by the heuristic cost of the evicted
//! neighbourhood / (size x staleness), rematerialise on access (see [`Evict::Dtr`]).

use super::analysis::Analysis;
use super::passive::online;
use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Plan};

/// DTR's runtime alone, replayed.
pub(super) fn dtr(t: &Trace, a: &Analysis, budget: u64, link: Link) -> (Plan, Outcome) {
    online(t, a, budget, link, Evict::Dtr)
}
