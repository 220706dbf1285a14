//! Coordinate descent over the best plan so far: one tensor's decision at a time is moved to
//! another mechanism (or the same one, timed differently) given all the others, and the move is
//! kept if the replay fits the budget and gets faster (first improvement). Ito et al. choose
//! keep / swap / recompute per tensor given the rest; this is that choice, judged by the
//! timeline instead of a cost model.
//!
//! The moves, each from what the plan's replay shows:
//! - a recomputation becomes a swap whose copy out starts at the tensor's own last access before
//!   the drop, not at the drop: a drop frees memory at once, a swap only when its copy ends, so a
//!   swap out at the drop (where the memory is needed) stalls for the whole copy, while one from
//!   the last access overlaps the compute in between (the in-trigger leaves the copy in its time);
//! - a swap whose copy out starts later than the tensor's last access starts at that access;
//! - a swap its back-access waited for starts back earlier by the wait, or becomes a
//!   recomputation where that is cheaper than the wait;
//! - a swap whose copy out held memory an operation waited for becomes a recomputation where
//!   that is cheaper than the wait it caused: a drop frees its memory at once and leaves the
//!   engine's queue shorter by its copy.
//!
//! Cost: [`REPLAYS_PER_DIGIT`] replays per binary digit of the trace's length in all, the
//! likeliest moves first (by the seconds each may save: the recomputation's time, the wait); a
//! move is tried once; passes repeat while one improves, at most [`PASSES`]; the deadline is
//! asked before every replay.

use super::Deadline;
use super::analysis::Analysis;
use crate::model::Trace;
use crate::timeline::{Decision, Link, Outcome, Plan, Stall, simulate_within};

/// Passes over the plan's decisions at most (each later one tries what an accepted move may
/// have made worth it).
const PASSES: usize = 8;

/// Replays per binary digit of the trace's length, in all: the search costs O(log n) replays.
/// Fewer leave a descent short of its local optimum on transformers, whose plans hold hundreds
/// of decisions: a second descent from the first one's end went on improving.
const REPLAYS_PER_DIGIT: usize = 32;

/// The replays a local search may spend on `t`, `per_digit` per binary digit of its length:
/// O(log n).
pub(super) fn replays_for(t: &Trace, per_digit: usize) -> usize {
    let digits = (usize::BITS - t.ops.len().leading_zeros()) as usize;
    per_digit * digits.max(1)
}

/// The descent from `start` (a feasible plan and its replay); `start` itself when no move helps
/// or it does not fit.
pub(super) fn descend(
    t: &Trace,
    a: &Analysis,
    budget: u64,
    link: Link,
    more: Deadline,
    start: (Plan, Outcome),
) -> (Plan, Outcome) {
    let (mut plan, mut out) = start;
    if !out.feasible {
        return (plan, out);
    }
    let mut left = replays_for(t, REPLAYS_PER_DIGIT);
    // Moves tried and not kept: not tried again.
    let mut rejected: Vec<(usize, Decision)> = Vec::new();
    for _ in 0..PASSES {
        let before = out.makespan;
        for (_, k, d) in moves(t, a, link, &plan, &out) {
            let s = plan[k].0;
            if rejected.contains(&(s, d)) {
                continue;
            }
            if left == 0 || !more() {
                return (plan, out);
            }
            left -= 1;
            let mut cand = plan.clone();
            cand[k].1 = d;
            if let Some(o) = simulate_within(t, budget, link, &cand, out.makespan, false) {
                plan = cand;
                out = o;
            } else {
                rejected.push((s, d));
            }
        }
        if out.makespan >= before {
            break;
        }
    }
    (plan, out)
}

/// The moves worth a replay: (the seconds it may save, the decision's index, its new form),
/// likeliest gain first.
fn moves(
    t: &Trace,
    a: &Analysis,
    link: Link,
    plan: &Plan,
    out: &Outcome,
) -> Vec<(f64, usize, Decision)> {
    // What each storage's swap-ins made operations wait.
    let mut waited = vec![0.0; t.storages.len()];
    for st in &out.stalls {
        if let Stall::SwapIn { storage, secs, .. } = *st {
            waited[storage] += secs;
        }
    }
    let held = held_up(t, link, plan, out);
    let mut v = Vec::new();
    for (k, &(s, d)) in plan.iter().enumerate() {
        let acc = &a.accesses[s];
        let copy = t.copy_bytes(s) as f64;
        // The last access at or before `after`: where a copy out may start.
        let last = |after: usize| {
            let i = acc.partition_point(|&x| x <= after);
            i.checked_sub(1).map_or(after, |i| acc[i].min(after))
        };
        let rerun = t.storages[s].producer.map(|p| t.ops[p].time_s);
        match d {
            Decision::Recompute { after, back } if acc.binary_search(&back).is_ok() => {
                let Some(rerun) = rerun else { continue };
                let after = last(after);
                let trigger = a.trigger(after, back, copy / link.h2d);
                let swap = Decision::Swap {
                    after,
                    trigger,
                    back,
                };
                v.push((rerun, k, swap));
            }
            Decision::Swap {
                after,
                trigger,
                back,
            } => {
                let early = last(after);
                if early < after {
                    let trigger = a.trigger(early, back, copy / link.h2d).min(trigger);
                    let swap = Decision::Swap {
                        after: early,
                        trigger,
                        back,
                    };
                    v.push((copy / link.d2h, k, swap));
                }
                let wait = waited[s];
                // What dropping it instead may save: the wait for its copy back, and the
                // waits for memory its copy out caused.
                let caused = wait + held[k];
                if let Some(rerun) = rerun
                    && rerun < caused
                    && a.recomputable(t, s, back)
                {
                    v.push((caused - rerun, k, Decision::Recompute { after, back }));
                }
                if wait <= 0.0 {
                    continue;
                }
                let sooner = a.trigger(after, back, copy / link.h2d + wait).min(trigger);
                if sooner < trigger {
                    let swap = Decision::Swap {
                        after,
                        trigger: sooner,
                        back,
                    };
                    v.push((wait, k, swap));
                }
            }
            _ => {}
        }
    }
    v.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    v
}

