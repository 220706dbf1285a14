//! The simulator against hand-computed timelines.

use super::*;
use crate::model::{Op, Step, Storage};

/// A trace of 1-second operations, operation i making storage i (of `sizes[i]` bytes) from
/// the storages listed for it.
pub(crate) fn unit_trace(sizes: &[u64], ops: &[(&str, &[usize])], steps: Vec<Step>) -> Trace {
    Trace {
        storages: (0..sizes.len())
            .map(|i| Storage {
                size: sizes[i],
                constant: false,
                producer: Some(i),
            })
            .collect(),
        ops: (ops.iter().enumerate())
            .map(|(i, &(name, inputs))| Op::new(name, 1.0, inputs.to_vec(), vec![i]))
            .collect(),
        steps,
        ..Trace::default()
    }
}

/// a -> b -> c -> d(a): a is produced by op 0 and read by op 3.
fn chain() -> Trace {
    unit_trace(
        &[100, 100, 100, 10],
        &[("a", &[]), ("b", &[0]), ("c", &[1]), ("d", &[0, 2])],
        vec![
            Step::Op(0),
            Step::Op(1),
            Step::Op(2),
            Step::Free(1),
            Step::Op(3),
            Step::Free(0),
            Step::Free(2),
            Step::Free(3),
        ],
    )
}

/// Swap a (storage 0) out after op 0, in from op `trigger`, back at op 3.
fn swap_a(trigger: usize) -> Plan {
    vec![(
        0,
        Decision::Swap {
            after: 0,
            trigger,
            back: 3,
        },
    )]
}

const LINK: Link = Link {
    h2d: 100.0,
    d2h: 100.0,
};

#[test]
fn the_baseline_is_the_sum_of_operations_and_the_peak_is_counted() {
    let t = chain();
    let o = simulate(&t, u64::MAX, LINK, &Plan::new());
    assert_eq!(o.makespan, 4.0);
    assert_eq!(o.peak, 300);
    assert_eq!(
        o.peak,
        t.peak(),
        "the simulator and the independent count agree"
    );
    assert!(o.feasible && o.stall_s == 0.0);
    let tight = simulate(&t, 250, LINK, &Plan::new());
    assert!(!tight.feasible);
    assert_eq!(tight.worst, Some((2, 50)));
}

/// Hand-computed: swap a out after op 0 (1 s at 100 B/s, ends at 2), in from op 2's start
/// (t = 2, ends at 3), needed by op 3 at t = 3: no stall. At op 2, b, c and the arriving a
/// are all held: 300 bytes.
#[test]
fn a_hidden_swap() {
    let t = chain();
    let plan = swap_a(2);
    assert!(!simulate(&t, 299, LINK, &plan).feasible);
    let o = simulate(&t, 300, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!(o.makespan, 4.0);
    assert_eq!(o.stall_s, 0.0);
    assert_eq!((o.swapped_out, o.swapped_in), (100, 100));
}

/// Hand-computed: on a link of 20 B/s the copy of a out takes 5 s from op 0's end; its
/// in-trigger at op 1 (t = 1) finds it still leaving, so a stays and the copy is wasted. The
/// ops end at t = 4, but the copy engine's 5 s of this iteration's work must fit in an
/// iteration (the next one's copies queue behind it): 5 s, not 4.
#[test]
fn an_iteration_lasts_at_least_as_long_as_its_copies() {
    let t = chain();
    let slow = Link {
        h2d: 20.0,
        d2h: 20.0,
    };
    let o = simulate(&t, u64::MAX, slow, &swap_a(1));
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.swapped_out, o.swapped_in), (100, 0));
    assert_eq!(o.makespan, 5.0);
    assert_eq!(o.stall_s, 0.0);
    // Where the engine keeps up, the operations set the time.
    assert_eq!(simulate(&t, u64::MAX, LINK, &swap_a(1)).makespan, 4.0);
}

/// Hand-computed: with the swap-in triggered only at op 3 (t = 3), op 3 waits 1 s.
#[test]
fn a_late_trigger_stalls() {
    let t = chain();
    let plan = swap_a(3);
    let o = simulate(&t, 300, LINK, &plan);
    assert_eq!(o.makespan, 5.0);
    assert_eq!(o.stall_s, 1.0);
    assert!(matches!(
        o.stalls[0],
        Stall::SwapIn {
            op: 3,
            storage: 0,
            ..
        }
    ));
}

