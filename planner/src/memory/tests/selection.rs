//! Capuchin's selection: copies estimated at whole pages, tensors accessed more than once, swaps
//! that relieve an operation, the copy engines left to what only swapping moves, and `auto`
//! descending from Capuchin's plan too.

use super::*;

/// On traces whose swaps copy fewer bytes than they free (a tensor held in whole pages),
/// `capuchin`, `swap` and `auto` are never slower than their selection made as if the copies
/// moved the pages, replayed with the exact copies: they run that selection too (`auto` under
/// either ranking).
#[test]
fn the_selections_also_run_as_if_copies_moved_whole_pages() {
    use crate::memory::capuchin::{Rank, Selection, iterative_from};
    let mut r = Rng(41);
    let mut behind = Vec::new();
    let both = |rank| Selection {
        rank,
        ..Selection::of(Mechanism::Both)
    };
    let checks = [
        ("capuchin", vec![both(Rank::Msps)]),
        ("swap", vec![Selection::of(Mechanism::Swap)]),
        ("auto", vec![both(Rank::Msps), both(Rank::Area)]),
    ];
    for case in 0..150 {
        let mut t = random_trace(&mut r, 16 + case % 24);
        t.copied = (t.storages.iter())
            .map(|s| s.size / (1 + case as u64 % 4))
            .collect();
        let budget = (t.peak() as f64 * (0.45 + 0.1 * (case % 4) as f64)) as u64;
        let a = Analysis::new(&t);
        let mut paged = t.clone();
        paged.copied.clear();
        for (policy, sels) in &checks {
            let (_, got) = run(policy, &t, budget, LINK).unwrap();
            for &sel in sels {
                let (plan, _) = iterative_from(&paged, &a, budget, LINK, sel, Vec::new(), &|| true);
                let exact = simulate(&t, budget, LINK, &plan);
                if exact.feasible && (!got.feasible || got.makespan > exact.makespan * (1.0 + 1e-9))
                {
                    behind.push(format!(
                        "case {case} {policy} {:?}: {} against {}",
                        sel.rank, got.makespan, exact.makespan
                    ));
                }
            }
        }
    }
    assert!(behind.is_empty(), "{behind:#?}");
}

/// Capuchin's policy takes tensors accessed more than once in the iteration (§4.5): its
/// selection never moves a constant accessed once (an optimizer's momentum, whose gap spans the
/// iteration), which the other selections may take.
#[test]
fn capuchins_selection_takes_tensors_accessed_more_than_once() {
    use crate::memory::capuchin::{Selection, both_selection, iterative_from};
    let mut r = Rng(7);
    let mut others_took = 0;
    for case in 0..120 {
        let mut t = random_trace(&mut r, 12 + case % 16);
        // A momentum: made before the iteration, read and updated by the last operation alone.
        t.storages.push(Storage {
            size: 30 + r.below(40),
            constant: true,
            producer: None,
        });
        let m = t.storages.len() - 1;
        let last = t.ops.len() - 1;
        t.ops[last].inputs.push(m);
        let budget = (t.peak() as f64 * (0.5 + 0.1 * (case % 4) as f64)) as u64;
        let a = Analysis::new(&t);
        assert_eq!(a.accesses[m].len(), 1);
        let moves = |plan: &Plan| plan.iter().any(|&(s, _)| s == m);
        let (plan, _) = both_selection(&t, &a, budget, LINK, &|| true);
        assert!(!moves(&plan), "case {case}: {plan:?}");
        let sel = Selection::of(Mechanism::Both);
        let (plan, _) = iterative_from(&t, &a, budget, LINK, sel, Vec::new(), &|| true);
        others_took += usize::from(moves(&plan));
    }
    assert!(others_took > 0, "no case where a momentum was worth taking");
}

/// A weight read by operations 0 and 2 must be away while operation 1 makes a tensor as large
/// (budget 150 B: both are 100 B); its copy back takes 1 s, as long as an operation, so the
/// in-trigger by time is operation 1 itself: brought back there, it never leaves, and no
/// number of swaps fits. Relieving, the selection brings it back after operation 1 (a stall,
/// and a plan that fits).
#[test]
fn a_swap_taken_to_relieve_an_operation_comes_back_after_it() {
    use crate::memory::capuchin::{Selection, iterative_from};
    let mut t = Trace::default();
    t.storages.push(Storage {
        size: 100,
        constant: true,
        producer: None,
    });
    t.storages.push(Storage {
        size: 100,
        constant: false,
        producer: Some(1),
    });
    t.ops.push(Op::new("read w", 1.0, vec![0], vec![]));
    t.ops.push(Op::new("make x", 1.0, vec![], vec![1]));
    t.ops.push(Op::new("read w again", 1.0, vec![0], vec![]));
    t.steps = vec![Step::Op(0), Step::Op(1), Step::Free(1), Step::Op(2)];
    t.validate().unwrap();
    let link = Link {
        h2d: 100.0,
        d2h: 100.0,
    };
    let a = Analysis::new(&t);
    let by_time = Selection::of(Mechanism::Swap);
    let (plan, out) = iterative_from(&t, &a, 150, link, by_time, Vec::new(), &|| true);
    assert!(!out.feasible, "{plan:?} {out:?}");
    let relieving = Selection {
        relieve: true,
        ..by_time
    };
    let (plan, out) = iterative_from(&t, &a, 150, link, relieving, Vec::new(), &|| true);
    assert!(out.feasible, "{plan:?} {out:?}");
    assert!(
        plan.iter()
            .any(|(s, d)| *s == 0 && matches!(d, Decision::Swap { trigger, .. } if *trigger == 2)),
        "{plan:?}"
    );
    // Out after operation 0 (1 s), in from operation 2 (1 s): 3 s of compute and 2 s waiting.
    assert!((out.makespan - 5.0).abs() < 1e-9, "{out:?}");
}

