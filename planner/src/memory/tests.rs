//! The policies against hand-computed timelines, random traces, an exhaustive optimum and DTR's
//! logs.

use super::passive::{passive_run, passive_run_by};
use super::*;
use crate::model::Step;
use crate::model::{Op, Storage};
use crate::timeline::Plan;
use crate::timeline::{Decision, simulate};

pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A random iteration: constants, then operations reading live storages and creating new
/// ones, each storage freed after its last use; a backward half reads forward outputs again.
fn random_trace(r: &mut Rng, ops: usize) -> Trace {
    random_trace_with(r, ops, true)
}

/// `late_frees`: some storages are freed a few operations after their last use.
pub(super) fn random_trace_with(r: &mut Rng, ops: usize, late_frees: bool) -> Trace {
    let mut t = Trace::default();
    for _ in 0..2 {
        t.storages.push(Storage {
            size: 10 + r.below(40),
            constant: true,
            producer: None,
        });
    }
    let mut live: Vec<usize> = vec![0, 1];
    let mut uses: Vec<Vec<usize>> = vec![Vec::new(); 2];
    for i in 0..ops {
        random_op(r, &mut t, &mut live, &mut uses, (i, ops), |r| {
            0.5 + r.below(10) as f64 / 10.0
        });
    }
    // Program order with frees after each storage's last use: right after it, or (one in
    // three, as when a framework holds a reference) a few operations later.
    let free_at: Vec<usize> = uses
        .iter()
        .enumerate()
        .map(|(s, used)| {
            let last = used
                .last()
                .copied()
                .unwrap_or(t.storages[s].producer.unwrap_or(0));
            if late_frees && r.below(3) == 0 {
                (last + 1 + r.below(4) as usize).min(ops - 1)
            } else {
                last
            }
        })
        .collect();
    for i in 0..ops {
        t.steps.push(Step::Op(i));
        for (s, &at) in free_at.iter().enumerate().skip(2) {
            if at == i {
                t.steps.push(Step::Free(s));
            }
        }
    }
    t.validate().unwrap();
    t
}

/// Operation `i` of `ops` in a random iteration: it reads one or two live storages (in the
/// backward half, also one from the first half of those), and makes a new one, which becomes
/// live; `uses` records the reads, `time` draws its duration after everything else.
pub(super) fn random_op(
    r: &mut Rng,
    t: &mut Trace,
    live: &mut Vec<usize>,
    uses: &mut Vec<Vec<usize>>,
    (i, ops): (usize, usize),
    time: impl FnOnce(&mut Rng) -> f64,
) -> usize {
    let mut inputs = Vec::new();
    for _ in 0..1 + r.below(2) {
        let s = live[r.below(live.len() as u64) as usize];
        if !inputs.contains(&s) {
            inputs.push(s);
        }
    }
    if i >= ops / 2 && i >= 1 {
        // Backward: reach far back.
        let s = live[r.below((live.len() as u64 / 2).max(1)) as usize];
        if !inputs.contains(&s) {
            inputs.push(s);
        }
    }
    t.storages.push(Storage {
        size: 20 + r.below(100),
        constant: false,
        producer: Some(i),
    });
    let out = t.storages.len() - 1;
    uses.push(Vec::new());
    for &s in &inputs {
        uses[s].push(i);
    }
    let name = if r.below(3) == 0 { "conv" } else { "op" };
    let time_s = time(r);
    t.ops.push(Op {
        backward: i >= ops / 2,
        ..Op::new(name, time_s, inputs, vec![out])
    });
    live.push(out);
    out
}

pub(super) const LINK: Link = Link {
    h2d: 200.0,
    d2h: 200.0,
};

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

