//! Iteration detection and naming on hand-made call streams: the period found, tensors named by
//! position, divergences refused, and tokens blind to addresses and ids.

use super::*;
use crate::trace::{Access, Event, Touch};
use std::collections::HashMap;

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

/// Every call of `t` works (tokens with no calls behind them).
fn busy(t: &[u64]) -> Work {
    Work::from_flags(t.iter().map(|_| true))
}

/// Setup is 4 calls, an iteration 12; iteration i starts at call 4 + 12 i.
const P: usize = 12;
const fn it(i: usize) -> usize {
    4 + P * i
}

#[test]
fn finds_the_iteration_and_names_tensors_by_position() {
    let calls = program(4);
    let r = detect(&tokens(&calls), &Work::of(&calls)).expect("a repetition");
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
    let r = detect(&tokens(&calls), &Work::of(&calls)).unwrap();
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
    let r = detect(&tokens(&calls), &Work::of(&calls)).unwrap();
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
    let r3 = detect(&tokens(&calls3), &Work::of(&calls3)).unwrap();
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
    let r = detect(&t, &busy(&t)).unwrap();
    assert_eq!((r.period, r.start, r.end), (23, 2, 2 + 69));
    assert_eq!(detect(&[1, 2, 3, 4], &busy(&[1, 2, 3, 4])), None);
    assert_eq!(detect(&[], &busy(&[])), None);
}

/// Frees in a row repeat with any period, and are no iteration: a period must work.
#[test]
fn a_run_of_frees_is_no_iteration() {
    let mut calls: Vec<Call> = (0..8).map(|i| alloc(10 + i, 64 << i)).collect();
    calls.extend((0..8).map(|i| use_(300 + i, &[10 + i])));
    calls.extend((0..8).map(|i| free(10 + i, 64)));
    let t = tokens(&calls);
    assert_eq!(detect(&t, &Work::of(&calls)), None);
    assert_eq!(detect_at_end(&t, &Work::of(&calls)), None);
    assert_eq!(detect_period(&t, &Work::of(&calls), 1), None);
    // The same tokens as work repeat: the rule is the calls', not the tokens'.
    assert_eq!(detect_period(&t, &busy(&t), 1).map(|r| r.period), Some(1));
}

