//! The lower bound's charge for overwritten sources, against the exhaustive optimum on random
//! traces with in-place writes (the other random traces have none, where it changes nothing).

use super::bound::lower_bound_by;
use super::tests::{LINK, Rng, exhaustive, random_op};
use super::*;
use crate::model::{Op, Step, Storage};

/// A random iteration in which one operation in three, where it can, writes in place the output
/// of the one before it, which nothing has read yet (as `relu_` after a batch norm does): a new
/// version of the same size, the old one gone. Otherwise as the other random traces: reads of
/// live storages, a backward half reaching far back, each storage freed after its last use.
pub(super) fn inplace_trace(r: &mut Rng, ops: usize) -> Trace {
    let mut t = Trace::default();
    for _ in 0..2 {
        t.storages.push(Storage {
            size: 10 + r.below(40),
            constant: true,
            producer: None,
        });
    }
    let mut live: Vec<usize> = vec![0, 1];
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); 2];
    let mut fresh: Option<usize> = None;
    for i in 0..ops {
        let time_s = 0.5 + r.below(10) as f64 / 10.0;
        let backward = i >= ops / 2;
        let pick = |r: &mut Rng, live: &[usize]| live[r.below(live.len() as u64) as usize];
        if let Some(old) = fresh.filter(|&o| reads[o].is_empty() && r.below(3) == 0) {
            let mut inputs = vec![old];
            if r.below(2) == 0 {
                let s = pick(r, &live);
                if s != old {
                    inputs.push(s);
                }
            }
            t.storages.push(Storage {
                size: t.storages[old].size,
                constant: false,
                producer: Some(i),
            });
            let new = t.storages.len() - 1;
            reads.push(Vec::new());
            for &s in &inputs {
                reads[s].push(i);
            }
            t.ops.push(Op {
                mutates: vec![old],
                inplace: vec![(old, new)],
                backward,
                ..Op::new("relu_", time_s, inputs, Vec::new())
            });
            let k = live.iter().position(|&s| s == old).unwrap();
            live[k] = new;
            fresh = Some(new);
            continue;
        }
        let out = random_op(r, &mut t, &mut live, &mut reads, (i, ops), |_| time_s);
        fresh = Some(out);
    }
    // Frees right after each last read (or the making); an overwritten version's memory passed
    // to its new version instead.
    let overwritten: Vec<usize> = t
        .ops
        .iter()
        .flat_map(|o| o.inplace.iter().map(|v| v.0))
        .collect();
    let free_at: Vec<Option<usize>> = (0..t.storages.len())
        .map(|s| {
            (s >= 2 && !overwritten.contains(&s)).then(|| {
                reads[s]
                    .last()
                    .copied()
                    .unwrap_or(t.storages[s].producer.unwrap())
            })
        })
        .collect();
    for i in 0..ops {
        t.steps.push(Step::Op(i));
        for (s, &at) in free_at.iter().enumerate() {
            if at == Some(i) {
                t.steps.push(Step::Free(s));
            }
        }
    }
    t.validate().unwrap();
    t
}

