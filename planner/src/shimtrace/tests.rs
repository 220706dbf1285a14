//! The shim's traces as planner input: roles, lineage and replayability, against hand-made
//! records.

use super::*;
use crate::trace::{CopyDir, TensorArg, Touch};

fn touch(alloc: u64, bytes: u64, access: Access) -> Touch {
    Touch {
        alloc,
        offset: 0,
        bytes,
        access,
    }
}
fn tensor(role: &str, ptr: u64, access: Access) -> TensorArg {
    TensorArg {
        role: role.into(),
        ptr,
        dims: vec![1, 1, 1, 1],
        strides: vec![1, 1, 1, 1],
        access,
        uid: None,
    }
}
fn cudnn(api: &str, tensors: Vec<TensorArg>, touches: Vec<Touch>) -> Event {
    Event::Cudnn {
        api: api.into(),
        stream: Some(0),
        algo: Some(1),
        workspace: Some(0),
        tensors,
        touches,
        result: 0,
    }
}
fn alloc(id: u64, size: u64) -> Event {
    Event::Alloc {
        api: "cudaMallocAsync".into(),
        alloc: id,
        ptr: ptr(id),
        size,
        stream: Some(0),
        result: 0,
    }
}
fn free(id: u64) -> Event {
    Event::Free {
        api: "cudaFreeAsync".into(),
        ptr: ptr(id),
        alloc: Some(id),
        size: None,
        stream: Some(0),
        result: 0,
    }
}
fn ptr(id: u64) -> u64 {
    0x1000_0000 * id
}
fn copy(dir: CopyDir, size: u64, touches: Vec<Touch>) -> Event {
    Event::Copy {
        api: "cudaMemcpyAsync".into(),
        dst: 0,
        src: 0,
        size,
        dir,
        stream: Some(0),
        touches,
        result: 0,
    }
}
fn kernel(touches: Vec<Touch>) -> Event {
    Event::Launch {
        api: "cudaLaunchKernel".into(),
        func: 0x40,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        stream: Some(0),
        touches,
        result: 0,
    }
}
/// Records with sequence numbers, each call that touches memory followed by its timing.
fn records(events: Vec<Event>, timed: bool) -> Vec<Record> {
    let mut out = Vec::new();
    let mut seq = 0;
    for e in events {
        let has_touches = !e.touches().is_empty();
        out.push(Record {
            seq,
            t_ns: 0,
            tid: 1,
            event: e,
        });
        if has_touches && timed {
            out.push(Record {
                seq: seq + 1,
                t_ns: 0,
                tid: 1,
                event: Event::Timing {
                    of: seq,
                    device_ms: 1.0,
                },
            });
        }
        seq += 2;
    }
    out
}

#[test]
fn kernels_replay_only_with_exact_roles() {
    let lineage = Replay::Kernel {
        params: "00".into(),
        shared: 0,
    };
    // The shim knew the roles (an elementwise kernel: output written whole, input read).
    let exact = kernel(vec![touch(2, 64, Access::W), touch(1, 0, Access::R)]);
    assert!(replays_in_shim(&exact, Some(&lineage)));
    // Without the parameter buffer there is nothing to replay.
    assert!(!replays_in_shim(&exact, None));
    // An inferred touch may be an undeclared write: never replayed.
    let inferred = kernel(vec![touch(2, 64, Access::W), touch(1, 0, Access::Rw)]);
    assert!(!replays_in_shim(&inferred, Some(&lineage)));
    // Nothing written: nothing to recompute.
    let reads = kernel(vec![touch(1, 0, Access::R)]);
    assert!(!replays_in_shim(&reads, Some(&lineage)));
}

fn conv_lineage(beta: f64, conv: bool) -> Replay {
    Replay::Cudnn {
        alpha: Some(1.0),
        beta: Some(beta),
        dtype: Some(0),
        conv: conv.then(|| crate::trace::ConvParams {
            pads: vec![0, 0],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            mode: 1,
            compute: 0,
            groups: 1,
            math: 0,
        }),
        activation: None,
        softmax: None,
        batchnorm: None,
    }
}
fn workspace(ptr: u64) -> TensorArg {
    TensorArg {
        dims: vec![],
        strides: vec![],
        ..tensor("workspace", ptr, Access::Rw)
    }
}