/// Hand-computed: a held in whole pages (100 B) whose swap copies its own 50 B: the late
/// swap-in of [`a_late_trigger_stalls`] waits 0.5 s, not 1, while the memory a frees and takes
/// back is still its 100 B (at op 2 under [`a_hidden_swap`]'s plan: 300 B).
#[test]
fn a_swap_copies_the_tensor_not_its_pages() {
    let mut t = chain();
    t.copied = t.storages.iter().map(|s| s.size).collect();
    t.copied[0] = 50;
    let o = simulate(&t, 300, LINK, &swap_a(3));
    assert_eq!(o.stall_s, 0.5);
    assert_eq!(o.makespan, 4.5);
    assert_eq!((o.swapped_out, o.swapped_in), (50, 50));
    assert!(!simulate(&t, 299, LINK, &swap_a(2)).feasible);
    assert!(simulate(&t, 300, LINK, &swap_a(2)).feasible);
}

/// Hand-computed: recomputing a re-runs op 0 (1 s) before op 3.
#[test]
fn a_recompute() {
    let t = chain();
    let plan = vec![(0, Decision::Recompute { after: 1, back: 3 })];
    let o = simulate(&t, 210, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!(o.makespan, 5.0);
    assert_eq!(o.recomputed_ops, 1);
    assert_eq!(o.peak, 210);
}

/// A recomputation's scratch (a replayed convolution's workspace) is held while it runs: with
/// 50 B of it, recomputing a before op 3 needs c, op 3's output d (the program allocated it
/// before the call whose hook recomputes), a and the workspace at once (260 B).
#[test]
fn a_recompute_holds_its_workspace_while_it_runs() {
    let mut t = chain();
    t.ops[0].scratch = 50;
    let plan = vec![(0, Decision::Recompute { after: 1, back: 3 })];
    let o = simulate(&t, 260, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!(o.makespan, 5.0);
    assert_eq!(o.peak, 260);
    assert!(!simulate(&t, 259, LINK, &plan).feasible);
    // Within the 210 B that suffice without it, the plan no longer fits.
    assert!(!simulate(&t, 210, LINK, &plan).feasible);
}

/// A second output of a recomputed operation: op 0 also makes m (40 B), which the program
/// frees at once (dropout's output beside its mask). Where the shim replays (`separate_outputs`)
/// the replay writes m aside, so recomputing a before op 3 holds c, op 3's output d, a and m's
/// 40 B at once (250 B); with DTR's semantics (outputs remade in place) it needs the 210 B of
/// `a_recompute`.
#[test]
fn a_recompute_writes_its_other_outputs_aside_where_the_shim_replays() {
    let mut t = chain();
    t.storages.push(Storage {
        size: 40,
        constant: false,
        producer: Some(0),
    });
    t.ops[0].outputs.push(4);
    t.steps.insert(1, Step::Free(4));
    let plan = vec![(0, Decision::Recompute { after: 1, back: 3 })];
    let o = simulate(&t, 210, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!(o.peak, 210);
    t.ops[0].separate_outputs = true;
    assert!(!simulate(&t, 249, LINK, &plan).feasible);
    let o = simulate(&t, 250, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.peak, o.makespan), (250, 5.0));
}

/// a (10 B) -> b (100 B); x (100 B) -> y (100 B); out(b, y). a is freed after op 1.
pub(crate) fn kept_source() -> Trace {
    unit_trace(
        &[10, 100, 100, 100, 10],
        &[
            ("a", &[]),
            ("b", &[0]),
            ("x", &[]),
            ("y", &[2]),
            ("out", &[1, 3]),
        ],
        vec![
            Step::Op(0),
            Step::Op(1),
            Step::Free(0),
            Step::Op(2),
            Step::Op(3),
            Step::Free(2),
            Step::Op(4),
            Step::Free(1),
            Step::Free(3),
            Step::Free(4),
        ],
    )
}

/// Hand-computed: b dropped after op 1 and recomputed before op 4 needs a, which the
/// program freed after op 1. Without an extension the plan is invalid; with a kept until
/// op 4, memory is a + x at op 2 (110), a + x + y at op 3 (210), a + y + b + out at op 4
/// (220), and op 4 waits 1 s for b.
#[test]
fn an_extension_keeps_a_freed_source() {
    let t = kept_source();
    assert_eq!(simulate(&t, u64::MAX, LINK, &Plan::new()).peak, 300);
    let drop_b = (1, Decision::Recompute { after: 1, back: 4 });
    let o = simulate(&t, 220, LINK, &vec![drop_b]);
    assert!(o.invalid && !o.feasible, "{o:?}");
    let o = simulate(
        &t,
        220,
        LINK,
        &vec![drop_b, (0, Decision::Extend { until: 4 })],
    );
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.peak, o.makespan, o.recomputed_ops), (220, 6.0, 1));
    assert!(
        !simulate(
            &t,
            219,
            LINK,
            &vec![drop_b, (0, Decision::Extend { until: 4 })]
        )
        .feasible
    );
    // Dropped as well, a costs nothing until op 4 recomputes it first (two re-runs):
    // y + a + b + out = 220 at op 4, x + y = 200 at op 3.
    let plan = vec![
        drop_b,
        (0, Decision::Extend { until: 4 }),
        (0, Decision::Recompute { after: 1, back: 4 }),
    ];
    let o = simulate(&t, 220, LINK, &plan);
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.peak, o.makespan, o.recomputed_ops), (220, 7.0, 2));
    let o = simulate(&t, 210, LINK, &plan);
    assert_eq!(o.worst, Some((4, 10)));
}

