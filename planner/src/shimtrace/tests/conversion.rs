//! The conversion of a trace into one steady iteration of the model: contents, what crosses
//! into the next iteration, names, and the traces it refuses.

use super::*;

/// Setup: weights W (1, 100 B) from the host, a Caffe-style blob B (2, 40 B) allocated
/// once. Each iteration: the input X is allocated (a new id) and copied in, A = conv(X, W)
/// is allocated (a new id), B = act(A) overwrites B whole, a kernel updates W from B, then
/// X and A are freed.
fn program(iters: u64) -> Vec<Event> {
    let mut v = vec![
        alloc(1, 100),
        copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
        alloc(2, 40),
    ];
    for i in 0..iters {
        let (x, a) = (10 + 2 * i, 11 + 2 * i);
        v.push(alloc(x, 10));
        v.push(copy(CopyDir::H2d, 10, vec![touch(x, 10, Access::W)]));
        v.push(alloc(a, 40));
        v.push(cudnn(
            "cudnnConvolutionForward",
            vec![],
            vec![
                touch(x, 10, Access::R),
                touch(1, 100, Access::R),
                touch(a, 40, Access::W),
            ],
        ));
        v.push(cudnn(
            "cudnnActivationForward",
            vec![],
            vec![touch(a, 40, Access::R), touch(2, 40, Access::W)],
        ));
        v.push(kernel(vec![
            touch(1, 0, Access::Rw),
            touch(2, 0, Access::Rw),
        ]));
        v.push(free(x));
        v.push(free(a));
    }
    v.push(free(1));
    v.push(free(2));
    v
}

#[test]
fn kernels_are_named_by_their_kernel_record() {
    let mut v = program(3);
    v.insert(
        0,
        Event::Kernel {
            func: 0x40,
            name: "void at::native::scale_kernel<float>(int, float*)".into(),
        },
    );
    let c = convert(&records(v, true)).unwrap();
    assert_eq!(
        c.trace.ops.last().unwrap().name,
        "kernel at::native::scale_kernel<float>"
    );
    assert_eq!(
        short_kernel_name(&format!("void {}(int)", "k".repeat(150))),
        format!("{}...", "k".repeat(100))
    );
}

#[test]
fn one_steady_iteration_of_contents() {
    let c = convert(&records(program(3), true)).unwrap();
    let s = c.iteration.as_ref().unwrap();
    assert_eq!((s.period, s.iterations, s.index), (8, 3, 2), "{s:?}");
    assert_eq!(c.untimed, 0);
    let t = &c.trace;
    let names: Vec<&str> = t.ops.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "cudaMemcpyAsync",
            "cudnnConvolutionForward",
            "cudnnActivationForward",
            "kernel 0x40"
        ]
    );
    assert_eq!(
        c.ops.iter().map(|o| o.0).collect::<Vec<_>>(),
        [1, 3, 4, 5],
        "each operation's call within the iteration"
    );
    assert!(t.ops.iter().all(|o| o.time_s == 1e-3));
    // The input's copy from the host takes the host-to-device copy engine; nothing else does.
    assert_eq!(
        t.ops.iter().map(|o| o.copy).collect::<Vec<_>>(),
        [Some(crate::model::Direction::H2d), None, None, None]
    );
    // Only the weights are carried in: B's contents are dead between iterations (the
    // kernel read them last; act overwrites them whole), X and A are new every time.
    let constants: Vec<TensorId> = (0..t.storages.len())
        .filter(|&s| t.storages[s].constant)
        .map(|s| c.storages[s].tensor)
        .collect();
    assert_eq!(
        constants,
        [TensorId::Persistent {
            alloc: 1,
            size: 100
        }]
    );
    // The input from the host can be swapped, never recomputed; so can A (the shim does
    // not replay convolutions) and B (its record has no lineage to replay it from).
    let x = t.ops[0].outputs[0];
    assert_eq!(t.storages[x].producer, None);
    assert_eq!(
        c.storages[x].tensor,
        TensorId::Rel {
            back: 0,
            k: 0,
            size: 10
        }
    );
    let a = t.ops[1].outputs[0];
    assert_eq!((t.storages[a].producer, t.storages[a].size), (None, 40));
    assert_eq!(t.ops[1].inputs, [x, 0]);
    let b = t.ops[2].outputs[0];
    assert_eq!(t.storages[b].producer, None);
    // The kernel: new versions of both (it may have written either).
    assert_eq!(t.ops[3].inputs, [0, b]);
    assert_eq!(t.ops[3].inplace.len(), 2);
    let (w2, b2) = (t.ops[3].inplace[0].1, t.ops[3].inplace[1].1);
    // Frees at the last read: X and A after act... X after conv, A after act, B's new
    // version right after the kernel; the new weights stay (the next iteration reads them).
    let frees: Vec<usize> = t
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Free(x) => Some(*x),
            _ => None,
        })
        .collect();
    assert_eq!(frees, [x, a, b2]);
    assert!(!frees.contains(&w2));
    // Peak: W + X + A at the convolution... W + A + B at act.
    assert_eq!(t.peak(), 100 + 40 + 40);
    assert!(t.ops[3].backward && !t.ops[1].backward);
}

