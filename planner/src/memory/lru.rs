//! The passive baseline: on demand, swap out the least recently used tensor, swap it back in when
//! it is read.

use super::analysis::Analysis;
use super::passive::online;
use crate::model::Trace;
use crate::timeline::{Evict, Link, Outcome, Plan};

/// Passive LRU swapping alone, replayed.
pub(super) fn lru(t: &Trace, a: &Analysis, budget: u64, link: Link) -> (Plan, Outcome) {
    online(t, a, budget, link, Evict::Lru)
}