/// The charge holds on every trace the exhaustive search can settle: the bound stays at or
/// below the optimum, at or above the bound without it, and above it on some.
#[test]
fn the_bound_with_overwritten_sources_is_below_an_exhaustive_optimum() {
    let mut r = Rng(1515);
    let (mut compared, mut raised, mut tight) = (0, 0, 0);
    // Every other trace on a slow link, where recomputing is what fits.
    let slow = Link {
        h2d: 20.0,
        d2h: 20.0,
    };
    for case in 0..3000 {
        let link = if case % 2 == 0 { LINK } else { slow };
        let t = inplace_trace(&mut r, 4 + case % 4);
        if t.ops.iter().all(|o| o.inplace.is_empty()) {
            continue;
        }
        let budget = (t.peak() as f64 * (0.5 + 0.1 * (case / 2 % 4) as f64)) as u64;
        let Some(Some(opt)) = exhaustive(&t, budget, link) else {
            continue;
        };
        compared += 1;
        let a = Analysis::new(&t);
        let by = |chained| {
            lower_bound_by(&t, &a, budget, link, &|| true, chained)
                .unwrap()
                .makespan
        };
        let (plain, chained) = (by(false), by(true));
        assert_eq!(chained, lower_bound(&t, budget, link).makespan);
        assert!(
            chained <= opt * (1.0 + 1e-9),
            "case {case}: bound {chained} above the optimum {opt}"
        );
        assert!(
            chained >= plain,
            "case {case}: {chained} below the bound without the charge, {plain}"
        );
        if chained > plain * (1.0 + 1e-9) {
            raised += 1;
        }
        if chained >= opt * (1.0 - 1e-9) {
            tight += 1;
        }
    }
    eprintln!(
        "overwritten sources: {compared} traces against the optimum, the bound raised on {raised}, tight on {tight}"
    );
    assert!(compared >= 100, "enough traces compared: {compared}");
    assert!(
        raised >= 5,
        "the charge raised the bound on {raised} traces only"
    );
}

/// A random trace with one operation given a workspace (a storage it writes as scratch, freed
/// right after it) and two configurations: the recorded one, faster with a larger workspace,
/// and a slower one with a smaller workspace. Returns the trace as recorded (naming both) and
/// the trace of each choice.
fn with_configs(r: &mut Rng, ops: usize) -> (Trace, Vec<Trace>) {
    let mut t = super::tests::random_trace_with(r, ops, false);
    let i = r.below(ops as u64) as usize;
    let (fast, slow) = (
        t.ops[i].time_s,
        t.ops[i].time_s + 0.2 + r.below(10) as f64 / 10.0,
    );
    let (large, small) = (20 + r.below(60), r.below(10));
    t.storages.push(Storage {
        size: large,
        constant: false,
        producer: None,
    });
    let ws = t.storages.len() - 1;
    t.ops[i].outputs.push(ws);
    let at = t.steps.iter().position(|s| *s == Step::Op(i)).unwrap();
    t.steps.insert(at + 1, Step::Free(ws));
    let mut choices = Vec::new();
    for (time_s, size) in [(fast, large), (slow, small)] {
        let mut c = t.clone();
        c.ops[i].time_s = time_s;
        c.storages[ws].size = size;
        choices.push(c);
    }
    t.ops[i].configs = Some(crate::model::Configs {
        fastest_s: fast,
        least_workspace: small,
        workspace: vec![ws],
        front: Vec::new(),
    });
    t.validate().unwrap();
    (t, choices)
}

#[test]
fn the_bound_over_configurations_is_below_the_best_choice_and_plan() {
    let mut r = Rng(4141);
    let (mut compared, mut lowered) = (0, 0);
    for case in 0..2000 {
        let (t, choices) = with_configs(&mut r, 4 + case % 4);
        let budget = (t.peak() as f64 * (0.5 + 0.1 * (case % 4) as f64)) as u64;
        // The joint optimum: the best plan of the best choice (None: too many plans to try).
        let optima: Option<Vec<Option<f64>>> = choices
            .iter()
            .map(|c| exhaustive(c, budget, LINK))
            .collect();
        let Some(best) = optima.and_then(|o| o.into_iter().flatten().min_by(|a, b| a.total_cmp(b)))
        else {
            continue;
        };
        compared += 1;
        let joint = lower_bound(&t, budget, LINK).makespan;
        assert!(
            joint <= best * (1.0 + 1e-9),
            "case {case}: bound {joint} above the best choice's optimum {best}"
        );
        // The bound of the recorded choice alone may be above the joint optimum.
        let recorded = lower_bound(&choices[0], budget, LINK).makespan;
        if joint < recorded * (1.0 - 1e-9) {
            lowered += 1;
        }
    }
    eprintln!("configurations: {compared} traces against the joint optimum, lowered on {lowered}");
    assert!(compared >= 100, "enough traces compared: {compared}");
    assert!(
        lowered >= 5,
        "the configurations lowered the bound on {lowered} traces only"
    );
}