#[test]
fn convolutions_replay_with_their_algorithm_and_parameters() {
    let conv = |y: Access| {
        cudnn(
            "cudnnConvolutionForward",
            vec![
                tensor("x", ptr(1), Access::R),
                tensor("w", ptr(2), Access::R),
                tensor("y", ptr(3), y),
                workspace(ptr(4)),
            ],
            vec![],
        )
    };
    // Beta 0: y written whole from x and w; the workspace is the replay's own.
    assert!(replays_in_shim(
        &conv(Access::W),
        Some(&conv_lineage(0.0, true))
    ));
    // Beta 1 reads y's old contents; without the convolution's parameters, or without the
    // call's algorithm, there is nothing to rebuild it from.
    assert!(!replays_in_shim(
        &conv(Access::Rw),
        Some(&conv_lineage(1.0, true))
    ));
    assert!(!replays_in_shim(
        &conv(Access::W),
        Some(&conv_lineage(0.0, false))
    ));
    assert!(!replays_in_shim(&conv(Access::W), None));
    let mut no_algo = conv(Access::W);
    if let Event::Cudnn { algo, .. } = &mut no_algo {
        *algo = None;
    }
    assert!(!replays_in_shim(&no_algo, Some(&conv_lineage(0.0, true))));
    // The backward convolutions are not replayed.
    let bwd = cudnn(
        "cudnnConvolutionBackwardData",
        vec![
            tensor("w", ptr(2), Access::R),
            tensor("dy", ptr(1), Access::R),
            tensor("dx", ptr(3), Access::W),
        ],
        vec![],
    );
    assert!(!replays_in_shim(&bwd, Some(&conv_lineage(0.0, true))));
}

fn cublas(api: &str, tensors: Vec<TensorArg>) -> Event {
    Event::Cublas {
        api: api.into(),
        stream: Some(0),
        m: 4,
        n: 4,
        k: 4,
        batch: 1,
        kernels: 1,
        tensors,
        touches: vec![],
        result: 0,
    }
}
fn gemm_lineage(beta: f64) -> Replay {
    Replay::Gemm {
        trans: [0, 0],
        types: [0, 0, 0],
        compute: 68,
        algo: -1,
        math: 0,
        alpha: 1.0,
        beta,
    }
}
fn lt_lineage(beta: f64, epilogue: u32, ty: i32) -> Replay {
    let l = crate::trace::LtLayout {
        ty,
        order: 0,
        rows: 4,
        cols: 4,
        ld: 4,
        batch: 1,
        stride: 0,
    };
    Replay::Lt {
        compute: 68,
        scale: 0,
        trans: [0, 0],
        epilogue,
        bias_type: None,
        layouts: vec![l; 4],
        algo: None,
        alpha: 1.0,
        beta,
    }
}

#[test]
fn gemms_replay_with_beta_zero_and_one_output() {
    let gemm = |c: Access| {
        cublas(
            "cublasGemmEx",
            vec![
                tensor("A", ptr(1), Access::R),
                tensor("B", ptr(2), Access::R),
                tensor("C", ptr(3), c),
            ],
        )
    };
    assert!(replays_in_shim(&gemm(Access::W), Some(&gemm_lineage(0.0))));
    // Beta 1 reads C; no lineage (device pointer mode) leaves nothing to call it with.
    assert!(!replays_in_shim(
        &gemm(Access::Rw),
        Some(&gemm_lineage(1.0))
    ));
    assert!(!replays_in_shim(&gemm(Access::W), Some(&gemm_lineage(1.0))));
    assert!(!replays_in_shim(&gemm(Access::W), None));
    // A classic GEMM's lineage is no cuBLASLt matmul's, and the reverse.
    assert!(!replays_in_shim(
        &gemm(Access::W),
        Some(&lt_lineage(0.0, 1, 0))
    ));
    // Pointer-array batches are not replayed.
    let batched = cublas(
        "cublasSgemmBatched",
        vec![tensor("C_array", ptr(3), Access::W)],
    );
    assert!(!replays_in_shim(&batched, Some(&gemm_lineage(0.0))));
    let lt = |epi_out: Option<Access>| {
        let mut t = vec![
            tensor("A", ptr(1), Access::R),
            tensor("B", ptr(2), Access::R),
            tensor("D", ptr(3), Access::W),
            tensor("bias", ptr(4), Access::R),
            workspace(ptr(5)),
        ];
        if let Some(a) = epi_out {
            t.push(tensor("aux", ptr(6), a));
        }
        cublas("cublasLtMatmul", t)
    };
    // The bias epilogue, the workspace the replay's own.
    assert!(replays_in_shim(&lt(None), Some(&lt_lineage(0.0, 4, 0))));
    assert!(replays_in_shim(&lt(None), Some(&lt_lineage(0.0, 36, 0))));
    assert!(!replays_in_shim(&lt(None), Some(&lt_lineage(1.0, 4, 0))));
    // GELU's auxiliary output (a second write) and a bias gradient are not replayed; nor are
    // 8-bit floats, whose scale pointers the lineage does not keep.
    assert!(!replays_in_shim(
        &lt(Some(Access::W)),
        Some(&lt_lineage(0.0, 164, 0))
    ));
    assert!(!replays_in_shim(&lt(None), Some(&lt_lineage(0.0, 512, 0))));
    assert!(!replays_in_shim(&lt(None), Some(&lt_lineage(0.0, 4, 28))));
}