/// A free's token says what it frees (its size: where a program's first steps free otherwise,
/// detection sees it); as a kind knows it, a free is a free, so that a step's kind does not carry
/// the previous step's batch, of another shape.
#[test]
fn a_free_is_a_free_to_a_kind() {
    let sizes: HashMap<u64, u64> = [(1, 64), (2, 4096)].into();
    let free_with = |alloc: u64, size: Option<u64>, result: i32| Event::Free {
        api: "cudaFreeAsync".into(),
        ptr: 0x1000 * alloc,
        alloc: Some(alloc),
        size,
        stream: None,
        result,
        pooled: false,
    };
    let free = |alloc, size| free_with(alloc, size, 0);
    let t = |e: &Event| token(e, &sizes).unwrap();
    let k = |e: &Event| kind_token(&effect(e), t(e));
    assert_ne!(
        t(&free(1, None)),
        t(&free(2, None)),
        "detection sees the sizes"
    );
    assert_eq!(k(&free(1, None)), k(&free(2, None)));
    assert_eq!(k(&free(1, Some(64))), k(&free(2, Some(4096))));
    assert_ne!(
        k(&free_with(1, None, 1)),
        k(&free(1, None)),
        "a failed free is no free"
    );
    // Any other call is its token.
    let memset = Event::Memset {
        api: "cudaMemsetAsync".into(),
        ptr: 0,
        size: 64,
        stream: None,
        touches: vec![],
        result: 0,
    };
    assert_eq!(k(&memset), t(&memset));
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
    let r = detect(&tokens(&calls), &Work::of(&calls)).expect("a repetition");
    assert!(steady(&calls, r, r.start).is_ok(), "stale words are hints");
    let calls = run(false);
    let r = detect(&tokens(&calls), &Work::of(&calls)).expect("a repetition");
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

/// An iteration of 30 calls: 20 (`A`) then 10 (`B`), all different.
fn a() -> Vec<u64> {
    (100..120).collect()
}
fn b() -> Vec<u64> {
    (200..210).collect()
}

#[test]
fn one_iteration_and_the_next_first_calls_count_at_the_end_only() {
    let mut t = vec![1, 2];
    t.extend(a());
    t.extend(b());
    let mut more = t.clone();
    more.extend(&a()[..NEXT]);
    let r = detect(&more, &busy(&more)).expect("one iteration and the next's first calls");
    assert_eq!((r.start, r.period, r.end), (2, 30, 2 + 30 + NEXT));
    assert!(r.one_period());
    assert_eq!(
        r.cuts(),
        2..3,
        "cuts that leave the next's first NEXT calls"
    );
    assert_eq!(detect_at_end(&more, &busy(&more)), Some(r));
    // One call fewer: not yet.
    assert_eq!(
        detect(&more[..more.len() - 1], &busy(&more[..more.len() - 1])),
        None
    );
    // Not at the end: the program went on with other calls.
    more.extend([7, 8, 9]);
    assert_eq!(detect(&more, &busy(&more)), None);
    assert_eq!(detect_at_end(&more, &busy(&more)), None);
}

/// The first step of a loop makes something the others do not (a call `X` between its `A` and
/// `B`), so that the first two steps together recur at the third's start: over a stretch longer
/// than the step's own repetition, but for fewer calls. The repetition under way is the step's.
#[test]
fn the_repetition_under_way_is_the_one_its_latest_calls_repeat_longest() {
    let mut t = a();
    t.push(99);
    t.extend(b());
    for _ in 0..1 {
        t.extend(a());
        t.extend(b());
    }
    t.extend(&a()[..18]);
    let longest = detect(&t, &busy(&t)).unwrap();
    assert_eq!(
        longest.period, 61,
        "the first two steps, from the first's start"
    );
    let r = detect_at_end(&t, &busy(&t)).unwrap();
    assert_eq!((r.period, r.start, r.end), (30, 21, t.len()));
    assert_eq!(detect_period(&t, &busy(&t), 30), Some(r));
    assert_eq!(detect_period(&t, &busy(&t), 29), None);
}

/// Setup (a weight), then `iters` steps of 7 calls; the first ends with a call the others do
/// not make, after its loss (an optimizer's state made at its first step), so its calls are
/// out of step with the others': the repetition starts at the second. Each step reads (call
/// `3`, `4`) and frees the loss of the step before; `twice`: the second step's call `4` reads
/// another allocation made before the loop instead.
fn first_longer(iters: usize, twice: bool) -> Vec<Call> {
    let mut v = vec![alloc(1, 64), use_(7, &[1]), alloc(2, 16)];
    let mut next = 10;
    let mut prev = None;
    for i in 0..iters {
        let (x, l) = (next, next + 1);
        next += 2;
        v.push(alloc(x, 32));
        v.push(use_(1, &[1, x]));
        v.push(alloc(l, 16));
        if let Some(pl) = prev {
            v.push(use_(3, &[pl]));
            v.push(use_(4, &[if twice && i == 1 { 2 } else { pl }]));
            v.push(free(pl, 16));
        } else {
            v.push(use_(30, &[l]));
            v.push(use_(31, &[l]));
            v.push(use_(32, &[l]));
        }
        v.push(free(x, 32));
        if i == 0 {
            v.push(use_(90, &[1]));
        }
        prev = Some(l);
    }
    v
}

#[test]
fn what_a_first_step_out_of_step_made_stands_for_what_the_next_made() {
    let calls = first_longer(3, false);
    let r = detect(&tokens(&calls), &Work::of(&calls)).unwrap();
    assert_eq!((r.period, r.start), (7, 11), "{r:?}");
    // The second step reads and frees the first's loss, made where the third's call stands
    // for nothing alike: it stands for the loss the second made, as the third's touch has it.
    // The first pair verifies, and the plan's step is the third.
    let s = steady(&calls, r, r.start).expect("the first pair verifies");
    assert_eq!((s.index, s.start), (1, 18));
    let loss = TensorId::Rel {
        back: 1,
        k: 1,
        size: 16,
    };
    assert_eq!(s.names[&13], loss, "the second step's loss, one step back");
    // What the third step's calls touch by name, by offset: the loss it reads and frees.
    assert_eq!(s.touched[3], [loss]);
    assert_eq!(s.touched[5], [loss]);
    // Standing for a name another placeless allocation stands for already is a divergence.
    let calls = first_longer(3, true);
    let r = detect(&tokens(&calls), &Work::of(&calls)).unwrap();
    let e = steady(&calls, r, r.start).unwrap_err();
    assert_eq!((e.iteration, e.call), (1, 4), "{e}");
}

#[test]
fn one_full_iteration_is_verified_against_the_next_first_calls() {
    // Three full steps and the first calls of a fourth: at a cut leaving one whole step, that
    // step, verified over the calls of the next that are there.
    let calls = program(4);
    let r = Region {
        start: it(2),
        period: P,
        end: it(3) + 5,
    };
    assert!(r.one_period());
    let s = steady(&calls, r, it(2)).expect("one step and the next's first calls");
    assert_eq!((s.index, s.iterations, s.start), (0, 1, it(2)));
    assert_eq!(
        s.names[&14],
        TensorId::Rel {
            back: 1,
            k: 1,
            size: 16
        },
        "the previous step's activation"
    );
    // A divergence among those first calls is refused.
    let mut calls = program(4);
    calls[it(3) + 3].touches[0] = 2;
    let e = steady(&calls, r, it(2)).unwrap_err();
    assert_eq!((e.iteration, e.call), (1, 3), "{e}");
}

/// A loop of kernels over the layers' parameters (an optimizer's update, one weight and one
/// bias each) repeats inside an iteration; its calls name no allocation (a kernel's touches are
/// inferred from its parameter words), so nothing verifies it is an iteration.
#[test]
fn calls_that_name_no_allocation_verify_nothing() {
    let layers = |named: bool| {
        let mut v = vec![alloc(1, 64), alloc(2, 8)];
        for l in 0..12u64 {
            let (w, b) = (100 + 2 * l, 101 + 2 * l);
            v.push(alloc(w, 64));
            v.push(alloc(b, 8));
        }
        for l in 0..12u64 {
            for (t, id) in [(1, 100 + 2 * l), (2, 101 + 2 * l)] {
                let mut k = use_(t, &[id]);
                k.inferred = !named;
                v.push(k);
            }
        }
        v
    };
    let calls = layers(false);
    let r = detect_period(&tokens(&calls), &Work::of(&calls), 2).expect("the loop repeats");
    assert_eq!((r.start, r.period, r.end), (26, 2, 50));
    let e = steady(&calls, r, r.start).unwrap_err();
    assert!(e.what.contains("no call names an allocation"), "{e}");
    // Named, each layer's own weights differ: refused as well, for what it names.
    let calls = layers(true);
    let e = steady(&calls, r, r.start).unwrap_err();
    assert!(e.what.contains("stands where"), "{e}");
}

/// A loop inside each step (over attention heads: the same three calls four times) repeats
/// at the end of the stream while the second step runs it, but it ran in the first step too,
/// over as long a stretch, and ended: a loop inside an iteration. Once the third step begins,
/// the repetition under way is the step's.
#[test]
fn a_loop_that_ran_and_ended_before_is_inside_an_iteration() {
    let step = |t: &mut Vec<u64>| {
        t.push(1);
        for _ in 0..4 {
            t.extend([2, 3, 4]);
        }
        t.extend(5..30);
    };
    let mut t = vec![0];
    step(&mut t);
    t.push(1);
    t.extend([2, 3, 4, 2, 3, 4, 2, 3, 4]);
    assert_eq!(
        detect_period(&t, &busy(&t), 3).map(|r| r.period),
        Some(3),
        "it repeats"
    );
    assert_eq!(
        detect_at_end(&t, &busy(&t)),
        None,
        "a loop that ended before"
    );
    t.extend([2, 3, 4]);
    t.extend(5..30);
    t.push(1);
    t.extend(&[2, 3, 4, 2, 3, 4, 2, 3, 4, 2, 3, 4, 5, 6, 7, 8, 9][..NEXT]);
    let r = detect_at_end(&t, &busy(&t)).expect("the step");
    assert_eq!((r.period, r.start), (38, 1));
}

/// A first step out of step with the others (it makes its loss first, then a call the others do
/// not make) whose loss is made by a call alike, by chance, to the one a period later (the next
/// step's scratch, of the same size): one call alike is no repetition, so the loss has no place
/// of its own and stands for the loss the next step makes, as the step after reads it.
#[test]
fn a_call_alike_by_chance_in_a_first_step_out_of_step_places_nothing() {
    let mut v = vec![alloc(1, 64), use_(7, &[1]), use_(8, &[1])];
    let (mut next, mut prev) = (10, None);
    for i in 0..3 {
        let (t, x, l) = (next, next + 1, next + 2);
        next += 3;
        if i == 0 {
            v.extend([alloc(l, 16), use_(90, &[1]), alloc(t, 16), alloc(x, 32)]);
            v.extend([use_(1, &[x, t]), use_(2, &[l]), use_(30, &[1])]);
        } else {
            v.extend([alloc(t, 16), alloc(x, 32), use_(1, &[x, t]), alloc(l, 16)]);
            v.extend([
                use_(2, &[l]),
                use_(3, &[prev.unwrap()]),
                free(prev.unwrap(), 16),
            ]);
        }
        v.extend([free(t, 16), free(x, 32)]);
        prev = Some(l);
    }
    let r = detect(&tokens(&v), &Work::of(&v)).unwrap();
    assert_eq!((r.period, r.start), (9, 10), "{r:?}");
    let s = steady(&v, r, r.start).expect("the first pair verifies");
    assert_eq!(s.index, 1);
}

/// Weights made once (allocation 1), then `steps` steps of three calls: make x, use it with
/// the weights, free it.
fn steps(steps: u64) -> Vec<Call> {
    let mut v = vec![alloc(1, 64), use_(7, &[1])];
    for s in 0..steps {
        let x = 10 + s;
        v.extend([alloc(x, 32), use_(2, &[1, x]), free(x, 32)]);
    }
    v
}

#[test]
fn a_cut_as_quiet_as_the_quietest_call_will_do() {
    // The quietest call of the first step is its last (the free: x no longer in use), which the
    // calls seen cannot pass by NEXT; the step's first call holds as little (the weights).
    let calls = steps(3);
    let r = Region {
        start: 2,
        period: 3,
        end: 7,
    };
    assert!(r.one_period());
    assert_eq!(quietest(&calls, r), 4);
    assert!(!r.cuts().contains(&4));
    assert_eq!(r.cuts(), 2..3);
    assert!(quiet_cut(&calls, r));
    // From the step's second call (x in use there) nothing as quiet is a cut.
    let r = Region {
        start: 3,
        period: 3,
        end: 8,
    };
    assert_eq!(r.cuts(), 3..4);
    assert!(!quiet_cut(&calls, r));
}

#[test]
fn one_iteration_seen_once_names_what_it_makes_by_place() {
    let calls = steps(2);
    let s = once(&calls, 5, 3).expect("the second step alone");
    assert_eq!((s.start, s.period, s.index, s.iterations), (5, 3, 0, 1));
    assert_eq!(
        s.names[&11],
        TensorId::Rel {
            back: 0,
            k: 0,
            size: 32
        }
    );
    assert_eq!(s.names[&1], TensorId::Persistent { alloc: 1, size: 64 });
    assert_eq!(s.touched.len(), 3);
    assert!(once(&calls, 5, 4).is_err(), "past the calls");
    let bare = vec![use_(1, &[]), use_(2, &[])];
    assert!(once(&bare, 0, 2).is_err(), "no call names an allocation");
}
