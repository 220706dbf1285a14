//! The steady iteration and its names: consecutive iterations verified to touch corresponding
//! allocations, each tensor named by its place in an iteration ([`TensorId`]) or, made before the
//! repetition began, by its allocation.

use super::detection::{NEXT, Region};
use super::tokens::{Call, Effect};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
/// before it, or, the only full one, against the first calls of the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steady {
    pub start: usize,
    pub period: usize,
    /// Its index among the region's full iterations (from 0): never 0 when there are two or
    /// more (the first is not steady); 0 when it is the only one.
    pub index: usize,
    /// Full iterations in the region, from the cut.
    pub iterations: usize,
    /// Each allocation id the iteration touches, allocates or frees, by name.
    pub names: HashMap<u64, TensorId>,
    /// For each of its calls, the names of the allocations the API names it touching (a
    /// kernel's inferred touches left out), the one it frees last: what the call at the same
    /// offset of each later iteration touches, if the iteration repeats.
    pub touched: Arc<[Vec<TensorId>]>,
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
/// period later among [`NEXT`] calls in a row that do (the first iteration's tensors, whose
/// uses may differ; one call alike in a first iteration out of step with the others is a
/// coincidence, not a repetition). The others are the allocations themselves in every
/// iteration, or stand for what the next iteration's calls show (see [`compare`]).
fn allocations(calls: &[Call], region: Region) -> HashMap<u64, (usize, u64)> {
    let p = region.period;
    let before = region.start.saturating_sub(p);
    // Calls of the period before the region in a run of NEXT or more that repeat a period on.
    let mut repeated = vec![false; region.start - before];
    let mut i = before;
    while i < region.start {
        let s = i;
        while i < region.start && calls[i].token == calls[i + p].token {
            i += 1;
        }
        if i - s >= NEXT {
            repeated[s - before..i - before].fill(true);
        }
        i += 1;
    }
    calls
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.effect {
            Effect::Alloc { id, size }
                if i >= region.start || (i >= before && repeated[i - before]) =>
            {
                Some((id, (i, size)))
            }
            _ => None,
        })
        .collect()
}