/// Per decision of `plan`: the seconds operations waited for memory that its copy out held.
/// At each such wait, the copies out queued ahead of it are the swaps decided before the
/// operation, latest first, until their copy times cover the wait; each is charged the wait,
/// at most its own copy time.
fn held_up(t: &Trace, link: Link, plan: &Plan, out: &Outcome) -> Vec<f64> {
    let mut held = vec![0.0; plan.len()];
    let mut outs: Vec<(usize, usize)> = plan
        .iter()
        .enumerate()
        .filter_map(|(k, &(_, d))| match d {
            Decision::Swap { after, .. } => Some((after, k)),
            _ => None,
        })
        .collect();
    outs.sort_unstable();
    for st in &out.stalls {
        let Stall::Memory { op, secs } = *st else {
            continue;
        };
        let queued = outs.partition_point(|&(after, _)| after < op);
        let mut covered = 0.0;
        for &(_, k) in outs[..queued].iter().rev() {
            if covered >= secs {
                break;
            }
            let c = t.copy_bytes(plan[k].0) as f64 / link.d2h;
            held[k] += secs.min(c);
            covered += c;
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::super::tests::{LINK, Rng, random_trace_with};
    use super::super::{POLICIES, run};
    use super::*;
    use crate::model::Step;
    use crate::timeline::simulate;
    use crate::timeline::tests::unit_trace;

    /// Hand-computed (each operation 1 s, 200 B/s each way): a (100 B) is read by b, then
    /// must be away while d (100 B) and e run under 150 B, and is read again by f. Dropped after
    /// c and recomputed: 8 s. Swapped out after c, where the memory is needed: d waits the
    /// 0.5 s copy, 7.5 s. Swapped out after b, its last access: the copy runs during c, and the
    /// copy back (from g's start, after d is freed) during g: 7 s, the compute time.
    #[test]
    fn a_recomputation_becomes_a_swap_out_from_the_last_access() {
        let t = unit_trace(
            &[100, 10, 10, 100, 10, 10, 10],
            &[
                ("a", &[]),
                ("b", &[0]),
                ("c", &[1]),
                ("d", &[2]),
                ("e", &[3]),
                ("g", &[4]),
                ("f", &[0, 5]),
            ],
            vec![
                Step::Op(0),
                Step::Op(1),
                Step::Op(2),
                Step::Free(1),
                Step::Op(3),
                Step::Free(2),
                Step::Op(4),
                Step::Free(3),
                Step::Op(5),
                Step::Free(4),
                Step::Op(6),
                Step::Free(0),
                Step::Free(5),
                Step::Free(6),
            ],
        );
        let a = Analysis::new(&t);
        let replay = |d: Decision| simulate(&t, 150, LINK, &vec![(0, d)]);
        let dropped = replay(Decision::Recompute { after: 2, back: 6 });
        assert!(dropped.feasible);
        assert_eq!(dropped.makespan, 8.0);
        let late = Decision::Swap {
            after: 2,
            trigger: 5,
            back: 6,
        };
        assert_eq!((replay(late).feasible, replay(late).makespan), (true, 7.5));
        let (plan, out) = descend(
            &t,
            &a,
            150,
            LINK,
            &|| true,
            (
                vec![(0, Decision::Recompute { after: 2, back: 6 })],
                dropped,
            ),
        );
        assert_eq!(
            plan,
            vec![(
                0,
                Decision::Swap {
                    after: 1,
                    trigger: 5,
                    back: 6
                }
            )]
        );
        assert!(out.feasible);
        assert_eq!(out.makespan, 7.0);
    }

    /// Hand-computed (each operation 1 s but a's producer, 0.1 s; 200 B/s each way): a (100 B)
    /// is read by b, must be away while c (100 B) and e run under 150 B, and is read again by
    /// f; g runs between, with room for a's copy back. Swapped out after b, its last access:
    /// c waits the 0.5 s copy for memory, 5.6 s in all. Dropped after b and recomputed before
    /// f: 0.1 s of compute instead, 5.2 s.
    #[test]
    fn a_swap_whose_copy_out_held_memory_becomes_a_recomputation() {
        let mut t = unit_trace(
            &[100, 10, 100, 10, 10, 10],
            &[
                ("a", &[]),
                ("b", &[0]),
                ("c", &[]),
                ("e", &[2]),
                ("g", &[]),
                ("f", &[0, 3, 4]),
            ],
            vec![
                Step::Op(0),
                Step::Op(1),
                Step::Free(1),
                Step::Op(2),
                Step::Op(3),
                Step::Free(2),
                Step::Op(4),
                Step::Op(5),
                Step::Free(0),
                Step::Free(3),
                Step::Free(4),
                Step::Free(5),
            ],
        );
        t.ops[0].time_s = 0.1;
        let a = Analysis::new(&t);
        let swap = vec![(
            0,
            Decision::Swap {
                after: 1,
                trigger: 4,
                back: 5,
            },
        )];
        let swapped = simulate(&t, 150, LINK, &swap);
        assert!(swapped.feasible, "{swapped:?}");
        assert!(
            (swapped.makespan - 5.6).abs() < 1e-9,
            "{}",
            swapped.makespan
        );
        assert!(
            swapped
                .stalls
                .iter()
                .any(|s| matches!(*s, Stall::Memory { op: 2, secs } if (secs - 0.5).abs() < 1e-9)),
            "{:?}",
            swapped.stalls
        );
        let (plan, out) = descend(&t, &a, 150, LINK, &|| true, (swap, swapped));
        assert_eq!(plan, vec![(0, Decision::Recompute { after: 1, back: 5 })]);
        assert!(out.feasible);
        assert!((out.makespan - 5.2).abs() < 1e-9, "{}", out.makespan);
    }

    /// From every policy's plan on random traces: never worse than where it started, what it
    /// reports is its plan's replay, within the budget, within its replays (the deadline is
    /// asked before each), and better somewhere.
    #[test]
    fn the_descent_never_loses_and_replays_a_few_times() {
        let mut r = Rng(1616);
        let slow = Link {
            h2d: 40.0,
            d2h: 40.0,
        };
        let (mut tried, mut improved) = (0, 0);
        for case in 0..120 {
            let t = random_trace_with(&mut r, 6 + case % 12, case % 2 == 0);
            let a = Analysis::new(&t);
            let link = if case % 3 == 0 { slow } else { LINK };
            let budget = (t.peak() as f64 * (0.4 + 0.1 * (case % 5) as f64)) as u64;
            for p in POLICIES {
                let (plan, out) = run(p, &t, budget, link).unwrap();
                if !out.feasible {
                    continue;
                }
                tried += 1;
                let asked = std::cell::Cell::new(0usize);
                let more = || {
                    asked.set(asked.get() + 1);
                    true
                };
                let n = plan.len();
                let (p2, o2) = descend(&t, &a, budget, link, &more, (plan, out.clone()));
                let again = simulate(&t, budget, link, &p2);
                assert_eq!((again.feasible, again.makespan), (o2.feasible, o2.makespan));
                assert!(o2.feasible && o2.peak <= budget, "case {case} {p}");
                assert!(o2.makespan <= out.makespan, "case {case} {p}");
                // A replay per question; at most three moves per decision, each tried once,
                // and the budget of replays.
                let digits = (usize::BITS - t.ops.len().leading_zeros()) as usize;
                let most = (3 * n * PASSES).min(REPLAYS_PER_DIGIT * digits);
                assert!(
                    asked.get() <= most,
                    "case {case} {p}: {} replays, at most {most}",
                    asked.get()
                );
                if o2.makespan < out.makespan * (1.0 - 1e-9) {
                    improved += 1;
                }
            }
        }
        eprintln!("descent: {improved} of {tried} feasible plans improved");
        assert!(improved >= 10, "{improved} of {tried} improved");
    }

    /// Told to stop, it stops: at once, its start unchanged; after k questions, k replays.
    #[test]
    fn the_descent_stops_at_a_deadline() {
        let mut r = Rng(1717);
        let mut checked = 0;
        for case in 0..60 {
            let t = random_trace_with(&mut r, 8 + case % 8, case % 2 == 0);
            let a = Analysis::new(&t);
            let budget = (t.peak() as f64 * 0.6) as u64;
            for p in ["recompute", "dtr", "capuchin"] {
                let start = run(p, &t, budget, LINK).unwrap();
                if !start.1.feasible || moves(&t, &a, LINK, &start.0, &start.1).is_empty() {
                    continue;
                }
                for allowed in [0usize, 1, 2] {
                    let asked = std::cell::Cell::new(0usize);
                    let more = || {
                        asked.set(asked.get() + 1);
                        asked.get() <= allowed
                    };
                    let (plan, out) = descend(&t, &a, budget, LINK, &more, start.clone());
                    assert!(
                        asked.get() <= allowed + 1,
                        "asked {} after {allowed}",
                        asked.get()
                    );
                    if allowed == 0 {
                        assert_eq!(plan, start.0);
                    }
                    let again = simulate(&t, budget, LINK, &plan);
                    assert_eq!(again.makespan, out.makespan);
                    assert!(out.makespan <= start.1.makespan);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 30, "{checked}");
    }
}