#[test]
fn a_pooled_free_is_no_call_wherever_it_comes() {
    // The program above with its input X from the shim's pool, freed (by another thread) at a
    // place that changes from one iteration to the next.
    let mut v = Vec::new();
    let mut floating: Vec<Event> = Vec::new();
    for (i, e) in program(4).into_iter().enumerate() {
        match e {
            Event::Free { alloc: Some(x), .. } if x >= 10 && x % 2 == 0 => {
                let mut e = free(x);
                if let Event::Free { pooled, .. } = &mut e {
                    *pooled = true;
                }
                floating.push(e);
            }
            e => {
                v.push(e);
                // Each held free comes after a different number of calls (0, 1, 2, ...).
                if floating.len() == 1 && i % 3 == 0 {
                    v.append(&mut floating);
                }
            }
        }
    }
    v.append(&mut floating);
    let c = convert(&records(v, true)).unwrap();
    let s = c.iteration.as_ref().unwrap();
    assert_eq!(
        s.period, 7,
        "the iteration's calls, the input's free none of them"
    );
    assert_eq!(
        c.ops.iter().map(|o| o.0).collect::<Vec<_>>(),
        [1, 3, 4, 5],
        "each operation at its call within the iteration"
    );
    // The input's life ends where it was freed: no longer than to the next iteration.
    let x = c
        .storages
        .iter()
        .position(|o| matches!(o.tensor, TensorId::Rel { size: 10, .. }))
        .expect("the input is a storage");
    assert!(
        !c.trace.storages[x].constant,
        "not carried into the next iteration"
    );
}

#[test]
fn what_the_next_iteration_reads_stays() {
    // A batch prefetched before the current one is consumed: one is live at every point, so
    // whatever the cut, a batch made in one iteration is read (then freed) by the next.
    let mut v = vec![alloc(1, 100)];
    let mut prev = None;
    for i in 0..4 {
        let n = 10 + i;
        v.push(alloc(n, 8));
        v.push(copy(CopyDir::H2d, 8, vec![touch(n, 8, Access::W)]));
        let p = prev.unwrap_or(n);
        v.push(cudnn(
            "cudnnActivationForward",
            vec![],
            vec![touch(p, 8, Access::R), touch(1, 100, Access::W)],
        ));
        v.push(free(if prev.is_some() { p } else { 99 }));
        prev = Some(n);
    }
    let c = convert(&records(v, true)).unwrap();
    let s = c.iteration.as_ref().unwrap();
    assert_eq!(
        (s.period, s.start % 4),
        (4, 1),
        "cut before the prefetch: {s:?}"
    );
    let t = &c.trace;
    let carried: Vec<TensorId> = (0..t.storages.len())
        .filter(|&x| t.storages[x].constant)
        .map(|x| c.storages[x].tensor)
        .collect();
    assert_eq!(
        carried,
        [TensorId::Rel {
            back: 1,
            k: 0,
            size: 8
        }],
        "the weights are dead (overwritten whole before any read); the last batch is carried"
    );
    let made = t.ops[0].outputs[0];
    assert_eq!(
        c.storages[made].tensor,
        TensorId::Rel {
            back: 0,
            k: 0,
            size: 8
        }
    );
    assert!(
        !t.steps.contains(&Step::Free(made)),
        "the next batch is kept for the next iteration"
    );
    assert!(t.steps.contains(&Step::Free(0)), "the carried batch goes");
}

/// Random streams of calls over a few allocations (unknown ids, double frees, reads of
/// nothing, failed calls): an error or a valid model, never a panic.
#[test]
fn any_stream_converts_or_says_why() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let access = [Access::R, Access::W, Access::Rw];
    for _ in 0..300 {
        let block: Vec<Event> = (0..1 + next(12))
            .map(|_| {
                let a = 1 + next(6);
                let t = |next: &mut dyn FnMut(u64) -> u64| {
                    touch(1 + next(6), next(3) * 32, access[next(3) as usize])
                };
                match next(6) {
                    0 => alloc(a, 32 * (1 + next(3))),
                    1 => free(a),
                    2 => kernel(vec![t(&mut next), t(&mut next)]),
                    3 => copy(CopyDir::D2d, 64, vec![t(&mut next)]),
                    4 => cudnn("cudnnAddTensor", vec![], vec![t(&mut next), t(&mut next)]),
                    _ => Event::Sync {
                        api: "cudaDeviceSynchronize".into(),
                        stream: None,
                        result: next(2) as i32,
                    },
                }
            })
            .collect();
        let reps = 1 + next(4);
        let events: Vec<Event> = (0..reps).flat_map(|_| block.clone()).collect();
        if let Ok(c) = convert(&records(events, next(5) != 0)) {
            c.trace.validate().unwrap();
            assert_eq!(c.ops.len(), c.trace.ops.len());
            assert_eq!(c.storages.len(), c.trace.storages.len());
        }
    }
}

