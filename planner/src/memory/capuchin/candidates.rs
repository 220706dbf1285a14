//! What the selection weighs at one excess: every tensor alive across the operation that could
//! leave around it, as a swap (its FreeTime against the copy engines' queue) or a recomputation
//! (its producer, the dropped sources that come back with it, the sources it keeps), whichever
//! costs less, ranked: swaps that hide first, then by memory saving per second.

use super::{Rank, Selection};
use crate::memory::Mechanism;
use crate::memory::analysis::{Analysis, Extension, Members};
use crate::memory::engines::Engines;
use crate::model::Trace;
use crate::timeline::hash::Map;
use crate::timeline::{Decision, Link};

/// A candidate move: (tier, rank key, storage, decision, sources to keep alive for it); see
/// [`candidates`].
pub(super) type Candidate = (u8, f64, usize, Decision, Extension);

/// What the candidates at every operation tried in one selection round share (the plan does
/// not change within a round): the plan's facts, and the extensions already worked out, by
/// (storage, back-access) (trying the next excess, most storages have the same back-access,
/// and an extension can take thousands of steps to work out).
pub(super) struct Round<'p> {
    planned: &'p [Vec<(usize, usize)>],
    recomputed: &'p [bool],
    /// Dropped for good after an operation (dead until freed), and needed as a source by a
    /// planned recomputation before an operation: the drop must come after the last such need.
    dead_after: Vec<usize>,
    source_until: Vec<usize>,
    extensions: Map<(usize, usize), Option<Extension>>,
    members: Members,
}

impl<'p> Round<'p> {
    pub(super) fn new(
        t: &Trace,
        planned: &'p [Vec<(usize, usize)>],
        recomputed: &'p [bool],
    ) -> Round<'p> {
        let dead_after: Vec<usize> = planned
            .iter()
            .map(|v| {
                v.iter()
                    .filter(|&&(_, y)| y == usize::MAX)
                    .map(|&(x, _)| x)
                    .min()
                    .unwrap_or(usize::MAX)
            })
            .collect();
        let mut source_until = vec![0; t.storages.len()];
        for (x, &r) in recomputed.iter().enumerate() {
            if r && let Some(pr) = t.storages[x].producer {
                let until = planned[x]
                    .iter()
                    .map(|&(_, y)| y)
                    .filter(|&y| y != usize::MAX)
                    .max()
                    .unwrap_or(0);
                for &i in &t.ops[pr].inputs {
                    source_until[i] = source_until[i].max(until);
                }
            }
        }
        Round {
            planned,
            recomputed,
            dead_after,
            source_until,
            extensions: Map::default(),
            members: Members::new(t.storages.len()),
        }
    }

    /// The sources a recomputation of `s` before `back` keeps (see [`Analysis::to_extend`]),
    /// where that keeps fewer bytes than `s` itself.
    fn extension(&mut self, t: &Trace, a: &Analysis, s: usize, back: usize) -> Option<Extension> {
        let Round {
            planned,
            dead_after,
            extensions,
            members,
            ..
        } = self;
        extensions
            .entry((s, back))
            .or_insert_with(|| {
                a.to_extend(t, s, back, planned, dead_after, members, t.storages[s].size)
            })
            .clone()
    }
}