/// A plan that drops a storage nothing can recompute (no producer) and then needs it for a
/// recomputation: the replay ends, and says the plan is invalid (it once looped, laying out
/// the missing source again and again).
#[test]
fn a_source_nothing_can_recompute_makes_the_plan_invalid_not_a_hang() {
    let mut t = chain();
    t.storages[0].producer = None;
    t.storages[0].constant = true;
    t.ops[0].outputs.clear();
    let plan = vec![
        (0, Decision::Recompute { after: 1, back: 3 }),
        (1, Decision::Recompute { after: 1, back: 2 }),
    ];
    let o = simulate(&t, u64::MAX, LINK, &plan);
    assert!(o.invalid && !o.feasible, "{o:?}");
}

/// Passive mode on the chain, with anything allowed to leave (next access from a table).
fn passive_chain(evict: Evict, budget: u64) -> (Plan, Outcome) {
    passive_chain_on(evict, budget, LINK)
}

/// [`passive_chain`] over `link`; dropping or swapping, either where something reads again.
fn passive_chain_on(evict: Evict, budget: u64, link: Link) -> (Plan, Outcome) {
    let t = chain();
    let accesses: [&[usize]; 4] = [&[0, 1, 3], &[1, 2], &[2, 3], &[3]];
    let evictable = |s: usize, op: usize| -> Option<usize> {
        let next = accesses[s].iter().find(|&&x| x > op).copied();
        Some(next.unwrap_or(usize::MAX))
    };
    let ways = |_: usize, _: usize, back: usize| (back != usize::MAX, true);
    let passive = Passive {
        evict,
        evictable: &evictable,
        ways: Some(&ways),
        horizon: None,
        more: None,
        gone_from: None,
        cutoff: f64::INFINITY,
    };
    simulate_passive(&t, budget, link, &Vec::new(), &passive)
}

/// Hand-computed, the shim's online policy: a (100 B, made in 1 s) goes at op 2 as in the two
/// tests below. Over a 100 B/s link its copy out and back (2 s) costs more than its rebuild,
/// and it is dropped, as DTR drops it (5 s); over 1000 B/s (0.2 s) it is swapped: out from
/// t = 2 to 2.1, op 2 waits for that, and op 3 fetches it on demand (3.1 to 3.2): 4.2 s.
#[test]
fn the_online_policy_drops_or_swaps_by_which_costs_less() {
    let (evicted, o) = passive_chain_on(Evict::DtrOrSwap, 210, LINK);
    assert_eq!(
        evicted,
        vec![(0, Decision::Recompute { after: 1, back: 3 })]
    );
    assert_eq!((o.makespan, o.peak), (5.0, 210));
    let fast = Link {
        h2d: 1000.0,
        d2h: 1000.0,
    };
    let (evicted, o) = passive_chain_on(Evict::DtrOrSwap, 210, fast);
    let swap = Decision::Swap {
        after: 1,
        trigger: 3,
        back: 3,
    };
    assert_eq!(evicted, vec![(0, swap)]);
    assert!(o.feasible, "{o:?}");
    assert!((o.makespan - 4.2).abs() < 1e-9, "{o:?}");
    let again = simulate(&chain(), 210, fast, &evicted);
    assert_eq!((again.makespan, again.peak), (o.makespan, o.peak));
}

