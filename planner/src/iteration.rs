//! Iterations found in the shim's call stream, and tensor identity across them.
//!
//! SINGA (seed 000 §V) records its malloc/free/read/write list and takes two consecutive
//! repeating subsequences as one training iteration; its public code verifies the repetition
//! before trusting it (anchors.md). We do the same on Marmoset's calls:
//!
//! 1. Each call becomes a token: a hash of what it is (kind, API, sizes, shapes, kernel, the sizes
//!    of the allocations it touches, the roles), never of an address or an allocation id, which
//!    change between iterations (`cudaMallocAsync`, caching allocators).
//! 2. [`detect`] finds the period whose repetition covers the longest stretch of the stream
//!    (the stretch must hold at least two full repetitions), the smallest such period on a tie.
//! 3. [`steady`] verifies what the tokens cannot see: that the touched allocations correspond.
//!    A tensor is named as the iteration sees it ([`TensorId`]): the k-th allocation of its
//!    iteration, `back` iterations ago, with its size; or, for what was allocated before the
//!    repetition began (weights, Caffe's blobs), the allocation itself. Consecutive iterations
//!    must name every touch alike; a mismatch is a divergence, not a guess.
//!
//! The in-shim executor runs the same functions on the calls it has seen so far (SINGA checks
//! every few hundred allocations); the planner's conversion ([`crate::shimtrace`]) runs them on a
//! whole trace and plans one steady iteration (not the first).

use crate::trace::{Access, Event, Record};
use std::collections::{HashMap, HashSet};

/// What a call does to the allocation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Alloc {
        id: u64,
        size: u64,
    },
    Free {
        id: u64,
    },
    /// Computes, copies, sets, synchronises or plans.
    Use,
}

/// One call of the stream, as iteration detection sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The record's sequence number.
    pub seq: u64,
    /// What the call is, without addresses or ids ([`token`]).
    pub token: u64,
    pub effect: Effect,
    /// The allocations it touches, in the record's order.
    pub touches: Vec<u64>,
    /// Whether `touches` are inferred (a kernel's parameter words that point into an
    /// allocation), not named by the API: a word may be stale, so they identify nothing.
    pub inferred: bool,
}

/// FNV-1a over 64-bit words: stable across runs and builds (a plan may outlive a process).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn word(&mut self, w: u64) {
        for b in w.to_le_bytes() {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn str(&mut self, s: &str) {
        self.word(s.len() as u64);
        for b in s.bytes() {
            self.word(b as u64);
        }
    }
}

fn access_code(a: Access) -> u64 {
    match a {
        Access::R => 1,
        Access::W => 2,
        Access::Rw => 3,
    }
}

/// The token of a call record: its kind, API, result and everything that describes the work
/// (sizes, directions, kernel handle and geometry, cuDNN algorithm, workspace and tensor shapes
/// and roles; for each touch the API names, the touched allocation's size, the range and the
/// access), with no pointer and no allocation id. A kernel's touches are left out: they are
/// inferred from its parameter words, and a word may hold whatever an earlier call left there
/// (PyTorch's reduction kernels take a struct whose unused pointer fields do), so the same
/// call may seem to touch another allocation from one iteration to the next. `sizes` maps
/// allocation ids to sizes. `None` for records that are not calls (header, timing, evict,
/// restore).
pub fn token(event: &Event, sizes: &HashMap<u64, u64>) -> Option<u64> {
    let mut h = Fnv::new();
    h.str(event.kind());
    h.str(event.api()?);
    h.word(event.result() as i64 as u64);
    match event {
        Event::Alloc { size, .. } => h.word(*size),
        Event::Free { alloc, size, .. } => h.word(
            size.or_else(|| alloc.and_then(|a| sizes.get(&a).copied()))
                .unwrap_or(0),
        ),
        Event::Copy { size, dir, .. } => {
            h.word(*size);
            h.word(*dir as u64);
        }
        Event::Memset { size, .. } => h.word(*size),
        Event::Launch {
            func, grid, block, ..
        } => {
            h.word(*func);
            for d in grid.iter().chain(block) {
                h.word(*d as u64);
            }
        }
        Event::Cudnn {
            algo,
            workspace,
            tensors,
            ..
        } => {
            h.word(algo.map_or(u64::MAX, |a| a as i64 as u64));
            h.word(workspace.unwrap_or(u64::MAX));
            for t in tensors {
                h.str(&t.role);
                h.word(access_code(t.access));
                for d in t.dims.iter().chain(&t.strides) {
                    h.word(*d as u64);
                }
            }
        }
        _ => {}
    }
    let named = !matches!(event, Event::Launch { .. });
    for t in event.touches().iter().filter(|_| named) {
        h.word(sizes.get(&t.alloc).copied().unwrap_or(u64::MAX));
        h.word(t.offset);
        h.word(t.bytes);
        h.word(access_code(t.access));
    }
    Some(h.0)
}