/// Tensors (of at least `sel.min_size`) that could leave around operation `p`, each with its
/// mechanism and rank: (tier, key, storage, decision); tier 0 are swaps with no overhead (key:
/// -FreeTime), tier 1 the rest (key: -memory saving per second).
pub(super) fn candidates(
    t: &Trace,
    a: &Analysis,
    link: Link,
    sel: Selection,
    p: usize,
    round: &mut Round,
    engines: &Engines,
) -> Vec<Candidate> {
    let mut cands: Vec<Candidate> = Vec::new();
    let (planned, recomputed) = (round.planned, round.recomputed);
    for (s, st) in t.storages.iter().enumerate() {
        let acc = &a.accesses[s];
        if a.freed_before[s] <= p || (!st.constant && a.born[s] >= p) || st.size < sel.min_size {
            continue;
        }
        let next = acc.partition_point(|&x| x <= p);
        let Some(&back) = acc.get(next) else {
            // Dead until the program frees it: its memory can go at no cost (nothing reads it
            // again), unless something made from it may still be recomputed: then it would
            // have to be recomputed first, at its producer's cost (ranked by MSPS).
            let may_source = a.horizon[s] > p;
            // Weights stay: the optimizer and the next iteration read them. The shim drops
            // dead contents only at the program's free (see `carried_out::carried_out`).
            if !t.replay_in_place
                && next > 0
                && !st.constant
                && acc[next - 1] < p
                && st.size > 0
                && round.dead_after[s] == usize::MAX
                && acc[next - 1] >= round.source_until[s]
            {
                let (tier, key) = match (may_source, st.producer) {
                    (false, _) => (0, f64::MIN),
                    (true, Some(pr)) => (1, -(st.size as f64 / t.ops[pr].time_s.max(1e-9))),
                    (true, None) => continue,
                };
                cands.push((
                    tier,
                    key,
                    s,
                    Decision::Recompute {
                        after: acc[next - 1],
                        back: usize::MAX,
                    },
                    Extension::default(),
                ));
            }
            continue;
        };
        let after = if next == 0 {
            if !st.constant || !sel.once_per_iteration && acc.len() < 2 {
                continue;
            }
            // A weight not yet used: it can leave before the first operation.
            0
        } else {
            acc[next - 1]
        };
        if acc.get(next.wrapping_sub(1)) == Some(&p) || after >= p || back <= p {
            continue;
        }
        if planned[s].iter().any(|&(x, y)| x < back && after < y) {
            continue;
        }
        let size = st.size as f64;
        if size == 0.0 {
            continue;
        }
        let copy = t.copy_bytes(s);
        let gap = a.start[back] - a.end[after];
        // (A selection that only recomputes never weighs a swap.)
        let free_time = if sel.mech == Mechanism::Recompute {
            gap - copy as f64 / link.d2h - copy as f64 / link.h2d
        } else {
            engines.free_time(a, copy, (after, p, back))
        };
        let swap_cost = (-free_time).max(0.0);
        // Sources the program frees before `back` are kept alive for the recomputation (DTR
        // does the same) when that still saves memory.
        // A swap with no overhead wins over any recomputation without costing one.
        let ext = if sel.mech == Mechanism::Swap || sel.mech == Mechanism::Both && swap_cost == 0.0
        {
            None
        } else {
            round.extension(t, a, s, back)
        };
        let rec = ext.is_some();
        let kept = ext
            .iter()
            .flat_map(|e| &e.kept)
            .map(|&i| t.storages[i].size)
            .sum::<u64>() as f64;
        let rec_cost = if rec {
            let p_op = st.producer.unwrap();
            t.ops[p_op].time_s
                + t.ops[p_op]
                    .inputs
                    .iter()
                    .filter(|&&i| recomputed[i])
                    .map(|&i| t.ops[t.storages[i].producer.unwrap_or(p_op)].time_s)
                    .sum::<f64>()
                + ext
                    .iter()
                    .flat_map(|e| &e.dropped)
                    .filter_map(|&(i, _)| t.storages[i].producer)
                    .map(|pi| t.ops[pi].time_s)
                    .sum::<f64>()
        } else {
            f64::INFINITY
        };
        let use_swap = match sel.mech {
            Mechanism::Swap => true,
            Mechanism::Recompute => false,
            Mechanism::Both => swap_cost <= rec_cost,
        };
        if !use_swap && !rec {
            continue;
        }
        let (cost, saved, d, ext) = if use_swap {
            (
                swap_cost,
                size,
                Decision::Swap {
                    after,
                    trigger: {
                        let by_time = a.trigger(after, back, copy as f64 / link.h2d);
                        if sel.relieve {
                            by_time.max((p + 1).min(back))
                        } else {
                            by_time
                        }
                    },
                    back,
                },
                Extension::default(),
            )
        } else {
            (
                rec_cost,
                size - kept,
                Decision::Recompute { after, back },
                ext.unwrap_or_default(),
            )
        };
        if cost == 0.0 {
            cands.push((0, -free_time, s, d, ext));
        } else {
            let weight = match sel.rank {
                Rank::Msps => 1.0,
                Rank::Area => gap.max(1e-9),
            };
            cands.push((1, -(saved * weight / cost), s, d, ext));
        }
    }
    cands
}