/// A weight W (read by operations 0 and 6) and an activation X (made in 0.1 s by operation 1,
/// read by operation 8) must both be away while operation 4 makes a tensor twice their size
/// (budget 200 B). At 50 B/s each copy takes 2 s, and the copy engine can carry one of them
/// out before operation 4, not both. Capuchin's order takes X first (its swap hides; W's comes
/// back too late), and W's swap, the only way to move W, then waits for the engine: 1.9 s
/// waiting at operation 4 and 1 s for W's copy back, 11 s. Recomputing X leaves the engine to
/// W: 8.1 s of operations, 0.1 s recomputing, W's copy back (2 s from after operation 4) 1 s
/// late, 9.2 s; the policy finds that plan too.
#[test]
fn capuchins_policy_leaves_the_engines_to_what_only_swapping_moves() {
    use crate::memory::capuchin::{both_selection, capuchin};
    let mut t = Trace::default();
    let storage = |size, producer: Option<usize>| Storage {
        size,
        constant: producer.is_none(),
        producer,
    };
    t.storages = vec![
        storage(100, None),
        storage(100, Some(1)),
        storage(200, Some(4)),
    ];
    let (w, x, y) = (0, 1, 2);
    let spacer = |i: usize| Op::new(&format!("spacer {i}"), 1.0, vec![], vec![]);
    t.ops = vec![
        Op::new("read w", 1.0, vec![w], vec![]),
        Op::new("make x", 0.1, vec![], vec![x]),
        spacer(2),
        spacer(3),
        Op::new("make y", 1.0, vec![], vec![y]),
        spacer(5),
        Op::new("read w again", 1.0, vec![w], vec![]),
        spacer(7),
        Op::new("read x", 1.0, vec![x], vec![]),
    ];
    t.steps = (0..9).map(Step::Op).collect();
    t.steps.insert(6, Step::Free(y));
    t.validate().unwrap();
    let link = Link {
        h2d: 50.0,
        d2h: 50.0,
    };
    let a = Analysis::new(&t);
    let (sel, by_order) = both_selection(&t, &a, 200, link, &|| true);
    let swapped = |plan: &Plan, s| {
        plan.iter()
            .any(|&(i, d)| i == s && matches!(d, Decision::Swap { .. }))
    };
    assert!(swapped(&sel, x) && swapped(&sel, w), "{sel:?}");
    assert!(
        !by_order.feasible || by_order.makespan > 10.0,
        "{by_order:?}"
    );
    let (plan, out) = capuchin(&t, &a, 200, link, &|| true);
    assert!(out.feasible, "{plan:?} {out:?}");
    assert!(
        plan.iter()
            .any(|&(s, d)| s == x && matches!(d, Decision::Recompute { .. })),
        "{plan:?}"
    );
    assert!(swapped(&plan, w), "{plan:?}");
    assert!((out.makespan - 9.2).abs() < 1e-9, "{out:?}");
}

/// `auto` alone (as the shim runs it) against `capuchin` alone, on the random traces where
/// `auto` was slower (cases 41, 136 and 258 of 300 at half the peak; 29.95 against 28.52,
/// 34.30 against 30.11, 36.55 against 35.46): a descent ends at a local optimum, and
/// Capuchin's, from its own plan, had ended below `auto`'s, from `auto`'s best. `auto` now also
/// descends from Capuchin's plan. (Not by construction everywhere: `auto` cuts its passive runs
/// short once they cannot win, and Capuchin may start from one run whole; case 245 still is
/// 17.39 against 16.54.)
#[test]
fn auto_also_descends_from_capuchins_plan() {
    let mut r = Rng(11);
    for case in 0..300 {
        let t = random_trace(&mut r, 10 + case % 30);
        if ![41, 136, 258].contains(&case) {
            continue;
        }
        let budget = (t.peak() as f64 * 0.5) as u64;
        let auto = run("auto", &t, budget, LINK).unwrap().1;
        let cap = run("capuchin", &t, budget, LINK).unwrap().1;
        assert!(
            time(&auto) <= time(&cap) * (1.0 + 1e-12),
            "case {case}: auto {} capuchin {}",
            time(&auto),
            time(&cap)
        );
    }
}
