//! The passive mode (DTR's runtime, LRU): its evictions replay to the same run, its index of
//! candidates chooses as a scan does, freed sources stay as metadata while a recomputation may
//! need them, and it stops at a cutoff or a deadline.

use super::*;

/// The recompute policy finds the plan that needs a freed source kept (and dropped itself,
/// to be recomputed first): see the simulator's hand-computed `an_extension_keeps_a_freed_source`.
/// The evictions a passive run records replay to the same run: never reading a freed
/// tensor, and within the budget when the passive run was, and no slower. Where dropping and
/// swapping mix (the shim's online policy), a replay may depart from its run (a known gap, on
/// about one run in seventy: over the budget where the run kept within it); every policy
/// reports the replay, never the run.
#[test]
fn a_passive_run_and_the_replay_of_its_evictions_agree() {
    let mut r = Rng(77);
    let modes = [Evict::Dtr, Evict::DtrUpstream, Evict::Lru, Evict::DtrOrSwap];
    let mut evictions = [0; 4];
    let (mut runs, mut worse) = ([0; 4], [0; 4]);
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
                    runs[m] += 1;
                    if !o.feasible || o.makespan > p.makespan + 1e-9 {
                        worse[m] += 1;
                    }
                }
            }
        }
    }
    assert!(evictions.iter().all(|&e| e > 1000), "{evictions:?}");
    // The replay is what a policy reports: it must do what the passive run did.
    assert_eq!(
        worse[..3],
        [0; 3],
        "replays worse than their passive runs, of {runs:?}"
    );
    assert!(
        worse[3] * 50 <= runs[3],
        "{} of {} mixed replays worse than their passive runs",
        worse[3],
        runs[3]
    );
    eprintln!(
        "{runs:?} passive runs fit their budget; replays worse: {worse:?} (Dtr, DtrUpstream, Lru, DtrOrSwap)"
    );
}

/// The simulator's index of eviction candidates chooses exactly as a scan of every storage
/// does: the same evictions, the same outcome, on random traces (four modes, three budgets)
/// and on every generated family (both profiles).
#[test]
fn the_index_of_candidates_chooses_as_the_scan_does() {
    let same = |what: &str, t: &Trace, budget: u64, link: Link| {
        let a = Analysis::new(t);
        let mut evictions = 0;
        for evict in [Evict::Dtr, Evict::DtrUpstream, Evict::Lru, Evict::DtrOrSwap] {
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

/// A passive run stops, not feasible, once it cannot end below the cutoff (its time so far and
/// the compute left reach it); a cutoff above its makespan changes nothing. (The trace of the
/// test above: 5 s of compute, 7 s with DTR's two recomputations.)
#[test]
fn a_passive_run_stops_once_it_cannot_beat_the_cutoff() {
    let t = crate::timeline::tests::kept_source();
    let a = Analysis::new(&t);
    let run = |cutoff: f64| {
        crate::memory::passive::passive_run_by(
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
    let (_, o) = crate::memory::passive::passive_run_by(
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