/// Hand-computed, DTR: at op 2 (c needs 100 B, 200 held, budget 210) b is in use, so a
/// goes (dropped after op 1) and op 3 recomputes it (1 s): c + a + d = 210 at op 3.
#[test]
fn passive_recompute_drops_and_recomputes_on_demand() {
    let (evicted, o) = passive_chain(Evict::Dtr, 210);
    assert_eq!(
        evicted,
        vec![(0, Decision::Recompute { after: 1, back: 3 })]
    );
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.makespan, o.peak, o.recomputed_ops), (5.0, 210, 1));
    let again = simulate(&chain(), 210, LINK, &evicted);
    assert_eq!((again.makespan, again.peak), (o.makespan, o.peak));
}

/// Hand-computed, LRU swap: a's swap-out starts at t = 2 and ends at 3, op 2 waits 1 s for
/// its memory; op 3 fetches a on demand (t = 4 to 5), 1 s more. The replay of the recorded
/// swap (out after op 1, in at op 3) is the same run.
#[test]
fn passive_swap_evicts_least_recently_used_and_fetches_on_demand() {
    let (evicted, o) = passive_chain(Evict::Lru, 210);
    assert_eq!(
        evicted,
        vec![(
            0,
            Decision::Swap {
                after: 1,
                trigger: 3,
                back: 3
            }
        )]
    );
    assert!(o.feasible, "{o:?}");
    assert_eq!((o.makespan, o.stall_s, o.peak), (6.0, 2.0, 210));
    let again = simulate(&chain(), 210, LINK, &evicted);
    assert_eq!((again.makespan, again.peak), (6.0, 210));
    // Nothing can go before the first operation: 300 bytes at op 2 cannot fit in 99.
    assert!(!passive_chain(Evict::Dtr, 99).1.feasible);
}

/// x -> y -> z -> out(z), then w(x, y): all three dropped, op 3 recomputes x, y, z in a
/// row. Dropped again after op 3, x goes once y is made and y once z is (the recomputation
/// is done with them): 210 bytes at most (two of them and op 3's output, allocated before the
/// call whose hook recomputes) instead of x + y + z + out = 310.
#[test]
fn a_source_dropped_again_goes_as_soon_as_the_recomputation_is_done_with_it() {
    let t = unit_trace(
        &[100, 100, 100, 10, 10],
        &[
            ("x", &[]),
            ("y", &[0]),
            ("z", &[1]),
            ("out", &[2]),
            ("w", &[0, 1]),
        ],
        (0..5).map(Step::Op).chain((0..5).map(Step::Free)).collect(),
    );
    let held = vec![
        (0, Decision::Recompute { after: 1, back: 4 }),
        (1, Decision::Recompute { after: 2, back: 4 }),
        (2, Decision::Recompute { after: 2, back: 3 }),
    ];
    let o = simulate(&t, u64::MAX, LINK, &held);
    assert!(o.feasible && !o.invalid, "{o:?}");
    // x, y and z recomputed for op 3 and held (310 with out); op 4 finds x and y
    // resident and adds w: 320.
    assert_eq!((o.peak, o.recomputed_ops), (320, 3));
    let mut early = held.clone();
    early.push((0, Decision::Recompute { after: 3, back: 4 }));
    early.push((1, Decision::Recompute { after: 3, back: 4 }));
    let o = simulate(&t, u64::MAX, LINK, &early);
    assert!(o.feasible && !o.invalid, "{o:?}");
    // At op 3 the most is out + x + y, then out + y + z; op 4 recomputes x and y again
    // (five re-runs) with z, out and its w alive: 320, at op 4 now.
    assert_eq!((o.peak, o.recomputed_ops), (320, 5));
    let at3 = simulate(&t, 210, LINK, &early);
    assert_eq!(
        at3.overs.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![4],
        "only op 4 goes over 210: {at3:?}"
    );
    let without = simulate(&t, 210, LINK, &held);
    assert!(without.overs.iter().any(|x| x.0 == 3), "{without:?}");
}

