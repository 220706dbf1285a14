//! The steady iteration and its names: consecutive iterations verified to touch corresponding
//! allocations, each tensor named by its place in an iteration ([`TensorId`]) or, made before the
//! repetition began, by its allocation.

use super::detection::Region;
use super::tokens::{Call, Effect};
use std::collections::{HashMap, HashSet};

/// A tensor as an iteration names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TensorId {
    /// Allocated before the repetition began (weights, pre-allocated blobs, optimizer state):
    /// the same allocation in every iteration.
    Persistent { alloc: u64, size: u64 },
    /// The `k`-th allocation (from 0) of the iteration `back` iterations before this one
    /// (0: this one). Its address differs in every iteration.
    Rel { back: usize, k: usize, size: u64 },
}

impl TensorId {
    pub fn size(&self) -> u64 {
        match *self {
            TensorId::Persistent { size, .. } | TensorId::Rel { size, .. } => size,
        }
    }
}

/// One steady iteration: calls `start .. start + period` of the stream, verified against the one
/// before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steady {
    pub start: usize,
    pub period: usize,
    /// Its index among the region's full iterations (from 0; never 0: the first is not steady).
    pub index: usize,
    /// Full iterations in the region, from the cut.
    pub iterations: usize,
    /// Each allocation id the iteration touches, allocates or frees, by name.
    pub names: HashMap<u64, TensorId>,
}

/// Why consecutive iterations do not correspond.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The iteration (from 0) that differs from the one before it, and the call within it.
    pub iteration: usize,
    pub call: usize,
    pub what: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "iteration {} diverges from the one before at its call {}: {}",
            self.iteration, self.call, self.what
        )
    }
}

/// Where each allocation was made: (index of its call, size), for the allocations the
/// repetition repeats: made inside it, or in the period before it by a call it repeats one
/// period later (the first iteration's tensors, whose uses may differ). The others are the
/// allocations themselves in every iteration.
fn allocations(calls: &[Call], region: Region) -> HashMap<u64, (usize, u64)> {
    let p = region.period;
    calls
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.effect {
            Effect::Alloc { id, size }
                if i >= region.start
                    || (i + p >= region.start && calls[i + p].token == c.token) =>
            {
                Some((id, (i, size)))
            }
            _ => None,
        })
        .collect()
}

/// A tensor's name inside the iteration starting at `ws` (period `p`, iterations cut at `cut`):
/// (false, iterations back, call offset within its iteration) for what was allocated inside the
/// repetition (before the cut too: it repeats there as well), else (true, the allocation, 0).
/// Allocations after the iteration cannot be touched by it: (false, MAX, index).
fn raw_name(
    made: &HashMap<u64, (usize, u64)>,
    id: u64,
    region: Region,
    cut: usize,
    ws: usize,
) -> (bool, u64, usize) {
    let p = region.period as i64;
    match made.get(&id) {
        Some(&(i, _)) if i < ws + region.period => {
            let rel = i as i64 - cut as i64;
            let (w_of, off) = (rel.div_euclid(p), rel.rem_euclid(p));
            let w = (ws - cut) as i64 / p;
            (false, (w - w_of) as u64, off as usize)
        }
        Some(&(i, _)) if i >= ws + region.period => (false, u64::MAX, i),
        _ => (true, id, 0),
    }
}