/// The calls of a trace (sorted by `seq`, as [`crate::trace::read`] returns them), tokenised.
pub fn calls(records: &[Record]) -> Vec<Call> {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    for r in records {
        if let Event::Alloc {
            alloc,
            size,
            result: 0,
            ..
        } = r.event
        {
            sizes.insert(alloc, size);
        }
        let Some(token) = token(&r.event, &sizes) else {
            continue;
        };
        let effect = match r.event {
            Event::Alloc {
                alloc,
                size,
                result: 0,
                ..
            } => Effect::Alloc { id: alloc, size },
            Event::Free {
                alloc: Some(id),
                result: 0,
                ..
            } => Effect::Free { id },
            _ => Effect::Use,
        };
        out.push(Call {
            seq: r.seq,
            token,
            effect,
            touches: r.event.touches().iter().map(|t| t.alloc).collect(),
            inferred: matches!(r.event, Event::Launch { .. }),
        });
    }
    out
}

/// A stretch of the stream that repeats with `period`: `tokens[j] == tokens[j + period]` for
/// every j in `start .. end - period`, and `end - start >= 2 * period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub start: usize,
    pub period: usize,
    pub end: usize,
}

/// Candidate periods: distances between an occurrence of a rare token and its next few
/// occurrences. A token that occurs m times per iteration recurs after exactly one period at its
/// m-th next occurrence, and every iteration holds some token that occurs at most a few times
/// (its loss, its optimizer step); scanning every period would cost O(n²).
fn candidates(tokens: &[u64]) -> Vec<usize> {
    const RAREST: usize = 256;
    const NEXT: usize = 4;
    let mut at: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, &t) in tokens.iter().enumerate() {
        at.entry(t).or_default().push(i);
    }
    let mut by_count: Vec<(usize, u64)> = at
        .iter()
        .filter(|(_, v)| v.len() >= 2)
        .map(|(&t, v)| (v.len(), t))
        .collect();
    by_count.sort_unstable();
    let half = tokens.len() / 2;
    let mut out = Vec::new();
    for &(_, t) in by_count.iter().take(RAREST) {
        let v = &at[&t];
        for i in 0..v.len() {
            for m in 1..=NEXT {
                if let Some(&j) = v.get(i + m)
                    && j - v[i] <= half
                {
                    out.push(j - v[i]);
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The longest stretch that repeats with `p`, if it holds two full repetitions.
fn region_of(tokens: &[u64], p: usize) -> Option<Region> {
    let (mut best, mut run_start) = ((0, 0), 0);
    for j in 0..tokens.len().saturating_sub(p) {
        if tokens[j] != tokens[j + p] {
            run_start = j + 1;
        } else if j + 1 - run_start > best.1 {
            best = (run_start, j + 1 - run_start);
        }
    }
    (best.1 >= p).then_some(Region {
        start: best.0,
        period: p,
        end: best.0 + best.1 + p,
    })
}

/// Two consecutive repetitions or more (SINGA): the period covering the longest stretch, the
/// smaller period on a tie (a multiple of the iteration covers no more than the iteration).
pub fn detect(tokens: &[u64]) -> Option<Region> {
    candidates(tokens)
        .into_iter()
        .filter_map(|p| region_of(tokens, p))
        .min_by_key(|r| (std::cmp::Reverse(r.end - r.start), r.period, r.start))
}

impl Region {
    /// The cuts (first calls of an iteration) that leave two full iterations in the region.
    pub fn cuts(&self) -> std::ops::Range<usize> {
        let last = (self.end - 2 * self.period).min(self.start + self.period - 1);
        self.start..last + 1
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Touch;

    /// A call touching `t`, with token `tok`.
    fn use_(tok: u64, t: &[u64]) -> Call {
        Call {
            seq: 0,
            token: tok,
            effect: Effect::Use,
            touches: t.to_vec(),
            inferred: false,
        }
    }
    fn alloc(id: u64, size: u64) -> Call {
        Call {
            seq: 0,
            token: 1000 + size,
            effect: Effect::Alloc { id, size },
            touches: vec![],
            inferred: false,
        }
    }
    fn free(id: u64, size: u64) -> Call {
        Call {
            seq: 0,
            token: 2000 + size,
            effect: Effect::Free { id },
            touches: vec![],
            inferred: false,
        }
    }

    /// Setup (weights 1, 2), then `iters` iterations of a PyTorch-like step: each tensor
    /// allocated (new ids: new addresses), used and freed; the activation `a` of an iteration
    /// lives into the next (freed there), like a tensor kept across the boundary.
    fn program(iters: usize) -> Vec<Call> {
        let mut v = vec![alloc(1, 64), alloc(2, 8), use_(7, &[1]), use_(8, &[2])];
        let mut next = 10;
        let mut prev_a = None;
        for _ in 0..iters {
            let (x, a, g) = (next, next + 1, next + 2);
            next += 3;
            v.push(alloc(x, 32));
            v.push(use_(1, &[x]));
            v.push(alloc(a, 16));
            v.push(use_(2, &[1, x, a]));
            if let Some(pa) = prev_a {
                v.push(use_(3, &[pa, a]));
                v.push(free(pa, 16));
            } else {
                // Nothing from before: the first iteration differs here.
                v.push(use_(30, &[a]));
                v.push(use_(31, &[a]));
            }
            v.push(alloc(g, 64));
            v.push(use_(4, &[a, x, g]));
            v.push(use_(5, &[1, g]));
            v.push(use_(6, &[2]));
            v.push(free(g, 64));
            v.push(free(x, 32));
            prev_a = Some(a);
        }
        v.push(free(1, 64));
        v
    }

    fn tokens(c: &[Call]) -> Vec<u64> {
        c.iter().map(|c| c.token).collect()
    }

    /// Setup is 4 calls, an iteration 12; iteration i starts at call 4 + 12 i.
    const P: usize = 12;
    const fn it(i: usize) -> usize {
        4 + P * i
    }

    #[test]
    fn finds_the_iteration_and_names_tensors_by_position() {
        let calls = program(4);
        let r = detect(&tokens(&calls)).expect("a repetition");
        // The first iteration differs at its calls 4 and 5, so the repetition starts after them
        // and ends with the last iteration (the teardown differs).
        assert_eq!(
            r,
            Region {
                start: it(0) + 6,
                period: P,
                end: it(4)
            }
        );
        let s = steady(&calls, r, it(1)).unwrap();
        assert_eq!(
            (s.index, s.iterations, s.start),
            (2, 3, it(3)),
            "the last one"
        );
        // Addresses (ids) changed every iteration, names did not: x, a, g of the 4th iteration.
        for (k, (id, size)) in [(19, 32), (20, 16), (21, 64)].into_iter().enumerate() {
            assert_eq!(s.names[&id], TensorId::Rel { back: 0, k, size });
        }
        assert_eq!(
            s.names[&17],
            TensorId::Rel {
                back: 1,
                k: 1,
                size: 16
            },
            "the previous iteration's activation"
        );
        assert_eq!(s.names[&1], TensorId::Persistent { alloc: 1, size: 64 });
        assert_eq!(s.names.len(), 6, "x, a, g, the old a, the two weights");
    }

    #[test]
    fn a_later_cut_names_what_crosses_it_from_the_iteration_before() {
        let calls = program(5);
        let r = detect(&tokens(&calls)).unwrap();
        assert!(r.cuts().contains(&(it(1) + 2)) && r.cuts().end <= r.start + P);
        let s = steady(&calls, r, it(1) + 2).unwrap();
        assert_eq!((s.iterations, s.index, s.start), (3, 2, it(3) + 2), "{s:?}");
        // The iteration now starts after x's allocation: x comes from the iteration before.
        let Effect::Alloc { id, .. } = calls[it(3)].effect else {
            panic!("{:?}", calls[it(3)])
        };
        assert_eq!(
            s.names[&id],
            TensorId::Rel {
                back: 1,
                k: 2,
                size: 32
            },
            "k counts allocations from the cut: a, g, then the next x"
        );
    }

    #[test]
    fn a_program_that_diverges_is_refused_not_guessed() {
        // Tokens repeat, but the fourth iteration reads the second weight where the others read
        // the first (same token in this test): the identity check must say so.
        let mut calls = program(4);
        let at = it(3) + 3;
        assert_eq!(calls[at].touches[0], 1);
        calls[at].touches[0] = 2;
        let r = detect(&tokens(&calls)).unwrap();
        let s = steady(&calls, r, it(1)).unwrap();
        assert_eq!(s.index, 1, "the last iteration is not trusted: {s:?}");
        // With only the diverging pair, nothing is trusted, and the error says where.
        let r2 = Region {
            start: it(2),
            period: P,
            end: it(4),
        };
        let e = steady(&calls, r2, it(2)).unwrap_err();
        assert_eq!((e.iteration, e.call), (1, 3), "{e}");
        assert!(e.to_string().contains("stands where"), "{e}");
        // A program whose calls change: the repetition ends where it changes.
        let mut calls3 = program(5);
        let tail = it(4) + 5;
        calls3[tail].token = 99;
        let r3 = detect(&tokens(&calls3)).unwrap();
        assert_eq!((r3.period, r3.end), (P, tail), "{r3:?}");
    }

    #[test]
    fn inner_repetitions_do_not_hide_the_iteration() {
        // An iteration made of many identical layers (a, b repeated) plus a head.
        let mut t = vec![50, 51];
        for _ in 0..3 {
            for _ in 0..10 {
                t.extend([1, 2]);
            }
            t.extend([3, 4, 5]);
        }
        let r = detect(&t).unwrap();
        assert_eq!((r.period, r.start, r.end), (23, 2, 2 + 69));
        assert_eq!(detect(&[1, 2, 3, 4]), None);
        assert_eq!(detect(&[]), None);
    }

    #[test]
    fn tokens_ignore_addresses_and_ids() {
        use crate::trace::{Access, Touch};
        let mk = |alloc: u64, ptr: u64| Event::Memset {
            api: "cudaMemsetAsync".into(),
            ptr,
            size: 64,
            stream: Some(7),
            touches: vec![Touch {
                alloc,
                offset: 0,
                bytes: 64,
                access: Access::W,
            }],
            result: 0,
        };
        let sizes: HashMap<u64, u64> = [(1, 64), (2, 64), (3, 128)].into();
        let t = |e: &Event| token(e, &sizes).unwrap();
        assert_eq!(t(&mk(1, 0x1000)), t(&mk(2, 0x9000)));
        assert_ne!(t(&mk(1, 0x1000)), t(&mk(3, 0x1000)), "a larger tensor");
        let timing = Event::Timing {
            of: 1,
            device_ms: 1.0,
        };
        assert_eq!(token(&timing, &sizes), None);
    }

    /// A kernel's touches are inferred from its parameter words: PyTorch's reduction kernels
    /// pass a struct whose unused pointer fields hold whatever was there, so the same kernel
    /// may seem to touch another allocation. Its token and the verification ignore them; an
    /// API-named touch still counts.
    #[test]
    fn a_kernels_stale_parameter_word_neither_changes_its_token_nor_fails_verification() {
        let sizes: HashMap<u64, u64> = [(1, 4096), (2, 51 << 20), (3, 8 << 20)].into();
        let touch = |alloc| Touch {
            alloc,
            offset: 0,
            bytes: 0,
            access: Access::Rw,
        };
        let launch = |touches: Vec<Touch>| Event::Launch {
            api: "cudaLaunchKernel".into(),
            func: 7,
            grid: [2, 1, 1],
            block: [128, 1, 1],
            stream: None,
            touches,
            result: 0,
        };
        let memset = |a| Event::Memset {
            api: "cudaMemsetAsync".into(),
            ptr: 0,
            size: 4096,
            stream: None,
            touches: vec![touch(a)],
            result: 0,
        };
        let stale = token(&launch(vec![touch(1), touch(2)]), &sizes);
        assert_eq!(stale, token(&launch(vec![touch(1), touch(3)]), &sizes));
        assert_eq!(stale, token(&launch(vec![touch(1)]), &sizes));
        assert_ne!(
            token(&memset(2), &sizes),
            token(&memset(3), &sizes),
            "a named touch of another size is another call"
        );
        // Verification: the same program, once with a kernel whose second touch changes from
        // one iteration to the next (a stale word), once with a named touch doing the same.
        let run = |inferred: bool| {
            let mut v = vec![alloc(1, 64), alloc(2, 8)];
            for i in 0..4u64 {
                let x = 10 + i;
                v.push(alloc(x, 32));
                let mut k = use_(1, &[x, if i % 2 == 0 { 1 } else { 2 }]);
                k.inferred = inferred;
                v.push(k);
                v.push(free(x, 32));
            }
            v
        };
        let calls = run(true);
        let r = detect(&tokens(&calls)).expect("a repetition");
        assert!(steady(&calls, r, r.start).is_ok(), "stale words are hints");
        let calls = run(false);
        let r = detect(&tokens(&calls)).expect("a repetition");
        assert!(
            steady(&calls, r, r.start).is_err(),
            "a named touch that changes is a divergence"
        );
    }

    /// An optimizer's momentum: made once, at the first step, where later steps allocate a
    /// gradient of its size (the same call a period later), and read by every step after; never
    /// freed. It is the program's, not the iteration's: named by itself. Named by its place,
    /// "the k-th allocation four iterations back" is a gradient long freed (with the touch
    /// named by the API, no pair of iterations verified at all).
    #[test]
    fn a_buffer_made_once_in_the_repetition_is_named_by_itself() {
        for inferred in [false, true] {
            let mut calls = vec![alloc(1, 64), use_(7, &[1])];
            let start = calls.len();
            let m = 5;
            let mut next = 10;
            for i in 0..5 {
                let (x, g) = (next, next + 1);
                next += 2;
                calls.push(alloc(x, 32));
                calls.push(use_(1, &[x]));
                // The first step makes the momentum where the others make the gradient.
                let made = if i == 0 { m } else { g };
                calls.push(alloc(made, 64));
                calls.push(use_(5, &[made, x]));
                let mut step = use_(9, &[m, 1]);
                step.inferred = inferred;
                calls.push(step);
                calls.push(if i == 0 { use_(6, &[]) } else { free(g, 64) });
                calls.push(free(x, 32));
            }
            let r = Region {
                start,
                period: 7,
                end: calls.len(),
            };
            let s = steady(&calls, r, start).expect("the last two steps repeat");
            assert_eq!(
                s.names[&m],
                TensorId::Persistent { alloc: m, size: 64 },
                "inferred {inferred}"
            );
        }
    }
}