#[test]
fn backend_executions_replay_through_their_plan_only_with_exact_roles() {
    let plan = Replay::Backend {
        plan: 0x5000,
        life: 1,
    };
    let with = |y: Access, y_uid: Option<i64>| {
        cudnn(
            "cudnnBackendExecute",
            vec![
                TensorArg {
                    uid: Some(1),
                    ..tensor("x", ptr(1), Access::R)
                },
                TensorArg {
                    uid: Some(2),
                    ..tensor("w", ptr(2), Access::R)
                },
                TensorArg {
                    uid: y_uid,
                    ..tensor("y", ptr(3), y)
                },
                workspace(ptr(4)),
            ],
            vec![],
        )
    };
    assert!(replays_in_shim(&with(Access::W, Some(3)), Some(&plan)));
    // An output the plan accumulates into (beta not 0) or a tensor outside the
    // convolution (`uidN`, rw): never replayed.
    assert!(!replays_in_shim(&with(Access::Rw, Some(3)), Some(&plan)));
    // Without each tensor's unique id a variant pack cannot be built; without the plan
    // (no lineage: it was made before Marmoset was loaded) there is nothing to execute.
    assert!(!replays_in_shim(&with(Access::W, None), Some(&plan)));
    assert!(!replays_in_shim(&with(Access::W, Some(3)), None));
    assert!(!replays_in_shim(
        &with(Access::W, Some(3)),
        Some(&conv_lineage(0.0, true))
    ));
    // Nothing written: nothing to recompute.
    assert!(!replays_in_shim(&with(Access::R, Some(3)), Some(&plan)));
}

/// Each iteration: X (new id) copied in, Y = conv(X, W) with a workspace allocation WS of
/// 64 B (allocated and freed around it), then a kernel reads Y and updates W.
#[test]
fn a_replayed_convolution_needs_its_workspace() {
    let run = |lineage: bool| {
        let mut v = vec![
            alloc(1, 100),
            copy(CopyDir::H2d, 100, vec![touch(1, 100, Access::W)]),
        ];
        for i in 0..3 {
            let (x, y, ws) = (10 + 3 * i, 11 + 3 * i, 12 + 3 * i);
            v.push(alloc(x, 10));
            v.push(copy(CopyDir::H2d, 10, vec![touch(x, 10, Access::W)]));
            v.push(alloc(y, 40));
            v.push(alloc(ws, 64));
            if lineage {
                v.push(Event::Lineage {
                    replay: conv_lineage(0.0, true),
                });
            }
            v.push(cudnn(
                "cudnnConvolutionForward",
                vec![
                    tensor("x", ptr(x), Access::R),
                    tensor("w", ptr(1), Access::R),
                    tensor("y", ptr(y), Access::W),
                    workspace(ptr(ws)),
                ],
                vec![
                    touch(x, 10, Access::R),
                    touch(1, 100, Access::R),
                    touch(y, 40, Access::W),
                    touch(ws, 64, Access::Rw),
                ],
            ));
            v.push(free(ws));
            v.push(kernel(vec![
                touch(y, 0, Access::R),
                touch(1, 0, Access::Rw),
            ]));
            v.push(free(x));
            v.push(free(y));
        }
        v.push(free(1));
        convert(&records(v, true)).unwrap()
    };
    let c = run(true);
    let conv = c
        .trace
        .ops
        .iter()
        .position(|o| o.name == "cudnnConvolutionForward")
        .unwrap();
    let t = &c.trace;
    // Y has the convolution as its producer; the workspace is scratch, and a replay needs
    // one as large.
    let y = t.ops[conv]
        .outputs
        .iter()
        .copied()
        .find(|&s| t.storages[s].size == 40)
        .unwrap();
    assert_eq!(t.storages[y].producer, Some(conv));
    assert_eq!(t.ops[conv].scratch, 64);
    // Without lineage: no producer, and no replay to need a workspace.
    let c = run(false);
    let t = &c.trace;
    let conv = t
        .ops
        .iter()
        .position(|o| o.name == "cudnnConvolutionForward")
        .unwrap();
    assert!(
        t.ops[conv]
            .outputs
            .iter()
            .all(|&s| t.storages[s].producer.is_none())
    );
    assert_eq!(t.ops[conv].scratch, 0);
}