#[test]
fn untimed_unrepeated_and_empty_traces() {
    let e = convert(&records(program(3), false)).unwrap_err();
    assert!(e.contains("MARMOSET_TRACE_TIMING=1"), "{e}");
    // One iteration: no repetition; the whole trace is modelled, and says why.
    let c = convert(&records(program(1), true)).unwrap();
    assert!(c.iteration.as_ref().unwrap_err().contains("no repeating"));
    assert_eq!(c.trace.ops.len(), 5, "the weights' copy too");
    assert!(convert(&[]).is_err());
}

#[test]
fn an_allocation_no_call_touches_is_held_by_the_one_operation_within_its_life() {
    // program(), with two allocations no record touches (a library's workspace reached through
    // a pointer no record names): 64 B made right before the kernel and freed right after it,
    // and 32 B made before act and freed after the kernel, two operations later.
    let mut v = Vec::new();
    let mut n = 1000;
    for e in program(3) {
        let act = matches!(&e, Event::Cudnn { api, .. } if api == "cudnnActivationForward");
        let kernel = matches!(e, Event::Launch { .. });
        if act {
            v.push(alloc(n, 32));
        }
        if kernel {
            v.push(alloc(n + 1, 64));
            v.push(e);
            v.push(free(n + 1));
            v.push(free(n));
            n += 2;
            continue;
        }
        v.push(e);
    }
    let c = convert(&records(v, true)).unwrap();
    let t = &c.trace;
    let held = |name: &str, size: u64| {
        let op = t.ops.iter().find(|o| o.name == name).unwrap();
        op.outputs
            .iter()
            .copied()
            .filter(|&s| t.storages[s].size == size)
            .collect::<Vec<usize>>()
    };
    // The kernel holds the 64 B as scratch: nobody's source, nothing recomputes it, gone after.
    let ws = held("kernel 0x40", 64);
    assert_eq!(ws.len(), 1, "{:?}", t.ops);
    assert_eq!(t.storages[ws[0]].producer, None);
    assert!(t.ops.iter().all(|o| !o.inputs.contains(&ws[0])));
    // The 32 B spans two operations: the executor would release it after the first, and the
    // second could reach it through the pointer no record names, so neither holds it.
    assert!(held("cudnnActivationForward", 32).is_empty());
    assert!(held("kernel 0x40", 32).is_empty());
    // Peak: the kernel's W, B and its 64 B (W + A + B at act is 180 B).
    assert_eq!(t.peak(), 100 + 40 + 64);
    assert!(t.ops.iter().all(|o| o.name != "cudnnConvolutionForward"
        || o.outputs.iter().all(|&s| t.storages[s].size != 64)));
}