/// Op 1's output must wait for a's swap-out (ends at t = 2) to get memory.
#[test]
fn an_allocation_waits_for_memory() {
    let t = chain();
    let plan = swap_a(2);
    let o = simulate(&t, 100, LINK, &plan);
    assert!(
        o.stalls
            .iter()
            .any(|s| matches!(s, Stall::Memory { op: 1, .. })),
        "{o:?}"
    );
    assert!(o.makespan > 4.0);
}

/// a; g(a) a collective of 2 s on the links; b beside it; d(g): d waits for the collective.
fn with_collective() -> Trace {
    let mut t = unit_trace(
        &[100, 100, 100, 10],
        &[("a", &[]), ("g", &[0]), ("b", &[]), ("d", &[1, 2])],
        vec![
            Step::Op(0),
            Step::Op(1),
            Step::Op(2),
            Step::Op(3),
            Step::Free(0),
            Step::Free(1),
            Step::Free(2),
            Step::Free(3),
        ],
    );
    t.ops[1].time_s = 2.0;
    t.ops[1].concurrent = true;
    t
}

#[test]
fn a_collective_runs_beside_the_compute_and_its_readers_wait_for_it() {
    let t = with_collective();
    // a 0-1; g 1-3 on the links while b runs 1-2; d waits for g: 3-4.
    assert_eq!(t.compute_time(), 4.0);
    let out = simulate(&t, u64::MAX, LINK, &Vec::new());
    assert!(out.feasible);
    assert_eq!(out.makespan, 4.0);
    assert_eq!(out.stall_s, 0.0, "the program's own wait is no stall");
    // Serial, the same operations take 5 s.
    let mut serial = t.clone();
    serial.ops[1].concurrent = false;
    assert_eq!(serial.compute_time(), 5.0);
    assert_eq!(simulate(&serial, u64::MAX, LINK, &Vec::new()).makespan, 5.0);
}

#[test]
fn what_a_collective_reads_is_swapped_out_only_after_it_ends() {
    let t = with_collective();
    // a swapped out after g (issued at 1 s, it reads a until 3 s), back for nothing: its
    // 100 bytes take 1 s at 100 B/s from 3 s, so memory is back at 4 s, not 2 s.
    let plan = vec![(
        0,
        Decision::Swap {
            after: 1,
            trigger: 4,
            back: 4,
        },
    )];
    // d (10 bytes) finds a, g and b (300 bytes) held at 3 s within 305: it waits for a's
    // copy to end at 4 s and runs 4-5. A copy begun at 1 s would have freed a by 2 s.
    let out = simulate(&t, 305, LINK, &plan);
    assert!(out.feasible, "{out:?}");
    assert_eq!(out.swapped_out, 100);
    assert_eq!(out.makespan, 5.0, "{out:?}");
    let roomy = simulate(&t, 400, LINK, &plan);
    assert_eq!(
        roomy.makespan, 4.0,
        "with room, d does not wait for the copy"
    );
}

/// Hand-computed: a program's own copy takes its direction's copy engine behind the swaps
/// queued there. Under [`a_hidden_swap`]'s plan, a's copy in runs from t = 2 to 3: op 2 as a
/// host-to-device copy of the program's waits for it (1 s), so op 3 ends at 5, not 4. As a
/// device-to-host copy, op 1 waits for a's copy out (t = 1 to 2) instead: op 2 starts at 3,
/// a's copy in from then ends at 4, and op 3 ends at 5.
#[test]
fn the_programs_copies_queue_on_the_copy_engines() {
    use crate::model::Direction;
    let mut t = chain();
    t.ops[2].copy = Some(Direction::H2d);
    let o = simulate(&t, 300, LINK, &swap_a(2));
    assert!(o.feasible, "{o:?}");
    assert_eq!(o.makespan, 5.0);
    assert_eq!(o.stall_s, 1.0);
    assert!(matches!(o.stalls[..], [Stall::Engine { op: 2, secs }] if secs == 1.0));
    // Nothing queued: the copy runs when the program reaches it.
    assert_eq!(simulate(&t, u64::MAX, LINK, &Plan::new()).makespan, 4.0);
    let mut t = chain();
    t.ops[1].copy = Some(Direction::D2h);
    let o = simulate(&t, 300, LINK, &swap_a(2));
    assert_eq!(o.makespan, 5.0);
    assert!(matches!(o.stalls[..], [Stall::Engine { op: 1, secs }] if secs == 1.0));
}