/// A tensor's place as an iteration sees it: (false, iterations back, call offset within its
/// iteration), or (true, the allocation, 0) for the allocation itself.
type Raw = (bool, u64, usize);

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
) -> Raw {
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

/// The allocations a call names (the API's touches; a kernel's are inferred from its parameter
/// words, hints that identify nothing, see [`super::token`]), the one it frees last.
fn named(c: &Call) -> Vec<u64> {
    let mut v = if c.inferred {
        Vec::new()
    } else {
        c.touches.clone()
    };
    if let Effect::Free { id } = c.effect {
        v.push(id);
    }
    v
}

/// Compares the first `len` calls of the iterations starting at `a` and one period later: the
/// same calls, and every allocation they name (one at least) named alike. Allocations made
/// before the repetition by a first iteration that differs (it made the optimizer's state, or
/// the batch the next one reads, at calls the later ones do not repeat) have no place of their
/// own: one stands for the allocation its counterpart one period later is, if it does so at
/// every call that names it and nothing else stands for that one. What they stand for, or the
/// call that differs and why.
fn compare(
    calls: &[Call],
    made: &HashMap<u64, (usize, u64)>,
    region: Region,
    cut: usize,
    a: usize,
    len: usize,
) -> Result<HashMap<u64, Raw>, (usize, String)> {
    let p = region.period;
    let b = a + p;
    let made_at: HashMap<usize, u64> = made.iter().map(|(&id, &(i, _))| (i, id)).collect();
    let mut stands: HashMap<u64, Raw> = HashMap::new();
    let mut taken: HashSet<Raw> = HashSet::new();
    // Placeless allocations already found to stand for themselves.
    let mut themselves: HashSet<u64> = HashSet::new();
    let mut named_any = false;
    for o in 0..len {
        let (x, y) = (&calls[a + o], &calls[b + o]);
        if x.token != y.token {
            return Err((o, "a different call".to_string()));
        }
        let (ix, iy) = (named(x), named(y));
        if ix.len() != iy.len() {
            return Err((o, "a different number of touches".to_string()));
        }
        named_any |= !ix.is_empty();
        for (&u, &v) in ix.iter().zip(&iy) {
            let nv = raw_name(made, v, region, cut, b);
            let nu = match stands.get(&u) {
                Some(&r) => r,
                None => raw_name(made, u, region, cut, a),
            };
            if nu == nv {
                if nu.0 {
                    themselves.insert(u);
                }
                continue;
            }
            // The place `nv` names in the first iteration's terms: an allocation made there by
            // the repetition owns it.
            let (back, off) = (nv.1, nv.2);
            let owned = (a + off)
                .checked_sub((back as usize).saturating_mul(p))
                .is_some_and(|pos| made_at.contains_key(&pos));
            let placeless = nu.0 && !stands.contains_key(&u) && !themselves.contains(&u);
            if placeless && !nv.0 && back >= 1 && back != u64::MAX && !owned && taken.insert(nv) {
                stands.insert(u, nv);
                continue;
            }
            return Err((
                o,
                format!("allocation {v} stands where allocation {u} stood ({nu:?} vs {nv:?})"),
            ));
        }
    }
    if !named_any {
        // Calls that name no allocation verify nothing (a loop of kernels over the layers'
        // parameters repeats, inside an iteration, with nothing to say it is one).
        return Err((0, "no call names an allocation".to_string()));
    }
    Ok(stands)
}

/// Verifies the full iterations of `region` cut at `cut` pairwise and returns the last one that
/// matches the one before it, with its names; or the first divergence when none does. Where the
/// region holds one full iteration after the cut, that one, verified against the next's first
/// calls (what follows it is followed call by call).
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
    // What an iteration allocates, a later one frees: an allocation made before the iteration
    // starting at `a` and never freed is no iteration's, whatever call stands a period after it
    // (an optimizer's momentum, made once at its first step: BERT's was named as the k-th
    // allocation three iterations back, where a gradient of its size stood, and its planned swap
    // went to that freed gradient every iteration).
    let made_from = |a: usize| -> HashMap<u64, (usize, u64)> {
        made_all
            .iter()
            .filter(|(id, (i, _))| *i >= a || freed.contains(id))
            .map(|(&id, &v)| (id, v))
            .collect()
    };
    let found = |ws: usize, index: usize, made: &HashMap<u64, (usize, u64)>, stands| {
        let (names, touched) = names_of(calls, made, stands, region, cut, ws);
        Steady {
            start: ws,
            period: p,
            index,
            iterations: n,
            names,
            touched,
        }
    };
    if n == 1 && region.end > cut + p {
        let made = made_from(cut);
        return match compare(calls, &made, region, cut, cut, region.end - cut - p) {
            Ok(stands) => Ok(found(cut, 0, &made, &stands)),
            Err((call, what)) => Err(Divergence {
                iteration: 1,
                call,
                what,
            }),
        };
    }
    let mut first_bad: Option<Divergence> = None;
    for w in (1..n).rev() {
        let a = cut + (w - 1) * p;
        let made = made_from(a);
        match compare(calls, &made, region, cut, a, p) {
            Ok(_) => return Ok(found(a + p, w, &made, &HashMap::new())),
            Err((call, what)) => {
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

/// One iteration seen once: calls `start .. start + period`, named without a second to verify
/// them against (what a program runs between two iterations of kinds it is known to run: an
/// evaluation pass, a batch of another shape). What it allocates is named by its place in it
/// (`Rel { back: 0 }`); what it touches from before, by the allocation itself, which a later
/// iteration of the kind touches only if it still stands (see the shim's tracker).
pub fn once(calls: &[Call], start: usize, period: usize) -> Result<Steady, Divergence> {
    let not = |what: String| Divergence {
        iteration: 0,
        call: 0,
        what,
    };
    if period == 0 || start + period > calls.len() {
        return Err(not(format!(
            "calls {start} to {} are not all in the {} calls",
            start + period,
            calls.len()
        )));
    }
    if calls[start..start + period]
        .iter()
        .all(|c| named(c).is_empty())
    {
        return Err(not("no call names an allocation".to_string()));
    }
    let region = Region {
        start,
        period,
        end: start + period,
    };
    let made: HashMap<u64, (usize, u64)> = calls
        .iter()
        .enumerate()
        .skip(start)
        .take(period)
        .filter_map(|(i, c)| match c.effect {
            Effect::Alloc { id, size } => Some((id, (i, size))),
            _ => None,
        })
        .collect();
    let (names, touched) = names_of(calls, &made, &HashMap::new(), region, start, start);
    Ok(Steady {
        start,
        period,
        index: 0,
        iterations: 1,
        names,
        touched,
    })
}

/// [`steady`] on `region` cut where `cut` says; when no pair of its iterations verifies, again
/// from one period later, as long as two full iterations remain.
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

/// The names of the iteration starting at `ws`: each allocation it touches, allocates or frees,
/// and the ones each call names; `stands` gives the place of the placeless allocations that
/// stand for another (see [`compare`]).
fn names_of(
    calls: &[Call],
    made: &HashMap<u64, (usize, u64)>,
    stands: &HashMap<u64, Raw>,
    region: Region,
    cut: usize,
    ws: usize,
) -> (HashMap<u64, TensorId>, Arc<[Vec<TensorId>]>) {
    let sizes: HashMap<u64, u64> = calls
        .iter()
        .filter_map(|c| match c.effect {
            Effect::Alloc { id, size } => Some((id, size)),
            _ => None,
        })
        .collect();
    let mut names = HashMap::new();
    let mut touched = Vec::with_capacity(region.period);
    for c in &calls[ws..ws + region.period] {
        let mut ids = c.touches.clone();
        match c.effect {
            Effect::Free { id } | Effect::Alloc { id, .. } => ids.push(id),
            Effect::Use => {}
        }
        for id in ids {
            names.entry(id).or_insert_with(|| {
                let raw = stands
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| raw_name(made, id, region, cut, ws));
                name(calls, raw, id, sizes.get(&id).copied().unwrap_or(0), ws)
            });
        }
        touched.push(named(c).iter().map(|id| names[id]).collect());
    }
    (names, touched.into())
}

/// A tensor's [`TensorId`] in the iteration starting at `ws`, from its place `raw`; `k` counts
/// the allocations of the iteration before its call offset (the same in every verified
/// iteration).
fn name(calls: &[Call], raw: Raw, id: u64, size: u64, ws: usize) -> TensorId {
    match raw {
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