/// The recompute policy finds the plan that needs a freed source kept (and dropped itself,
/// to be recomputed first): see the simulator's hand-computed `an_extension_keeps_a_freed_source`.
/// The evictions a passive run records replay to the same run: never reading a freed
/// tensor, and (but for a known rare gap) within the budget when the passive run was, and
/// no slower.
#[test]
fn a_passive_run_and_the_replay_of_its_evictions_agree() {
    let mut r = Rng(77);
    let modes = [Evict::Dtr, Evict::DtrUpstream, Evict::Lru];
    let mut evictions = [0; 3];
    let (mut runs, mut worse) = (0, 0);
    for case in 0..2000 {
        let t = random_trace_with(&mut r, 6 + (case % 12), case % 2 == 0);
        let a = Analysis::new(&t);
        let peak = t.peak();
        for f in [0.8, 0.6, 0.4] {
            let budget = (peak as f64 * f) as u64;
            for (m, evict) in modes.into_iter().enumerate() {
                let (evicted, p) = passive_run(&t, &a, budget, LINK, evict, &Vec::new(), &|| true);
                evictions[m] += evicted.len();
                let o = simulate(&t, budget, LINK, &evicted);
                assert!(!o.invalid && !p.invalid, "case {case} at {f}, {evict:?}");
                if p.feasible {
                    runs += 1;
                    if !o.feasible || o.makespan > p.makespan + 1e-9 {
                        worse += 1;
                    }
                }
            }
        }
    }
    assert!(evictions.iter().all(|&e| e > 1000), "{evictions:?}");
    // The replay is what a policy reports: it must do what the passive run did.
    assert_eq!(
        worse, 0,
        "{worse} of {runs} replays worse than their passive runs"
    );
    eprintln!("{runs} passive runs fit their budget, none replays worse");
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

/// The simulator's index of eviction candidates chooses exactly as a scan of every storage
/// does: the same evictions, the same outcome, on random traces (three modes, three budgets)
/// and on every generated family (both profiles).
#[test]
fn the_index_of_candidates_chooses_as_the_scan_does() {
    let same = |what: &str, t: &Trace, budget: u64, link: Link| {
        let a = Analysis::new(t);
        let mut evictions = 0;
        for evict in [Evict::Dtr, Evict::DtrUpstream, Evict::Lru] {
            let by = |indexed| {
                passive_run_by(
                    t,
                    &a,
                    budget,
                    link,
                    evict,
                    &Vec::new(),
                    &|| true,
                    indexed,
                    f64::INFINITY,
                )
            };
            let ((p1, o1), (p2, o2)) = (by(true), by(false));
            assert_eq!(p1, p2, "{what}, {evict:?}: evictions");
            assert_eq!(
                (o1.feasible, o1.makespan.to_bits(), o1.peak),
                (o2.feasible, o2.makespan.to_bits(), o2.peak),
                "{what}, {evict:?}: outcome"
            );
            evictions += p1.len();
        }
        evictions
    };
    let mut r = Rng(4141);
    let mut evictions = 0;
    for case in 0..600 {
        let t = random_trace_with(&mut r, 6 + (case % 14), case % 2 == 0);
        for f in [0.8, 0.6, 0.4] {
            let budget = (t.peak() as f64 * f) as u64;
            evictions += same(&format!("case {case} at {f}"), &t, budget, LINK);
        }
    }
    assert!(evictions > 10_000, "{evictions} evictions compared");
    for profile in ["h100", "p100"] {
        let (p, _) = simgpu_model::Profile::load(profile).unwrap();
        let link = Link::from_profile(&p);
        for name in crate::generate::FAMILIES {
            let t = crate::generate::family(name, 1, 8).unwrap().trace(&p);
            for f in [0.7, 0.4, 0.2] {
                let budget = (t.peak() as f64 * f) as u64;
                same(&format!("{name} {profile} at {f}"), &t, budget, link);
            }
        }
    }
    // Neighbourhoods past 64 storages (a recurrent loss reads every step's state), where the
    // walk stops early.
    let (p, _) = simgpu_model::Profile::load("p100").unwrap();
    let t = crate::generate::family("rnn", 3, 8).unwrap().trace(&p);
    for f in [0.5, 0.3] {
        let budget = (t.peak() as f64 * f) as u64;
        same(&format!("rnn:3 at {f}"), &t, budget, Link::from_profile(&p));
    }
}

/// Hand-computed, DTR under 220 B on `kept_source`: the program frees a (10 B) after op 1,
/// but b, made from it, is read at op 4, so a stays as metadata (dropped, 100 B held). At
/// op 3, b goes (x is in use); x, freed after op 3, stays as metadata too. Op 4 recomputes
/// a then b: 100 + 10 + 100 + 10 = 220 B, 5 s + 2 s. x's metadata was never needed: the
/// plan leaves it out.
#[test]
fn a_freed_source_stays_as_metadata_for_a_later_recomputation() {
    let t = crate::timeline::tests::kept_source();
    let a = Analysis::new(&t);
    assert_eq!(a.horizon, vec![4, 4, 4, 4, 4]);
    let (evicted, p) = passive_run(&t, &a, 220, LINK, Evict::Dtr, &Vec::new(), &|| true);
    assert_eq!(
        evicted,
        vec![
            (1, Decision::Recompute { after: 2, back: 4 }),
            (0, Decision::Extend { until: 4 }),
            (0, Decision::Recompute { after: 1, back: 4 }),
        ]
    );
    assert!(p.feasible, "{p:?}");
    assert_eq!((p.makespan, p.peak, p.recomputed_ops), (7.0, 220, 2));
    let o = simulate(&t, 220, LINK, &evicted);
    assert_eq!((o.makespan, o.peak, o.invalid), (7.0, 220, false));
}

/// Hand-computed, DTR under 220 B: a (op 0) is read only by op 1, which makes b; b is read
/// again by op 4. At op 3 (d, 100 B more) a can go although nothing reads it again (b, made
/// from it, may yet be recomputed until op 4), and, staler than b, it does: no
/// recomputation at all. Without that, b would go and op 4 would have to bring it back with
/// a still held: 300 B.
#[test]
fn a_source_nothing_reads_again_may_go_while_something_made_from_it_lives() {
    let t = crate::timeline::tests::unit_trace(
        &[100, 100, 10, 100, 10],
        &[
            ("a", &[]),
            ("b", &[0]),
            ("c", &[1]),
            ("d", &[]),
            ("e", &[1, 3]),
        ],
        vec![
            Step::Op(0),
            Step::Op(1),
            Step::Op(2),
            Step::Free(2),
            Step::Op(3),
            Step::Op(4),
            Step::Free(1),
            Step::Free(3),
            Step::Free(4),
            Step::Free(0),
        ],
    );
    let a = Analysis::new(&t);
    assert_eq!(a.horizon[0], 4);
    let (evicted, p) = passive_run(&t, &a, 220, LINK, Evict::Dtr, &Vec::new(), &|| true);
    assert_eq!(
        evicted,
        vec![(0, Decision::Recompute { after: 2, back: 4 })]
    );
    assert!(p.feasible, "{p:?}");
    assert_eq!((p.makespan, p.peak, p.recomputed_ops), (5.0, 210, 0));
}

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

fn logs() -> Vec<(String, Trace)> {
    let mut v: Vec<(String, Trace)> = crate::testdata::dtr_logs()
        .into_iter()
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                crate::model::import_dtr(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Infeasible counts as infinitely slow.
fn time(o: &Outcome) -> f64 {
    if o.feasible {
        o.makespan
    } else {
        f64::INFINITY
    }
}

/// Issue 14's claims on every policy's result at one budget (see [`run_all`]): `auto` at or below
/// every other, `capuchin` and `recompute` at or below `dtr`, `hybrid` at or below the better of
/// `swap` and `recompute`, and none below the lower bound. The misses, described.
fn claim_misses(what: &str, all: &Named, bound: &Bound) -> Vec<String> {
    let get = |p: &str| &all.iter().find(|x| x.0 == p).expect("every policy").1.1;
    let mut misses = Vec::new();
    let others: Vec<&str> = POLICIES.iter().copied().filter(|p| *p != "auto").collect();
    let claims: [(&str, &[&str]); 4] = [
        ("auto", &others),
        ("capuchin", &["dtr"]),
        ("recompute", &["dtr"]),
        ("hybrid", &["swap", "recompute"]),
    ];
    for (who, than) in claims {
        let best = than
            .iter()
            .map(|p| time(get(p)))
            .fold(f64::INFINITY, f64::min);
        if time(get(who)) > best * (1.0 + 1e-12) {
            misses.push(format!(
                "{what}: {who} {} above {than:?} {best}",
                time(get(who))
            ));
        }
    }
    for (p, (_, o)) in all {
        if o.feasible && o.makespan < bound.makespan * (1.0 - 1e-12) {
            misses.push(format!(
                "{what}: {p} {} below the bound {}",
                o.makespan, bound.makespan
            ));
        }
    }
    misses
}

#[test]
fn on_the_dtr_logs_the_policies_hold_their_claims() {
    let (p, _) = simgpu_model::Profile::load("h100").unwrap();
    let link = Link::from_profile(&p);
    let mut misses = Vec::new();
    for (name, t) in logs() {
        for f in [0.5, 0.3] {
            let budget = (t.peak() as f64 * f) as u64;
            let all = run_all(&t, budget, link);
            let bound = lower_bound(&t, budget, link);
            misses.extend(claim_misses(&format!("{name} at {f}"), &all, &bound));
            let get = |p: &str| &all.iter().find(|x| x.0 == p).unwrap().1.1;
            if get("dtr").feasible {
                assert!(get("auto").feasible, "{name} at {f}");
            }
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}

#[test]
fn smartpool_stays_within_two_percent_of_the_peak_load() {
    for (name, t) in logs() {
        let p = crate::pool::smartpool(&t);
        assert!(p.ratio() <= 1.02, "{name}: {}", p.ratio());
        assert!(p.size >= p.peak_load);
    }
}

/// Every policy's result at one budget, its bound, and the claims' misses.
fn check(what: &str, t: &Trace, budget: u64, link: Link) -> Vec<String> {
    let all = run_all(t, budget, link);
    let bound = lower_bound(t, budget, link);
    for (p, (plan, o)) in &all {
        // What is reported is the plan's own replay.
        let again = simulate(t, budget, link, plan);
        assert_eq!(
            (again.feasible, again.makespan),
            (o.feasible, o.makespan),
            "{what}: {p} reports its replay"
        );
    }
    claim_misses(what, &all, &bound)
}

#[test]
fn on_generated_families_the_policies_hold_their_claims() {
    let mut misses = Vec::new();
    let mut gaps = Vec::new();
    for profile in ["h100", "p100"] {
        let (p, _) = simgpu_model::Profile::load(profile).unwrap();
        let link = Link::from_profile(&p);
        for name in crate::generate::FAMILIES {
            let t = crate::generate::family(name, 1, 8).unwrap().trace(&p);
            t.validate().unwrap();
            for f in [0.9, 0.7, 0.5, 0.3, 0.2] {
                let budget = (t.peak() as f64 * f) as u64;
                misses.extend(check(&format!("{name} {profile} {f}"), &t, budget, link));
                let auto = run("auto", &t, budget, link).unwrap().1;
                let bound = lower_bound(&t, budget, link);
                if auto.feasible {
                    gaps.push(format!(
                        "{name} {profile} {f}: {:.1}%",
                        100.0 * (auto.makespan / bound.makespan - 1.0)
                    ));
                } else if f >= 0.9 {
                    misses.push(format!("{name} {profile} {f}: auto infeasible"));
                }
            }
        }
    }
    eprintln!("auto's gap to the bound on the families (simulated): {gaps:?}");
    assert!(misses.is_empty(), "{misses:#?}");
}

#[test]
fn on_random_traces_the_policies_hold_their_claims() {
    let mut r = Rng(14);
    let mut misses = Vec::new();
    for case in 0..60 {
        let t = random_trace(&mut r, 6 + case % 14);
        let budget = (t.peak() as f64 * (0.5 + 0.1 * (case % 5) as f64)) as u64;
        misses.extend(check(&format!("case {case}"), &t, budget, LINK));
        // run_all gives each policy exactly as run does.
        if case % 10 == 0 {
            for (p, (_, o)) in run_all(&t, budget, LINK) {
                let alone = run(p, &t, budget, LINK).unwrap().1;
                assert_eq!(
                    (alone.feasible, alone.makespan),
                    (o.feasible, o.makespan),
                    "{p}"
                );
            }
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}

/// The exact optimum over plans that move each tensor at most once per gap between two of its
/// accesses: kept, recomputed, or swapped with its in-trigger at any operation of the gap; by
/// enumeration (tiny traces only). `None` when no such plan fits, or there are too many.
pub(super) fn exhaustive(t: &Trace, budget: u64, link: Link) -> Option<Option<f64>> {
    let a = Analysis::new(t);
    let mut choices: Vec<Vec<Option<(usize, Decision)>>> = Vec::new();
    for s in 0..t.storages.len() {
        for w in a.accesses[s].windows(2) {
            let (after, back) = (w[0], w[1]);
            if back <= after + 1 {
                continue;
            }
            let mut c = vec![None];
            if a.recomputable(t, s, back) {
                c.push(Some((s, Decision::Recompute { after, back })));
            }
            for trigger in after + 1..=back {
                c.push(Some((
                    s,
                    Decision::Swap {
                        after,
                        trigger,
                        back,
                    },
                )));
            }
            choices.push(c);
        }
    }
    let count: f64 = choices.iter().map(|c| c.len() as f64).product();
    if count > 20_000.0 {
        return None;
    }
    let mut best: Option<f64> = None;
    let mut pick = vec![0usize; choices.len()];
    loop {
        let plan: Plan = pick
            .iter()
            .zip(&choices)
            .filter_map(|(&k, c)| c[k])
            .collect();
        let o = simulate(t, budget, link, &plan);
        if o.feasible && best.is_none_or(|b| o.makespan < b) {
            best = Some(o.makespan);
        }
        // The next combination (an odometer).
        let mut i = 0;
        while i < pick.len() {
            pick[i] += 1;
            if pick[i] < choices[i].len() {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
        if i == pick.len() {
            return Some(best);
        }
    }
}

#[test]
fn the_bound_is_below_an_exhaustive_optimum() {
    let mut r = Rng(1414);
    let (mut compared, mut tight, mut worst_auto) = (0, 0, 1.0f64);
    for case in 0..400 {
        let t = random_trace_with(&mut r, 4 + case % 3, false);
        let budget = (t.peak() as f64 * (0.6 + 0.1 * (case % 3) as f64)) as u64;
        let Some(Some(opt)) = exhaustive(&t, budget, LINK) else {
            continue;
        };
        compared += 1;
        let bound = lower_bound(&t, budget, LINK);
        assert!(
            bound.makespan <= opt * (1.0 + 1e-9),
            "case {case}: bound {} above the optimum {opt}",
            bound.makespan
        );
        if bound.makespan >= opt * (1.0 - 1e-9) {
            tight += 1;
        }
        let auto = run("auto", &t, budget, LINK).unwrap().1;
        assert!(auto.feasible, "case {case}: the optimum fits, so must auto");
        worst_auto = worst_auto.max(auto.makespan / opt);
    }
    assert!(compared >= 50, "enough traces compared: {compared}");
    assert!(
        worst_auto <= 1.35,
        "auto is within {worst_auto:.3}x of the optimum"
    );
    eprintln!(
        "bound against the exhaustive optimum: {compared} traces, tight on {tight}; auto within {worst_auto:.4}x of the optimum"
    );
}

#[test]
fn auto_under_a_deadline_returns_its_best_so_far() {
    let (p, _) = simgpu_model::Profile::load("p100").unwrap();
    let link = Link::from_profile(&p);
    let t = crate::generate::family("unet", 1, 8).unwrap().trace(&p);
    let budget = (t.peak() as f64 * 0.7) as u64;
    let full = run("auto", &t, budget, link).unwrap().1;
    let dtr = run("dtr", &t, budget, link).unwrap().1;
    // The recomputation selection's first run comes first: the questions it asks.
    let asked_first = std::cell::Cell::new(0usize);
    let a = Analysis::new(&t);
    super::capuchin::recompute_first(&t, &a, budget, link, &|| {
        asked_first.set(asked_first.get() + 1);
        true
    });
    for allowed in [0usize, 1, 3, 30, 100, 300, 1000, usize::MAX] {
        // A deadline that says stop after `allowed` questions, and counts those asked after.
        let asked = std::cell::Cell::new(0usize);
        let more = || {
            asked.set(asked.get() + 1);
            asked.get() <= allowed
        };
        let (plan, o) = run_until("auto", &t, budget, link, &more).unwrap();
        let again = simulate(&t, budget, link, &plan);
        assert_eq!((again.feasible, again.makespan), (o.feasible, o.makespan));
        // DTR's passive run comes next (asking once per step): given that long, never worse
        // than it.
        if allowed > asked_first.get() + t.steps.len() + 3 {
            assert!(
                time(&o) <= time(&dtr),
                "{allowed}: {} {}",
                time(&o),
                time(&dtr)
            );
        }
        if allowed == usize::MAX {
            assert_eq!(o.makespan, full.makespan);
        } else {
            // Once told to stop, every step asks once on its way out.
            let after = asked.get().saturating_sub(allowed);
            assert!(
                after <= 40,
                "{allowed}: asked {after} more times after the deadline"
            );
        }
    }
}

/// The lower bound asks the deadline as it goes (a 10,000-operation trace takes it a good part
/// of a second): told to stop, it gives nothing, having asked once more at most; given time,
/// exactly [`lower_bound`].
#[test]
fn the_bound_stops_at_a_deadline() {
    let (p, _) = simgpu_model::Profile::load("p100").unwrap();
    let link = Link::from_profile(&p);
    let t = crate::generate::family("unet", 1, 8).unwrap().trace(&p);
    let a = Analysis::new(&t);
    let budget = (t.peak() as f64 * 0.4) as u64;
    let full = bound::lower_bound_until(&t, &a, budget, link, &|| true).unwrap();
    assert_eq!(full, lower_bound(&t, budget, link));
    let asked = std::cell::Cell::new(0usize);
    let all = bound::lower_bound_until(&t, &a, budget, link, &|| {
        asked.set(asked.get() + 1);
        true
    });
    assert_eq!(all, Some(full));
    let total = asked.get();
    assert!(total > 10, "asked {total} times");
    for allowed in [0, 1, total / 2] {
        asked.set(0);
        let cut = bound::lower_bound_until(&t, &a, budget, link, &|| {
            asked.set(asked.get() + 1);
            asked.get() <= allowed
        });
        assert_eq!(cut, None, "{allowed}");
        assert_eq!(asked.get(), allowed + 1);
    }
}

/// A paced deadline stops while the longest step so far still fits before the end, not one step
/// past it; plain `now < end` would say yes at 8 s and run a 3 s step to 11.
#[test]
fn a_paced_deadline_leaves_room_for_the_longest_step_so_far() {
    let p = Pace::new(10.0);
    // Steps of 1 s, then one of 3 s: after it, 3 s must still fit.
    assert!(p.more(0.0));
    assert!(p.more(1.0));
    assert!(p.more(2.0));
    assert!(p.more(5.0)); // 5 + 3 < 10
    assert!(p.more(6.0)); // 6 + 3 < 10
    assert!(!p.more(7.0)); // 7 + 3 is the end: no room for another 3 s step
    // Never asked before: only the end counts, less the 1% kept back for returning.
    assert!(Pace::new(1.0).more(0.98));
    assert!(!Pace::new(1.0).more(0.995));
    assert!(!Pace::new(1.0).more(1.0));
}

/// A passive run stops, not feasible, once it cannot end below the cutoff (its time so far and
/// the compute left reach it); a cutoff above its makespan changes nothing. (The trace of the
/// test above: 5 s of compute, 7 s with DTR's two recomputations.)
#[test]
fn a_passive_run_stops_once_it_cannot_beat_the_cutoff() {
    let t = crate::timeline::tests::kept_source();
    let a = Analysis::new(&t);
    let run = |cutoff: f64| {
        super::passive::passive_run_by(
            &t,
            &a,
            220,
            LINK,
            Evict::Dtr,
            &Vec::new(),
            &|| true,
            true,
            cutoff,
        )
    };
    let (full, o) = run(f64::INFINITY);
    assert!(o.feasible && o.makespan == 7.0, "{o:?}");
    let (same, o2) = run(7.5);
    assert_eq!((same, o2.feasible, o2.makespan), (full, true, 7.0));
    let (_, cut) = run(6.5);
    assert!(!cut.feasible, "{cut:?}");
}

/// The caller's deadline is asked during an operation's evictions, not only between
/// operations: one operation that evicts many tensors (DTR's search, per eviction) ran 12 ms
/// past the last question on a 10,000-operation trace, and a 100 ms deadline took 110.
#[test]
fn a_passive_run_asks_its_deadline_between_evictions() {
    // Twenty tensors of 10 B alive, then one of 150 B under a budget of 200: 15 evictions in
    // one operation; the last operation reads the first and the large one.
    let mut sizes = vec![10u64; 20];
    sizes.extend([150, 1]);
    let mut ops: Vec<(&str, &[usize])> = vec![("a", &[]); 21];
    ops.push(("sum", &[0, 20]));
    let t = crate::timeline::tests::unit_trace(&sizes, &ops, (0..22).map(Step::Op).collect());
    let a = Analysis::new(&t);
    let asked = std::cell::Cell::new(0usize);
    let more = || {
        asked.set(asked.get() + 1);
        true
    };
    let (_, o) = super::passive::passive_run_by(
        &t,
        &a,
        200,
        LINK,
        Evict::Dtr,
        &Vec::new(),
        &more,
        true,
        f64::INFINITY,
    );
    assert!(o.feasible, "{o:?}");
    assert!(
        asked.get() >= t.steps.len() + 15,
        "asked {} times",
        asked.get()
    );
}

/// On traces whose swaps copy fewer bytes than they free (a tensor held in whole pages),
/// `capuchin`, `swap` and `auto` are never slower than their selection made as if the copies
/// moved the pages, replayed with the exact copies: they run that selection too (`auto` under
/// either ranking).
#[test]
fn the_selections_also_run_as_if_copies_moved_whole_pages() {
    use super::capuchin::{Rank, Selection, iterative_from};
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
    use super::capuchin::{Selection, both_selection, iterative_from};
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
    use super::capuchin::{Selection, iterative_from};
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
    use super::capuchin::{both_selection, capuchin};
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
