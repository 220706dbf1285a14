//! The recompute policy: sources kept past the program's frees where that saves memory, freed
//! constants no source, and the greedy selection against an exhaustive optimum.

use super::*;

#[test]
fn recompute_keeps_freed_sources_when_that_saves_memory() {
    let t = crate::timeline::tests::kept_source();
    let (plan, out) = run("recompute", &t, 220, LINK).unwrap();
    assert!(out.feasible && !out.invalid, "{out:?} {plan:?}");
    assert!(out.peak <= 220);
    assert!(
        plan.contains(&(0, Decision::Extend { until: 4 })),
        "a is kept for b: {plan:?}"
    );
    // Without its extensions the same plan recomputes from a freed tensor.
    let bare: Plan = plan
        .iter()
        .copied()
        .filter(|d| !matches!(d.1, Decision::Extend { .. }))
        .collect();
    assert!(simulate(&t, 220, LINK, &bare).invalid);
}

/// DTR's logs free some constants (scalars) mid-iteration: those are not there for a
/// recomputation either, unless kept.
#[test]
fn a_freed_constant_is_no_source() {
    let mut t = crate::timeline::tests::kept_source();
    t.storages[0].constant = true;
    t.storages[0].producer = None;
    t.ops[0].outputs.clear();
    assert!(!Analysis::new(&t).recomputable(&t, 1, 4));
    let (plan, out) = run("recompute", &t, 220, LINK).unwrap();
    assert!(out.feasible && !out.invalid, "{out:?} {plan:?}");
    assert!(
        plan.contains(&(0, Decision::Extend { until: 4 })),
        "{plan:?}"
    );
    assert!(Analysis::new(&t).extended(&plan).recomputable(&t, 1, 4));
}

/// The recompute policy against the best of every set of recompute decisions (one interval
/// per storage, around the peak) on traces small enough to enumerate.
#[test]
fn recompute_against_an_exhaustive_optimum() {
    let mut r = Rng(78);
    let (mut compared, mut worst) = (0, 1.0f64);
    for case in 0..300 {
        // Frees right after last uses: every option is a gap between two accesses.
        let t = random_trace_with(&mut r, 4 + case % 4, false);
        let a = Analysis::new(&t);
        let budget = (t.peak() as f64 * 0.75) as u64;
        // Every (storage, gap) that could be dropped and recomputed.
        let mut options: Vec<(usize, Decision)> = Vec::new();
        for s in 0..t.storages.len() {
            for w in a.accesses[s].windows(2) {
                if w[1] > w[0] + 1 && a.recomputable(&t, s, w[1]) {
                    options.push((
                        s,
                        Decision::Recompute {
                            after: w[0],
                            back: w[1],
                        },
                    ));
                }
            }
        }
        if options.len() > 14 {
            continue;
        }
        let mut best: Option<(f64, Plan)> = None;
        for mask in 0u32..(1 << options.len()) {
            let plan: Plan = options
                .iter()
                .enumerate()
                .filter(|(k, _)| mask & (1 << k) != 0)
                .map(|(_, o)| *o)
                .collect();
            let o = simulate(&t, budget, LINK, &plan);
            if o.feasible && best.as_ref().is_none_or(|b| o.makespan < b.0) {
                best = Some((o.makespan, plan));
            }
        }
        let (plan, got) = run("recompute", &t, budget, LINK).unwrap();
        if let Some((best, best_plan)) = best {
            compared += 1;
            assert!(
                got.feasible,
                "the optimum is feasible, so must the policy be: case {case}, optimum {best_plan:?}, ours {plan:?} {got:?}\n{:?}\n{:?}",
                t.ops
                    .iter()
                    .map(|o| (&o.inputs, &o.outputs, o.time_s))
                    .collect::<Vec<_>>(),
                t.steps
            );
            worst = worst.max(got.makespan / best);
        }
    }
    assert!(compared >= 15, "enough comparable traces: {compared}");
    eprintln!(
        "recompute against the exhaustive optimum: {compared} traces, worst ratio {worst:.4}"
    );
    // Stated bound for the greedy selection on these traces.
    assert!(
        worst <= 1.35,
        "recompute is within {worst:.3}x of the optimum"
    );
}
