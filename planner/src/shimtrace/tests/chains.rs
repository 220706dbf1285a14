//! Chains: a replayed call and the in-place or elementwise kernels right after it as one
//! operation (a batch norm and what follows it).

use super::*;

/// How the calls after a batch norm look in [`bn_program`].
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// `y += identity`, then `relu_(y)`: ResNet's third batch norm of a bottleneck.
    AddRelu,
    /// As `AddRelu`, the add's roles settled by its reader but its extent unknown (`rw` of 0
    /// bytes on y: TensorFlow's bias added on the buffer of its input).
    Forwarded,
    /// As `Forwarded`, the add writing the identity too (`rw`).
    ForwardedTwo,
    /// `relu_(y)`.
    Relu,
    /// Another operation between the batch norm and `relu_(y)`.
    Between,
    /// `relu_(y)` with its touch inferred (`rw`, extent unknown).
    Inferred,
    /// `z = y + identity` out of place (y freed right after), then `relu_(z)`.
    OutOfPlace,
    /// y copied aside (device to device) before `relu_(y)`; the reader reads the copy too (an
    /// in-place SiLU's backward reads its input).
    CopyAside,
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
            params: vec![0],
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
        let aside = 100 + i;
        if after == After::CopyAside {
            v.push(alloc(aside, 40));
            v.push(copy(
                CopyDir::D2d,
                40,
                vec![touch(y, 40, Access::R), touch(aside, 40, Access::W)],
            ));
        }
        if after == After::AddRelu {
            v.push(kernel_lineage());
            v.push(kernel(vec![
                touch(y, 40, Access::Rw),
                touch(5, 0, Access::R),
            ]));
        }
        if after == After::Forwarded || after == After::ForwardedTwo {
            let identity = if after == After::Forwarded {
                Access::R
            } else {
                Access::Rw
            };
            v.push(kernel_lineage());
            v.push(kernel(vec![
                touch(y, 0, Access::Rw),
                touch(y, 8, Access::R),
                touch(5, 0, identity),
            ]));
        }
        v.push(kernel_lineage());
        let extent = if after == After::Inferred { 0 } else { 40 };
        v.push(kernel(vec![touch(z, extent, Access::Rw)]));
        let mut reads = vec![
            touch(z, 0, Access::R),
            touch(sm, 0, Access::R),
            touch(si, 0, Access::R),
            touch(x, 0, Access::R),
            touch(out, 40, Access::W),
        ];
        if after == After::CopyAside {
            reads.push(touch(aside, 0, Access::R));
            v.push(kernel(reads));
            v.push(free(aside));
        } else {
            v.push(kernel(reads));
        }
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
    for (after, members) in [(After::AddRelu, 2), (After::Forwarded, 2), (After::Relu, 1)] {
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
        assert_eq!(named.contains(&identity), members == 2, "{named:?}");
        assert!(!t.ops[bn].inputs.contains(&y));
        assert_eq!(t.ops[bn].inputs.len(), 3 + (members == 2) as usize);
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
fn a_copy_aside_of_a_batch_norm_s_output_joins_its_chain_as_one_more_output() {
    let c = convert(&records(bn_program(After::CopyAside, 0.0), true)).unwrap();
    let t = &c.trace;
    let (bn, ys) = bn_of(&c);
    assert_eq!(ys.len(), 1, "one content of y: the chain's final one");
    // The copy, then relu_ on y, both members.
    assert!(matches!(
        c.chains[bn][..],
        [
            Member {
                replay: Some(Replay::Copy),
                ..
            },
            Member {
                replay: Some(Replay::Kernel { .. }),
                ..
            }
        ]
    ));
    assert_eq!(
        t.ops[bn].name,
        "cudnnBatchNormalizationForwardTrainingEx + 2 chained"
    );
    // The copy's destination is an output of the chain, which rebuilds it.
    let aside: Vec<usize> = (0..t.storages.len())
        .filter(|&s| t.ops[bn].outputs.contains(&s) && t.storages[s].size == 40)
        .filter(|&s| !ys.contains(&s))
        .collect();
    assert_eq!(aside.len(), 1, "{:?}", t.ops[bn].outputs);
    assert_eq!(t.storages[aside[0]].producer, Some(bn));
    // The reader right after reads both.
    assert!(t.ops[bn + 1].inputs.contains(&ys[0]));
    assert!(t.ops[bn + 1].inputs.contains(&aside[0]));
    // Time: the batch norm, the copy, relu_ (1 ms each).
    assert!((t.ops[bn].time_s - 3e-3).abs() < 1e-12);
    // Without the batch norm's replay (an unknown lineage), no chain: the copy is its own
    // operation, and its output has no producer.
    let mut events = bn_program(After::CopyAside, 0.0);
    events.retain(|e| {
        !matches!(
            e,
            Event::Lineage {
                replay: Replay::Cudnn { .. }
            }
        )
    });
    let c = convert(&records(events, true)).unwrap();
    let (bn, _) = bn_of(&c);
    assert!(c.chains[bn].is_empty());
    assert!(c.trace.ops.iter().any(|o| o.name == "cudaMemcpyAsync"));
}

#[test]
fn no_chain_without_an_in_place_update_right_after_a_replayable_write() {
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
        // y's versions: the batch norm's, then relu_'s. relu_ updating exactly (its roles
        // known) a y the batch norm rebuilds makes its version again after it (a recomputation
        // replays both: `memory::carried_out::slice`); one whose touch is inferred, or after a
        // batch norm no replay rebuilds (beta 1), leaves it with no producer.
        assert_eq!(ys.len(), 2);
        let last = *ys.last().unwrap();
        let relu = t
            .ops
            .iter()
            .position(|o| o.inplace.iter().any(|v| v.1 == last));
        assert!(relu.is_some_and(|r| r > bn));
        assert_eq!(
            t.storages[last].producer,
            if matches!(after, After::Between) {
                relu
            } else {
                None
            },
            "{beta}"
        );
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
    let c = convert_with(
        &records(bn_program(After::OutOfPlace, 0.0), true),
        false,
        None,
    )
    .unwrap();
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

/// Per iteration x, a convolution of x with the weights (1) into y (beta 0), then `bias`: the
/// bias (2) added to y in place by cudnnAddTensor with `beta` (`lineage`: recorded), then a
/// reader of y.
fn conv_bias_program(beta: f64, lineage: bool) -> Vec<Event> {
    use super::replay::conv_lineage;
    let mut v = Vec::new();
    for id in 1..=2 {
        v.push(alloc(id, 16));
        v.push(copy(CopyDir::H2d, 16, vec![touch(id, 16, Access::W)]));
    }
    for i in 0..3 {
        let (x, y, out) = (10 + 3 * i, 11 + 3 * i, 12 + 3 * i);
        for id in [x, y, out] {
            v.push(alloc(id, 40));
        }
        v.push(copy(CopyDir::H2d, 40, vec![touch(x, 40, Access::W)]));
        v.push(Event::Lineage {
            replay: conv_lineage(0.0, true),
        });
        v.push(cudnn(
            "cudnnConvolutionForward",
            vec![
                tensor("x", ptr(x), Access::R),
                tensor("w", ptr(1), Access::R),
                tensor("y", ptr(y), Access::W),
            ],
            vec![
                touch(x, 40, Access::R),
                touch(1, 16, Access::R),
                touch(y, 40, Access::W),
            ],
        ));
        if lineage {
            v.push(Event::Lineage {
                replay: conv_lineage(beta, false),
            });
        }
        let c = if beta == 0.0 { Access::W } else { Access::Rw };
        v.push(cudnn(
            "cudnnAddTensor",
            vec![tensor("a", ptr(2), Access::R), tensor("c", ptr(y), c)],
            vec![touch(2, 16, Access::R), touch(y, 40, c)],
        ));
        v.push(kernel(vec![
            touch(y, 0, Access::R),
            touch(out, 40, Access::W),
        ]));
        for id in [x, y, out] {
            v.push(free(id));
        }
    }
    v
}

#[test]
fn a_bias_added_in_place_by_cudnn_joins_the_convolution_that_wrote_its_output() {
    let c = convert(&records(conv_bias_program(1.0, true), true)).unwrap();
    let conv = (0..c.trace.ops.len())
        .find(|&o| c.trace.ops[o].name.starts_with("cudnnConvolutionForward"))
        .unwrap();
    assert_eq!(c.chains[conv].len(), 1, "{}", c.trace.ops[conv].name);
    assert!(matches!(
        c.chains[conv][0].replay,
        Some(Replay::Cudnn { beta: Some(b), .. }) if b == 1.0
    ));
    // y: one content, the chain's, rebuilt by it from x, the weights and the bias.
    let ys: Vec<usize> = c.trace.ops[conv]
        .outputs
        .iter()
        .copied()
        .filter(|&s| c.trace.storages[s].producer == Some(conv))
        .collect();
    assert_eq!(ys.len(), 1);
    assert_eq!(c.trace.ops[conv].inputs.len(), 3);
}

#[test]
fn no_chain_for_a_cudnn_update_whose_lineage_is_unknown() {
    let c = convert(&records(conv_bias_program(1.0, false), true)).unwrap();
    assert!(c.chains.iter().all(Vec::is_empty));
    // With beta 0 the sum is no update: it writes y whole and replays on its own.
    let c = convert(&records(conv_bias_program(0.0, true), true)).unwrap();
    assert!(c.chains.iter().all(Vec::is_empty));
    let add = (0..c.trace.ops.len())
        .find(|&o| c.trace.ops[o].name.starts_with("cudnnAddTensor"))
        .unwrap();
    assert!(
        c.trace.ops[add]
            .outputs
            .iter()
            .any(|&s| c.trace.storages[s].producer == Some(add))
    );
}

#[test]
fn an_update_of_unknown_extent_that_writes_elsewhere_too_joins_no_chain() {
    let c = convert(&records(bn_program(After::ForwardedTwo, 0.0), true)).unwrap();
    let (bn, ys) = bn_of(&c);
    assert!(c.chains[bn].is_empty());
    // y's versions: the batch norm's (recomputable alone), the add's, relu_'s (which follows
    // no replayable write), neither rebuilt.
    assert_eq!(ys.len(), 3);
    assert_eq!(c.trace.storages[ys[0]].producer, Some(bn));
    assert!(
        ys[1..]
            .iter()
            .all(|&y| c.trace.storages[y].producer.is_none())
    );
}