/// Verifies the full iterations of `region` cut at `cut` pairwise and returns the last one that
/// matches the one before it, with its names; or the first divergence when none does.
pub fn steady(calls: &[Call], region: Region, cut: usize) -> Result<Steady, Divergence> {
    let p = region.period;
    let n = if cut + p <= region.end {
        (region.end - cut) / p
    } else {
        0
    };
    let made_all = allocations(calls, region);
    let freed: HashSet<u64> = calls
        .iter()
        .filter_map(|c| match c.effect {
            Effect::Free { id } => Some(id),
            _ => None,
        })
        .collect();
    let mut first_bad: Option<Divergence> = None;
    for w in (1..n).rev() {
        let (a, b) = (cut + (w - 1) * p, cut + w * p);
        // What an iteration allocates, a later one frees: an allocation made before the pair
        // and never freed is no iteration's, whatever call stands a period after it (an
        // optimizer's momentum, made once at its first step: BERT's was named as the k-th
        // allocation three iterations back, where a gradient of its size stood, and its
        // planned swap went to that freed gradient every iteration).
        let made: HashMap<u64, (usize, u64)> = made_all
            .iter()
            .filter(|(id, (i, _))| *i >= a || freed.contains(id))
            .map(|(&id, &v)| (id, v))
            .collect();
        let bad = (0..p).find_map(|o| {
            let (x, y) = (&calls[a + o], &calls[b + o]);
            if x.token != y.token {
                return Some((o, "a different call".to_string()));
            }
            // Inferred touches are hints (see [`token`]): the executor makes whatever a call
            // really touches resident, whatever the plan says.
            let ids = |c: &Call| -> Vec<u64> {
                let mut v = if c.inferred {
                    Vec::new()
                } else {
                    c.touches.clone()
                };
                if let Effect::Free { id } = c.effect {
                    v.push(id);
                }
                v
            };
            let (ix, iy) = (ids(x), ids(y));
            if ix.len() != iy.len() {
                return Some((o, "a different number of touches".to_string()));
            }
            ix.iter().zip(&iy).find_map(|(&u, &v)| {
                let (nu, nv) = (
                    raw_name(&made, u, region, cut, a),
                    raw_name(&made, v, region, cut, b),
                );
                (nu != nv).then(|| {
                    (
                        o,
                        format!(
                            "allocation {v} stands where allocation {u} stood ({nu:?} vs {nv:?})"
                        ),
                    )
                })
            })
        });
        match bad {
            None => {
                let sizes: HashMap<u64, u64> = calls
                    .iter()
                    .filter_map(|c| match c.effect {
                        Effect::Alloc { id, size } => Some((id, size)),
                        _ => None,
                    })
                    .collect();
                let mut names = HashMap::new();
                for c in &calls[b..b + p] {
                    let mut ids = c.touches.clone();
                    match c.effect {
                        Effect::Free { id } | Effect::Alloc { id, .. } => ids.push(id),
                        Effect::Use => {}
                    }
                    for id in ids {
                        names
                            .entry(id)
                            .or_insert_with(|| name(calls, &made, &sizes, id, region, cut, b));
                    }
                }
                return Ok(Steady {
                    start: b,
                    period: p,
                    index: w,
                    iterations: n,
                    names,
                });
            }
            Some((call, what)) => {
                first_bad = Some(Divergence {
                    iteration: w,
                    call,
                    what,
                })
            }
        }
    }
    Err(first_bad.unwrap_or(Divergence {
        iteration: 0,
        call: 0,
        what: format!("fewer than two full iterations ({n}) after the cut"),
    }))
}

/// [`steady`] on `region` cut where `cut` says; when no pair of its iterations verifies, again
/// from one period later, as long as two full iterations remain. The repetition's first
/// iteration may name differently what the iteration before it made (a data loader's batch
/// allocated one iteration ahead: the first iteration found reads one made before the
/// repetition began, which is not yet named by its place in an iteration).
pub fn steady_from(
    calls: &[Call],
    mut region: Region,
    cut: impl Fn(Region) -> usize,
) -> Result<Steady, Divergence> {
    loop {
        let got = steady(calls, region, cut(region));
        match got {
            Ok(st) => return Ok(st),
            Err(d) if region.end - region.start < 3 * region.period => return Err(d),
            Err(_) => region.start += region.period,
        }
    }
}

/// A tensor's [`TensorId`] in the iteration starting at `ws`; `k` counts the allocations of the
/// iteration before its call offset (the same in every verified iteration).
fn name(
    calls: &[Call],
    made: &HashMap<u64, (usize, u64)>,
    sizes: &HashMap<u64, u64>,
    id: u64,
    region: Region,
    cut: usize,
    ws: usize,
) -> TensorId {
    let size = sizes.get(&id).copied().unwrap_or(0);
    match raw_name(made, id, region, cut, ws) {
        (false, back, off) if back != u64::MAX => {
            let k = calls[ws..ws + off]
                .iter()
                .filter(|c| matches!(c.effect, Effect::Alloc { .. }))
                .count();
            TensorId::Rel {
                back: back as usize,
                k,
                size,
            }
        }
        _ => TensorId::Persistent { alloc: id, size },
    }
}
