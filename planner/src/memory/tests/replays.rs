//! Every policy's plan as the simulator replays it: within the budget, deterministic, never
//! reading a freed tensor; judged as the shim carries it out; and a replay stopped at a bar
//! answering as the whole replay.

use super::*;

#[test]
fn every_policy_gives_plans_that_replay_within_the_budget() {
    let mut r = Rng(2024);
    // Plans that keep sources past their frees, and that drop tensors for good: the
    // checks below must have met both.
    let (mut kept, mut dead) = (0, 0);
    for case in 0..150 {
        let t = random_trace(&mut r, 6 + (case % 10));
        let peak = t.peak();
        for f in [0.9, 0.7, 0.5, 0.3] {
            let budget = (peak as f64 * f) as u64;
            for p in POLICIES {
                let (plan, out) = run(p, &t, budget, LINK).unwrap();
                let again = simulate(&t, budget, LINK, &plan);
                assert_eq!(again.makespan, out.makespan, "{p}: deterministic replay");
                if out.feasible {
                    assert!(
                        out.peak <= budget,
                        "case {case} {p} at {f}: {} > {budget}",
                        out.peak
                    );
                    assert!(
                        !out.invalid,
                        "case {case} {p}: a recomputation from a freed tensor"
                    );
                    assert!(out.makespan >= t.compute_time() - 1e-9);
                }
                // Every recomputation finds its sources (kept past their frees where the
                // plan says so), feasible or not: the replay never reads a freed tensor.
                assert!(
                    !again.invalid,
                    "case {case} {p} at {f}: a recomputation from a freed tensor"
                );
                if out.feasible {
                    kept += plan
                        .iter()
                        .filter(|d| matches!(d.1, Decision::Extend { .. }))
                        .count();
                    dead += plan
                        .iter()
                        .filter(|d| {
                            matches!(
                                d.1,
                                Decision::Recompute {
                                    back: usize::MAX,
                                    ..
                                }
                            )
                        })
                        .count();
                }
            }
        }
    }
    eprintln!("feasible plans held {kept} extensions and {dead} drops for good");
    assert!(
        kept > 0 && dead > 0,
        "{kept} extensions, {dead} drops for good"
    );
}

/// Where the shim carries plans out, `auto` judges every plan it weighs as the shim carries it
/// out (no source kept past the program's free, no drop for good, every recomputation's
/// sources still there at its back-access): its pick is the best carried-out plan, not the
/// carried-out remains of the best plan as planned. Other policies' own searches may make
/// decisions the shim leaves out (DTR's passive mode keeps freed sources as metadata): they
/// come back carried out.
#[test]
fn where_the_shim_carries_plans_out_auto_judges_them_so() {
    let mut r = Rng(77);
    let (mut recomputes, mut better) = (0, 0);
    for case in 0..120 {
        let mut t = random_trace(&mut r, 6 + (case % 12));
        t.replay_in_place = true;
        let peak = t.peak();
        for f in [0.9, 0.7, 0.5, 0.3] {
            let budget = (peak as f64 * f) as u64;
            // The best plan as planned, then carried out: what judging after the search gives.
            let after = crate::memory::carried_out::as_carried_out(
                &t,
                budget,
                LINK,
                run("auto", &t, budget, LINK).unwrap(),
            );
            t.shim_carries_out = true;
            let all = run_all(&t, budget, LINK);
            t.shim_carries_out = false;
            let (plan, o) = &all[0].1;
            assert_eq!(
                &crate::memory::carried_out::carried_out(&t, plan),
                plan,
                "case {case} at {f}"
            );
            for (p, (other, oo)) in &all {
                assert_eq!(
                    &crate::memory::carried_out::carried_out(&t, other),
                    other,
                    "case {case} {p} at {f}: comes back carried out"
                );
                assert!(
                    !rank_outcomes(oo, o).is_lt(),
                    "case {case} at {f}: {p} carried out beats auto's pick"
                );
            }
            if rank_outcomes(o, &after.1).is_lt() {
                better += 1;
            }
            recomputes += plan
                .iter()
                .filter(|d| matches!(d.1, Decision::Recompute { .. }))
                .count();
        }
    }
    // The check met plans with recomputations, and judging as carried out paid somewhere.
    assert!(recomputes > 50, "only {recomputes} recomputations planned");
    assert!(
        better > 0,
        "judging as carried out never beat judging as planned"
    );
}

/// A replay at a bar (`simulate_within`) keeps exactly the plans a whole replay would keep
/// (those that fit and end before the bar, or at it with `ties`), with the whole replay's
/// outcome to the bit: on random traces, for plans from several policies and edits of them
/// (decisions changed, dropped or added), with the bar at the plan's own makespan and around.
#[test]
fn a_replay_stopped_at_a_bar_answers_as_a_whole_replay() {
    use crate::timeline::simulate_within;
    let mut r = Rng(2027);
    let (mut tried, mut stopped, mut whole) = (0, 0, 0);
    // (`stopped`: plans not kept; `whole`: plans kept, replayed to the end.)
    for case in 0..150 {
        let t = random_trace_with(&mut r, 20 + case % 40, case % 2 == 0);
        let budget = (t.peak() as f64 * [0.8, 0.6, 0.4][case % 3]) as u64;
        let plans: Vec<Plan> = ["swap", "recompute", "capuchin", "dtr", "lru"]
            .iter()
            .map(|p| run(p, &t, budget, LINK).unwrap().0)
            .filter(|p| !p.is_empty())
            .collect();
        let Some(base) = plans.first() else {
            continue;
        };
        let bar = simulate(&t, budget, LINK, base).makespan;
        for _ in 0..12 {
            let other = &plans[r.below(plans.len() as u64) as usize];
            let mut cand = base.clone();
            match r.below(3) {
                0 => {
                    let k = r.below(cand.len() as u64) as usize;
                    cand[k] = other[r.below(other.len() as u64) as usize];
                }
                1 => {
                    cand.remove(r.below(cand.len() as u64) as usize);
                }
                _ => cand.push(other[r.below(other.len() as u64) as usize]),
            }
            let o = simulate(&t, budget, LINK, &cand);
            for (bar, ties) in [
                (bar, true),
                (bar, false),
                (bar * 0.97, false),
                (bar * 1.03, true),
            ] {
                tried += 1;
                let keep = o.feasible && (o.makespan < bar || ties && o.makespan == bar);
                match simulate_within(&t, budget, LINK, &cand, bar, ties) {
                    Some(x) => {
                        whole += 1;
                        assert!(
                            keep && (x.makespan.to_bits(), x.peak, x.stall_s.to_bits())
                                == (o.makespan.to_bits(), o.peak, o.stall_s.to_bits())
                                && (x.swapped_out, x.recomputed_ops)
                                    == (o.swapped_out, o.recomputed_ops)
                                && x.usage.mem_at == o.usage.mem_at,
                            "case {case}: {x:?} / {o:?}"
                        );
                    }
                    None => {
                        stopped += 1;
                        assert!(!keep, "case {case}: {o:?}");
                    }
                }
            }
        }
    }
    assert!(
        stopped > 500 && whole > 300,
        "{tried}: {stopped} stopped, {whole} whole"
    );
    eprintln!("{tried} replays at a bar: {whole} kept, {stopped} not");
}