#[test]
fn roles_from_the_trace() {
    let allocs: HashMap<u64, (u64, u64)> =
        [(1, (ptr(1), 64)), (2, (ptr(2), 64)), (3, (ptr(3), 32))].into();
    let conv = cudnn(
        "cudnnConvolutionForward",
        vec![
            tensor("x", ptr(1), Access::R),
            tensor("y", ptr(2), Access::W),
            tensor("workspace", ptr(3), Access::Rw),
        ],
        vec![
            touch(1, 64, Access::R),
            touch(2, 64, Access::W),
            touch(3, 32, Access::Rw),
        ],
    );
    assert_eq!(
        roles(&conv, &allocs),
        [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
    );
    // beta != 0: the output is read too.
    let acc = cudnn("cudnnAddTensor", vec![], vec![touch(2, 64, Access::Rw)]);
    assert_eq!(roles(&acc, &allocs), [(2, Role::Update)]);
    // In place (x and y the same allocation): the old contents are read.
    let inplace = cudnn(
        "cudnnActivationForward",
        vec![],
        vec![touch(2, 64, Access::R), touch(2, 64, Access::W)],
    );
    assert_eq!(roles(&inplace, &allocs), [(2, Role::Update)]);
    // A cuBLASLt workspace is scratch too (written before it is read, within the call).
    let gemm = Event::Cublas {
        api: "cublasLtMatmul".into(),
        stream: Some(0),
        m: 4,
        n: 4,
        k: 4,
        batch: 1,
        kernels: 1,
        tensors: vec![
            tensor("A", ptr(1), Access::R),
            tensor("D", ptr(2), Access::W),
            tensor("workspace", ptr(3), Access::Rw),
        ],
        touches: vec![
            touch(1, 64, Access::R),
            touch(2, 64, Access::W),
            touch(3, 32, Access::Rw),
        ],
        result: 0,
    };
    assert_eq!(
        roles(&gemm, &allocs),
        [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
    );
    // A write of part of an allocation keeps the rest: a new version of the old contents.
    let part = Event::Memset {
        api: "cudaMemsetAsync".into(),
        ptr: ptr(1),
        size: 32,
        stream: None,
        touches: vec![touch(1, 32, Access::W)],
        result: 0,
    };
    assert_eq!(roles(&part, &allocs), [(1, Role::Update)]);
    let d2d = copy(
        CopyDir::D2d,
        64,
        vec![touch(1, 64, Access::R), touch(2, 64, Access::W)],
    );
    assert_eq!(
        roles(&d2d, &allocs),
        [(1, Role::Read), (2, Role::Overwrite)]
    );
    // A kernel's pointer: read, and maybe written.
    let k = kernel(vec![touch(1, 0, Access::Rw)]);
    assert_eq!(roles(&k, &allocs), [(1, Role::Update)]);
    // Allocations the trace does not know are no touch at all.
    let unknown = kernel(vec![touch(9, 0, Access::Rw)]);
    assert!(roles(&unknown, &allocs).is_empty());
}

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

/// How the calls after a batch norm look in [`bn_program`].
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// `y += identity`, then `relu_(y)`: ResNet's third batch norm of a bottleneck.
    AddRelu,
    /// `relu_(y)`.
    Relu,
    /// Another operation between the batch norm and `relu_(y)`.
    Between,
    /// `relu_(y)` with its touch inferred (`rw`, extent unknown).
    Inferred,
    /// `z = y + identity` out of place (y freed right after), then `relu_(z)`.
    OutOfPlace,
}

fn bn_lineage(beta: f64) -> Replay {
    Replay::Cudnn {
        alpha: Some(1.0),
        beta: Some(beta),
        dtype: Some(0),
        conv: None,
        activation: None,
        softmax: None,
        batchnorm: Some(crate::trace::BatchNormParams {
            mode: 1,
            ops: 0,
            epsilon: 1e-5,
        }),
    }
}

fn kernel_lineage() -> Event {
    Event::Lineage {
        replay: Replay::Kernel {
            params: "00".into(),
            shared: 0,
        },
    }
}

/// Scale, bias, running mean and variance (1 to 4) and an identity (5) made up front; per
/// iteration x, then a batch norm of x into y (with saved statistics), `after`, a reader of y
/// and the statistics (the backward pass), frees.
fn bn_program(after: After, beta: f64) -> Vec<Event> {
    let mut v = Vec::new();
    for id in 1..=4 {
        v.push(alloc(id, 16));
        v.push(copy(CopyDir::H2d, 16, vec![touch(id, 16, Access::W)]));
    }
    v.push(alloc(5, 40));
    v.push(copy(CopyDir::H2d, 40, vec![touch(5, 40, Access::W)]));
    for i in 0..3 {
        let (x, y, sm, si, out) = (10 + 6 * i, 11 + 6 * i, 12 + 6 * i, 13 + 6 * i, 14 + 6 * i);
        // What the reader reads: y, or the out-of-place sum.
        let z = if after == After::OutOfPlace {
            15 + 6 * i
        } else {
            y
        };
        v.push(alloc(x, 40));
        v.push(copy(CopyDir::H2d, 40, vec![touch(x, 40, Access::W)]));
        for (id, size) in [(y, 40), (sm, 16), (si, 16), (out, 40)] {
            v.push(alloc(id, size));
        }
        let y_access = if beta == 0.0 { Access::W } else { Access::Rw };
        v.push(Event::Lineage {
            replay: bn_lineage(beta),
        });
        v.push(cudnn(
            "cudnnBatchNormalizationForwardTrainingEx",
            vec![
                tensor("x", ptr(x), Access::R),
                tensor("y", ptr(y), y_access),
                tensor("scale", ptr(1), Access::R),
                tensor("bias", ptr(2), Access::R),
                tensor("running_mean", ptr(3), Access::Rw),
                tensor("running_var", ptr(4), Access::Rw),
                tensor("saved_mean", ptr(sm), Access::W),
                tensor("saved_inv_var", ptr(si), Access::W),
            ],
            vec![
                touch(x, 40, Access::R),
                touch(y, 40, y_access),
                touch(1, 16, Access::R),
                touch(2, 16, Access::R),
                touch(3, 16, Access::Rw),
                touch(4, 16, Access::Rw),
                touch(sm, 16, Access::W),
                touch(si, 16, Access::W),
            ],
        ));
        if after == After::Between {
            v.push(cudnn(
                "cudnnActivationForward",
                vec![],
                vec![touch(5, 40, Access::R), touch(out, 40, Access::W)],
            ));
        }
        if after == After::OutOfPlace {
            v.push(alloc(z, 40));
            v.push(kernel_lineage());
            v.push(kernel(vec![
                touch(z, 40, Access::W),
                touch(y, 0, Access::R),
                touch(5, 0, Access::R),
            ]));
            v.push(free(y));
        }
        if after == After::AddRelu {
            v.push(kernel_lineage());
            v.push(kernel(vec![
                touch(y, 40, Access::Rw),
                touch(5, 0, Access::R),
            ]));
        }
        v.push(kernel_lineage());
        let extent = if after == After::Inferred { 0 } else { 40 };
        v.push(kernel(vec![touch(z, extent, Access::Rw)]));
        v.push(kernel(vec![
            touch(z, 0, Access::R),
            touch(sm, 0, Access::R),
            touch(si, 0, Access::R),
            touch(x, 0, Access::R),
            touch(out, 40, Access::W),
        ]));
        for id in [x, z, sm, si, out] {
            v.push(free(id));
        }
    }
    for id in 1..=5 {
        v.push(free(id));
    }
    v
}

/// The batch norm's operation, its y (the allocation's storages in the model) and `c`.
fn bn_of(c: &Converted) -> (usize, Vec<usize>) {
    let t = &c.trace;
    let bn = t
        .ops
        .iter()
        .position(|o| {
            o.name
                .starts_with("cudnnBatchNormalizationForwardTrainingEx")
        })
        .unwrap();
    let y_tensor = c.storages[t.ops[bn]
        .outputs
        .iter()
        .copied()
        .find(|&s| t.storages[s].size == 40)
        .unwrap()]
    .tensor;
    let ys = (0..t.storages.len())
        .filter(|&s| c.storages[s].tensor == y_tensor)
        .collect();
    (bn, ys)
}

#[test]
fn a_batch_norm_and_the_in_place_updates_after_it_are_one_operation() {
    for (after, members) in [(After::AddRelu, 2), (After::Relu, 1)] {
        let c = convert(&records(bn_program(after, 0.0), true)).unwrap();
        let t = &c.trace;
        let (bn, ys) = bn_of(&c);
        // One content of y in the model: the chain's final one, which the chain produces.
        assert_eq!(
            ys.len(),
            1,
            "intermediate versions of y are not in the model"
        );
        let y = ys[0];
        assert_eq!(t.storages[y].producer, Some(bn));
        assert!(t.ops[bn].outputs.contains(&y));
        assert_eq!(c.chains[bn].len(), members);
        assert_eq!(
            t.ops[bn].name,
            format!("cudnnBatchNormalizationForwardTrainingEx + {members} chained")
        );
        assert_eq!(
            c.last_call(bn),
            Some(c.chains[bn].last().unwrap().call),
            "what follows the chain follows its last call"
        );
        assert!(c.last_call(bn).unwrap() > c.ops[bn].0);
        assert!(
            c.chains[bn]
                .iter()
                .all(|m| matches!(m.replay, Some(Replay::Kernel { .. })))
        );
        // Time: the sum of its calls (1 ms each).
        assert!((t.ops[bn].time_s - 1e-3 * (1 + members) as f64).abs() < 1e-12);
        // Its inputs: x, scale, bias and (add_) the identity; not y itself.
        let tensor_of = |s: usize| c.storages[s].tensor;
        let named: Vec<TensorId> = t.ops[bn].inputs.iter().map(|&s| tensor_of(s)).collect();
        let identity = TensorId::Persistent { alloc: 5, size: 40 };
        assert_eq!(
            named.contains(&identity),
            after == After::AddRelu,
            "{named:?}"
        );
        assert!(!t.ops[bn].inputs.contains(&y));
        assert_eq!(
            t.ops[bn].inputs.len(),
            3 + (after == After::AddRelu) as usize
        );
        // The running statistics: updated in place (resident for the operation), but no
        // source of a recomputation, and their new versions have no producer.
        assert_eq!(t.ops[bn].mutates.len(), 2);
        for &m in &t.ops[bn].mutates {
            assert!(!t.ops[bn].inputs.contains(&m));
            assert!(matches!(
                tensor_of(m),
                TensorId::Persistent { alloc: 3 | 4, .. }
            ));
        }
        for &(_, new) in &t.ops[bn].inplace {
            assert_eq!(t.storages[new].producer, None);
        }
        // The saved statistics are written but not rebuilt by a replay.
        let saved: Vec<usize> = t.ops[bn]
            .outputs
            .iter()
            .copied()
            .filter(|&s| t.storages[s].size == 16)
            .collect();
        assert_eq!(saved.len(), 2);
        assert!(saved.iter().all(|&s| t.storages[s].producer.is_none()));
        // The reader comes right after the chain: no operation for the members.
        assert!(t.ops[bn + 1].inputs.contains(&y));
    }
}

#[test]
fn no_chain_without_an_exact_update_right_after_a_replayable_write() {
    for (after, beta) in [
        (After::Between, 0.0),
        (After::Inferred, 0.0),
        (After::Relu, 1.0),
    ] {
        let c = convert(&records(bn_program(after, beta), true)).unwrap();
        let t = &c.trace;
        let (bn, ys) = bn_of(&c);
        assert!(c.chains.iter().all(Vec::is_empty));
        assert_eq!(c.last_call(bn), Some(c.ops[bn].0));
        // y's versions: the batch norm's, then relu_'s, which no replay rebuilds.
        assert_eq!(ys.len(), 2);
        let last = *ys.last().unwrap();
        assert_eq!(t.storages[last].producer, None);
        // With beta 0 the batch norm's own y is recomputable (alone); with beta 1 it reads
        // the old y and is not.
        let first = ys[0];
        assert_eq!(
            t.storages[first].producer,
            (beta == 0.0).then_some(bn),
            "{}",
            beta
        );
    }
}

#[test]
fn an_out_of_place_sum_of_a_batch_norm_is_chained_with_the_batch_norm_inside() {
    // Unfolded: the sum and relu_ are a chain of their own, which reads y.
    let c = convert_with(&records(bn_program(After::OutOfPlace, 0.0), true), false).unwrap();
    let (bn, _) = bn_of(&c);
    assert!(c.chains[bn].is_empty());
    assert_eq!(c.chains[bn + 1].len(), 1);
    assert!(c.internal.iter().all(Vec::is_empty));
    let c = convert(&records(bn_program(After::OutOfPlace, 0.0), true)).unwrap();
    let t = &c.trace;
    let (bn, ys) = bn_of(&c);
    // BN, the sum, relu_(z): one operation; y lives inside it only.
    assert_eq!(c.chains[bn].len(), 2);
    assert_eq!(ys.len(), 1);
    let y = ys[0];
    let z = *t.ops[bn]
        .outputs
        .iter()
        .find(|&&s| s != y && t.storages[s].size == 40)
        .unwrap();
    assert_eq!(c.internal[bn], vec![(y, z)], "y is rebuilt in z");
    assert_eq!(
        t.storages[y].producer, None,
        "y cannot be rebuilt on its own"
    );
    assert!(t.ops[bn].outputs.contains(&y));
    // z: the chain's output, rebuilt by it; no scratch beyond the batch norm's workspace.
    assert_eq!(t.storages[z].producer, Some(bn));
    assert_eq!(t.ops[bn].scratch, 0);
    // Its sources: x, scale, bias, the identity; not y.
    assert_eq!(t.ops[bn].inputs.len(), 4);
    assert!(!t.ops[bn].inputs.contains(&y));
    assert!(t.ops[bn + 1].inputs.contains(&z));
    // Freed with the operation: y after it, as the program frees it.
    let at = t.steps.iter().position(|s| *s == Step::Op(bn)).unwrap();
    assert!(
        t.steps[at + 1..]
            .iter()
            .take_while(|s| matches!(s, Step::Free(_)))
            .any(|s| *s == Step::Free(y))
    );
    // Kept apart: y read again later (here: by another sum of y) is no chain's inside.
    let mut v = bn_program(After::OutOfPlace, 0.0);
    let frees: Vec<usize> = v
        .iter()
        .enumerate()
        .filter(
            |(_, e)| matches!(e, Event::Free { alloc: Some(a), .. } if [11, 17, 23].contains(a)),
        )
        .map(|(k, _)| k)
        .collect();
    for (n, k) in frees.into_iter().enumerate() {
        let y = [11, 17, 23][n];
        v[k] = kernel(vec![touch(5, 40, Access::W), touch(y, 0, Access::R)]);
    }
    v.retain(|e| {
        !matches!(
            e,
            Event::Free {
                alloc: Some(11 | 17 | 23),
                ..
            }
        )
    });
    for y in [11, 17, 23] {
        v.push(free(y));
    }
    let c = convert(&records(v, true)).unwrap();
    let (bn, _) = bn_of(&c);
    assert!(c.chains[bn].is_empty(), "{:?}", c.chains);
}
