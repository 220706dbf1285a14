//! Which calls the shim can replay (kernels, convolutions, GEMMs, backend executions), and what
//! a replayed call needs in the model (its workspace).

use super::*;

#[test]
fn kernels_replay_only_with_exact_roles() {
    let lineage = Replay::Kernel {
        params: vec![0],
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

#[test]
fn a_first_write_through_an_inferred_touch_is_a_write() {
    let lineage = Replay::Kernel {
        params: vec![0],
        shared: 0,
    };
    let sizes = |a: u64| Some(a * 1024);
    // A kernel whose name says only that its output is not const: `rw`, extent unknown.
    let launch = kernel(vec![touch(1, 0, Access::R), touch(2, 0, Access::Rw)]);
    // The output held nothing yet: a first write, replayed on fresh memory.
    let seen = first_writes(&launch, |a| a == 2, sizes);
    assert!(replays_in_shim(&seen, Some(&lineage)));
    assert_eq!(seen.touches()[1].access, Access::W);
    assert_eq!(seen.touches()[1].bytes, 2048, "to the allocation's end");
    assert_eq!(seen.touches()[0].access, Access::R);
    // It held contents: maybe an in-place update, never replayed.
    let held = first_writes(&launch, |_| false, sizes);
    assert!(!replays_in_shim(&held, Some(&lineage)));
    assert!(matches!(held, std::borrow::Cow::Borrowed(_)));
    // Two inferred touches, one on contents: the launch may update them in place.
    let two = kernel(vec![touch(1, 0, Access::Rw), touch(2, 0, Access::Rw)]);
    assert!(!replays_in_shim(
        &first_writes(&two, |a| a == 2, sizes),
        Some(&lineage)
    ));
    assert!(replays_in_shim(
        &first_writes(&two, |_| true, sizes),
        Some(&lineage)
    ));
    // An allocation of unknown size is left as it was.
    assert!(!replays_in_shim(
        &first_writes(&launch, |a| a == 2, |_| None),
        Some(&lineage)
    ));
}

/// A legacy cuDNN call's lineage: alpha 1, `beta`, float; a convolution's settings where `conv`.
pub(super) fn conv_lineage(beta: f64, conv: bool) -> Replay {
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