/// Each iteration a parameter P is allocated and filled where the trace does not show (a
/// kernel writing through pointers it was handed in device memory: FSDP's copy of an
/// all-gather out into the parameters), a kernel reads it with X into Y, P is freed, and a
/// last kernel reads Y. P is no constant: it lives from just before its first read to its
/// last, made by an operation of no duration that cannot be replayed, and Y's recomputation
/// after P's free has no source.
#[test]
fn contents_written_where_the_trace_does_not_show_live_from_their_first_read() {
    let mut v = vec![
        alloc(1, 100),
        copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
    ];
    for i in 0..3 {
        let (p, y) = (10 + 2 * i, 11 + 2 * i);
        v.push(alloc(p, 30));
        v.push(alloc(y, 50));
        v.push(kernel(vec![
            touch(y, 50, Access::W),
            touch(p, 0, Access::R),
            touch(1, 0, Access::R),
        ]));
        v.push(free(p));
        v.push(kernel(vec![
            touch(y, 0, Access::R),
            touch(1, 0, Access::Rw),
        ]));
        v.push(free(y));
    }
    let c = convert(&records(v, true)).unwrap();
    let t = &c.trace;
    let unseen: Vec<usize> = (0..t.ops.len())
        .filter(|&o| t.ops[o].name == UNSEEN_WRITE)
        .collect();
    assert_eq!(unseen.len(), 1, "{:?}", t.ops);
    let w = unseen[0];
    assert_eq!(t.ops[w].time_s, 0.0);
    let p = t.ops[w].outputs[0];
    assert_eq!(t.storages[p].size, 30);
    assert!(!t.storages[p].constant, "a content made in the iteration");
    assert_eq!(t.storages[p].producer, None, "nothing can replay it");
    // Right before its reader, on the same call.
    assert_eq!(c.ops[w].0, c.ops[w + 1].0);
    assert!(t.ops[w + 1].inputs.contains(&p));
    // Freed after its read, before the last kernel.
    let mut at = None;
    let mut freed_after = None;
    for s in &t.steps {
        match *s {
            Step::Op(o) => at = Some(o),
            Step::Free(x) if x == p => freed_after = at,
            _ => {}
        }
    }
    assert_eq!(freed_after, Some(w + 1));
    // Only the weights are carried in.
    assert_eq!(
        (0..t.storages.len())
            .filter(|&s| t.storages[s].constant)
            .count(),
        1
    );
    // Y dropped after its kernel and recomputed for the last one: P is gone by then.
    let y = t.ops[w + 1].outputs[0];
    let until = crate::memory::carried_out::valid_until(t);
    assert!(!crate::memory::carried_out::sourced(t, &until, y, w + 2));
}

/// One step of a program whose weights (1) and blob (2) were set up before: the input X
/// (`x`) copied in, a kernel over X and the blob, X freed; a `long` step has a second kernel.
fn step(x: u64, long: bool) -> Vec<Event> {
    let mut v = vec![
        alloc(x, 10),
        copy(CopyDir::H2d, 10, vec![touch(x, 10, Access::W)]),
        kernel(vec![touch(x, 10, Access::R), touch(2, 0, Access::Rw)]),
    ];
    if long {
        v.push(kernel(vec![touch(1, 0, Access::Rw)]));
    }
    v.push(free(x));
    v
}

#[test]
fn a_planned_trace_converts_at_the_period_its_tracker_followed() {
    // Steps long, short, long, short, long, then short ones: the longest repetition is of two
    // steps, the one the tracker follows at the end is of one (4 calls, 2 operations).
    let mut v = vec![
        alloc(1, 100),
        copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
        alloc(2, 40),
    ];
    for i in 0..5 {
        v.extend(step(10 + i, i % 2 == 0));
    }
    let first_short_run = v.len();
    for i in 5..9 {
        v.extend(step(10 + i, false));
    }
    let mut recs = records(v, true);
    // The records of the final run of short steps start here.
    let start = recs
        .iter()
        .filter(|r| r.event.api().is_some())
        .nth(first_short_run)
        .map(|r| r.seq)
        .unwrap();
    assert_eq!(convert(&recs).unwrap().trace.ops.len(), 5, "two steps");
    let seq = recs.last().unwrap().seq + 2;
    let plan = |ops: u64, reused: bool| Event::Plan {
        policy: "auto".into(),
        budget: 1,
        start,
        period: 4,
        ops,
        swaps: 0,
        recomputes: 0,
        feasible: true,
        predicted_ms: 1.0,
        planning_ms: 1.0,
        swap_bytes: 0,
        recompute_ms: 0.0,
        held: None,
        pcie_bps: None,
        workspace_cap: None,
        iteration_kind: Some(7),
        reused,
        steps: None,
        timed_out: false,
        unplanned: None,
        feedback: false,
        declined: false,
    };
    let at = |seq: u64, event: Event| Record {
        seq,
        t_ns: 0,
        tid: 1,
        event,
    };
    recs.push(at(
        seq,
        Event::Iteration {
            start,
            period: 4,
            calls: 16,
        },
    ));
    recs.push(at(seq + 1, plan(2, false)));
    let c = convert_as_planned(&recs).unwrap();
    assert!(c.iteration.is_ok());
    assert_eq!(
        c.trace.ops.len(),
        2,
        "one short step, as the shim planned it"
    );
    // The weights, allocated before the repetition, at their size.
    assert!(
        c.trace.storages.iter().any(|s| s.constant && s.size == 100),
        "{:?}",
        c.trace.storages
    );
    // Reused later: the fresh plan of its kind says how it was made.
    recs.push(at(seq + 2, plan(2, true)));
    assert_eq!(convert_as_planned(&recs).unwrap().trace.ops.len(), 2);
    // A plan record whose operations the model does not have: the longest repetition.
    let n = recs.len();
    recs[n - 2].event = plan(3, false);
    assert_eq!(convert_as_planned(&recs).unwrap().trace.ops.len(), 5);
}
