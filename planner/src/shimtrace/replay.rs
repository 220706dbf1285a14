//! Lineage and replayability: each call's lineage (what replaying it needs), which calls the
//! shim's executor can replay to recompute their outputs, and what such a replay covers.

use crate::trace::{Access, CopyDir, Event, Record, Replay, Touch};
use std::collections::HashMap;

/// Each call's lineage, by the call's `seq`: a `lineage` record describes the next call record of
/// its thread.
pub fn lineage(records: &[Record]) -> HashMap<u64, &Replay> {
    let mut waiting: HashMap<u64, &Replay> = HashMap::new();
    let mut out = HashMap::new();
    for r in records {
        match &r.event {
            Event::Lineage { replay } => {
                waiting.insert(r.tid, replay);
            }
            e if e.api().is_some() => {
                if let Some(l) = waiting.remove(&r.tid) {
                    out.insert(r.seq, l);
                }
            }
            _ => {}
        }
    }
    out
}

/// The cuDNN computations the shim's executor can replay to recompute their output (Capuchin's
/// recomputation, by the call's record and lineage: descriptors rebuilt from the recorded shapes,
/// scalars by value). Convolutions are replayed (Chen et al.'s and Capuchin's classic choice: a
/// convolution's output is rebuilt from its input and weight, which its own backward keeps
/// anyway): the legacy `cudnnConvolutionForward` with its recorded algorithm and a workspace of
/// the recorded size, and a backend execution through the program's own execution plan (alive,
/// see [`Replay::Backend`]) with a variant pack of the recorded unique ids and the current
/// addresses, when every tensor of it is read or written whole (the workspace aside). Kernels
/// are replayed too where the shim knew their roles exactly (every touch `r` or `w`, see the
/// shim's `hooks::launch`): the recorded parameter buffer with each operand's pointer replaced
/// by the current one. Batch normalisation's training forward pass is replayed for its `y` only
/// (see `BN_REBUILT`), and with the in-place kernels right after it as one chain (see
/// [`Converted::chains`](super::Converted::chains)). The rest (kernels whose roles are inferred,
/// library calls whose descriptors the lineage does not carry, host-to-device copies, whose
/// source the program may have changed) are never recomputed: their outputs are kept or swapped.
/// cuBLAS GEMMs with beta 0 are replayed too (see [`GEMMS_REPLAYED`]).
pub const REPLAYED: &[&str] = &[
    "cudnnActivationForward",
    "cudnnAddTensor",
    "cudnnSoftmaxForward",
    "cudnnConvolutionForward",
    "cudnnBackendExecute",
    "cudnnBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationForwardTrainingEx",
];

/// The cuBLAS calls the shim replays (with beta 0, host scalars, see [`Replay::Gemm`] and
/// [`Replay::Lt`]): a GEMM's output is rebuilt from its two operands, as a convolution's is. The
/// same function is called again with the recorded parameters through Marmoset's own handle.
/// Pointer-array batches are not: their operands are device memory the host cannot read.
pub const GEMMS_REPLAYED: &[&str] = &[
    "cublasSgemm_v2",
    "cublasDgemm_v2",
    "cublasGemmEx",
    "cublasSgemmEx",
    "cublasSgemmStridedBatched",
    "cublasDgemmStridedBatched",
    "cublasGemmStridedBatchedEx",
    "cublasLtMatmul",
];

/// cuBLASLt epilogues a replay repeats: none, bias, ReLU or GELU (alone or after a bias), each
/// of which writes D alone. Those with an auxiliary output or a bias gradient write two
/// outputs, and are not replayed.
const LT_EPILOGUES: &[u32] = &[1, 2, 4, 6, 32, 36];

/// cudaDataType values of 8-bit floats, whose matmuls read scale pointers the lineage does not
/// keep.
const FP8: &[i32] = &[28, 29];

/// Whether the shim can replay a cuBLAS call: one listed in [`GEMMS_REPLAYED`] with its lineage,
/// beta 0 (the output written from the operands alone), every operand read or written with a
/// known extent, one output.
fn gemm_replays(event: &Event, replay: Option<&Replay>) -> bool {
    let Event::Cublas {
        api,
        tensors,
        result: 0,
        ..
    } = event
    else {
        return false;
    };
    let operands = || tensors.iter().filter(|t| t.role != "workspace");
    let one_output = operands().filter(|t| t.access == Access::W).count() == 1
        && operands().all(|t| matches!(t.access, Access::R | Access::W));
    let lineage = match replay {
        Some(Replay::Gemm { beta, .. }) => *beta == 0.0 && api != "cublasLtMatmul",
        Some(Replay::Lt {
            beta,
            epilogue,
            layouts,
            ..
        }) => {
            *beta == 0.0
                && api == "cublasLtMatmul"
                && LT_EPILOGUES.contains(epilogue)
                && layouts.len() == 4
                && layouts.iter().all(|l| !FP8.contains(&l.ty))
        }
        _ => false,
    };
    lineage && one_output && GEMMS_REPLAYED.contains(&api.as_str())
}

/// Batch normalisation's training forward pass, replayed with no running statistics and no
/// saved statistics (cuDNN: both running pointers NULL, "not updated"; both saved pointers
/// NULL, "not saved"): it rebuilds `y` from `x`, `scale` and `bias` and nothing else, so the
/// running statistics it updates in place and the saved statistics it writes are neither
/// rebuilt nor sources (see [`replay_scope`]).
const BN_REBUILT: &[&str] = &["y"];
const BN_READ: &[&str] = &["x", "scale", "bias"];

fn is_batchnorm(api: &str) -> bool {
    matches!(
        api,
        "cudnnBatchNormalizationForwardTraining" | "cudnnBatchNormalizationForwardTrainingEx"
    )
}

/// What a replay of a replayable call covers, where that is less than the call: the
/// allocations it rebuilds and those it reads (by the tensors' roles and `base`, each
/// allocation's address when recorded). None: the replay rebuilds every write of the call and
/// reads everything the call reads (every replayed call but batch normalisation).
pub fn replay_scope(
    event: &Event,
    base: impl Fn(u64) -> Option<u64>,
) -> Option<(Vec<u64>, Vec<u64>)> {
    let Event::Cudnn {
        api,
        tensors,
        touches,
        ..
    } = event
    else {
        return None;
    };
    if !is_batchnorm(api) {
        return None;
    }
    let allocs = |roles: &[&str]| -> Vec<u64> {
        tensors
            .iter()
            .filter(|t| roles.contains(&t.role.as_str()))
            .filter_map(|t| {
                touches
                    .iter()
                    .find(|u| base(u.alloc).is_some_and(|b| b + u.offset == t.ptr))
                    .map(|u| u.alloc)
            })
            .collect()
    };
    Some((allocs(BN_REBUILT), allocs(BN_READ)))
}

/// Whether a call updates one allocation in place, every other touch a read; that
/// allocation, given each allocation's size. Replayed right after what rebuilt the
/// allocation whole, such a call leaves there what it left the first time, whatever it wrote
/// of it: the same contents before, the same reads. It is one of:
///
/// * a launch with a recorded parameter buffer that updates exactly (see the shim's
///   `hooks::launch`: PyTorch's elementwise kernel whose output is also an input, starting its
///   allocation and filling it exactly: `rw` with `bytes` the allocation's size);
/// * a launch with a recorded parameter buffer whose roles a reader settled (some touch a
///   read) and whose other touches are all on that allocation, `rw` of unknown extent
///   included (TensorFlow runs a kernel on its input's buffer as its output: a bias added
///   to a GEMM's output, a softmax over its scores). A launch left to the conservative rule
///   (every touch `rw`) never is: a pointer in device memory it reads may lead elsewhere;
/// * a cuDNN call its lineage replays whose output it reads (beta not 0: a bias added to a
///   convolution's output), updating exactly.
pub fn in_place_update(
    event: &Event,
    replay: Option<&Replay>,
    size: impl Fn(u64) -> Option<u64>,
) -> Option<u64> {
    let (touches, launch) = match (event, replay) {
        (
            Event::Launch {
                touches, result: 0, ..
            },
            Some(Replay::Kernel { .. }),
        ) => (touches, true),
        (
            Event::Cudnn { touches, .. },
            Some(Replay::Cudnn {
                beta: Some(beta), ..
            }),
        ) if *beta != 0.0 && cudnn_replays(event, replay) => (touches, false),
        _ => return None,
    };
    let mut rw = touches.iter().filter(|t| t.access != Access::R);
    let t = rw.next()?;
    let exact = rw.next().is_none()
        && t.access == Access::Rw
        && t.offset == 0
        && t.bytes > 0
        && size(t.alloc) == Some(t.bytes)
        && touches.iter().filter(|u| u.alloc == t.alloc).count() == 1;
    let settled = launch
        && touches
            .iter()
            .any(|u| u.access == Access::R && u.alloc != t.alloc)
        && touches
            .iter()
            .all(|u| u.access == Access::R || u.alloc == t.alloc)
        && touches
            .iter()
            .any(|u| u.alloc == t.alloc && u.access == Access::Rw)
        && size(t.alloc).is_some();
    (exact || settled).then_some(t.alloc)
}

/// A device-to-device copy of one whole allocation into another whole allocation of the same
/// size: (its source, its destination). The copy's result is its source's bytes, so copying
/// again after whatever rebuilt the source rebuilds the destination (autograd copies a batch
/// norm's output aside before an in-place activation whose backward needs its input, as SiLU's
/// and hardswish's do: see [`Converted::chains`](super::Converted::chains)).
pub fn whole_copy(event: &Event, size: impl Fn(u64) -> Option<u64>) -> Option<(u64, u64)> {
    let Event::Copy {
        dir: CopyDir::D2d,
        size: n,
        touches,
        result: 0,
        ..
    } = event
    else {
        return None;
    };
    let [s, d] = touches.as_slice() else {
        return None;
    };
    let whole = |t: &Touch| t.offset == 0 && t.bytes == *n && size(t.alloc) == Some(*n);
    (s.access == Access::R
        && d.access == Access::W
        && s.alloc != d.alloc
        && *n > 0
        && whole(s)
        && whole(d))
    .then_some((s.alloc, d.alloc))
}

/// A kernel launch as its replay sees it: each `rw` touch on an allocation that held nothing
/// the program wrote before the launch (`fresh`: made and not yet written) becomes a write
/// (`w`) from its offset to the allocation's end (`size`). Whatever the kernel does with a
/// pointer into such memory, its result cannot depend on the old bytes (uninitialised memory
/// no correct program reads), so replaying it on fresh memory rebuilds every byte the program
/// may read of it: the write is detected as a first write, not assumed from the kernel's name.
/// An `rw` touch on memory that holds contents stays `rw` (a possible in-place update: the
/// launch is then never replayed). Other events, and launches with no such touch, come back
/// unchanged.
pub fn first_writes<'a>(
    event: &'a Event,
    fresh: impl Fn(u64) -> bool,
    size: impl Fn(u64) -> Option<u64>,
) -> std::borrow::Cow<'a, Event> {
    use std::borrow::Cow;
    let Event::Launch { touches, .. } = event else {
        return Cow::Borrowed(event);
    };
    let first = |t: &Touch| t.access == Access::Rw && fresh(t.alloc) && size(t.alloc).is_some();
    if !touches.iter().any(first) {
        return Cow::Borrowed(event);
    }
    let mut out = event.clone();
    if let Event::Launch { touches, .. } = &mut out {
        for t in touches.iter_mut() {
            if let Some(size) = size(t.alloc).filter(|_| first(t)) {
                t.access = Access::W;
                t.bytes = size.saturating_sub(t.offset);
            }
        }
    }
    Cow::Owned(out)
}

/// Whether the shim can replay this call (see [`REPLAYED`]).
pub fn replays_in_shim(event: &Event, replay: Option<&Replay>) -> bool {
    if let Event::Cublas { .. } = event {
        return gemm_replays(event, replay);
    }
    if let (
        Event::Launch {
            touches, result: 0, ..
        },
        Some(Replay::Kernel { .. }),
    ) = (event, replay)
    {
        // Exact roles only: an `rw` touch may be a write the kernel does not declare, and a
        // replay would then repeat it on the current contents.
        return touches.iter().any(|t| t.access == Access::W)
            && touches.iter().all(|t| t.access != Access::Rw);
    }
    let Event::Cudnn {
        api,
        tensors,
        result: 0,
        ..
    } = event
    else {
        return false;
    };
    // The workspace (and batch normalisation's reserve space) is scratch: a replay brings its
    // own.
    let operands = || {
        tensors
            .iter()
            .filter(|t| t.role != "workspace" && t.role != "reserve")
    };
    let shaped = operands().all(|t| !t.dims.is_empty() && t.dims.len() == t.strides.len());
    if let Some(Replay::Backend { .. }) = replay {
        // Every operand read or written whole, by unique id (the beta of a convolution that
        // accumulates makes its output `rw`); something written.
        return api == "cudnnBackendExecute"
            && shaped
            && operands().all(|t| t.uid.is_some() && t.access != Access::Rw)
            && operands().any(|t| t.access == Access::W);
    }
    let Some(Replay::Cudnn {
        beta: Some(beta), ..
    }) = replay
    else {
        return false;
    };
    // With beta 0 the output is written whole from the inputs alone; otherwise the call reads
    // the output's old contents, which the recomputed version replaced (it is replayed only as
    // an update in place, after what wrote them: see `in_place_update`).
    *beta == 0.0 && cudnn_replays(event, replay)
}

/// Whether the shim replays this legacy cuDNN call, its output's old contents aside (beta):
/// its lineage (alpha, beta, data type and the operation's settings) recorded, every operand
/// shaped, and an operation the shim knows.
fn cudnn_replays(event: &Event, replay: Option<&Replay>) -> bool {
    let Event::Cudnn {
        api,
        tensors,
        algo,
        workspace,
        result: 0,
        ..
    } = event
    else {
        return false;
    };
    let Some(Replay::Cudnn {
        alpha: Some(_),
        beta: Some(_),
        dtype: Some(_),
        conv,
        activation,
        softmax,
        batchnorm,
    }) = replay
    else {
        return false;
    };
    let operands = || {
        tensors
            .iter()
            .filter(|t| t.role != "workspace" && t.role != "reserve")
    };
    let shaped = operands().all(|t| !t.dims.is_empty() && t.dims.len() == t.strides.len());
    shaped
        && match api.as_str() {
            "cudnnActivationForward" => activation.is_some(),
            "cudnnSoftmaxForward" => softmax.is_some(),
            "cudnnAddTensor" => true,
            // The recorded algorithm and workspace size, and x, w and y.
            "cudnnConvolutionForward" => {
                conv.is_some()
                    && algo.is_some()
                    && workspace.is_some()
                    && ["x", "w", "y"]
                        .iter()
                        .all(|r| operands().filter(|t| t.role == *r).count() == 1)
            }
            // The plain operation only (no fused add or activation: `z` absent), x, y, scale
            // and bias once each; the statistics' pointers are not replayed (see BN_REBUILT).
            api if is_batchnorm(api) => {
                batchnorm.as_ref().is_some_and(|b| b.ops == 0)
                    && operands().all(|t| t.role != "z" || t.ptr == 0)
                    && BN_REBUILT
                        .iter()
                        .chain(BN_READ)
                        .all(|r| operands().filter(|t| t.role == *r).count() == 1)
            }
            _ => false,
        }
}

/// Why the shim cannot replay this call (None: it can; see [`replays_in_shim`]), in words a
/// user can act on, for `marmoset plan --explain`. `event` is the call as its replay would see
/// it (after [`first_writes`]).
pub fn why_not_replayed(event: &Event, replay: Option<&Replay>) -> Option<&'static str> {
    if replays_in_shim(event, replay) {
        return None;
    }
    let failed = match event {
        Event::Launch { result, .. }
        | Event::Cudnn { result, .. }
        | Event::Cublas { result, .. } => *result != 0,
        _ => false,
    };
    Some(match event {
        _ if failed => "the call failed",
        Event::Copy {
            dir: CopyDir::H2d, ..
        } => "a copy from the host, whose memory the program may have changed since",
        Event::Copy { .. } => "a copy (not replayed)",
        Event::Memset { .. } => "a memset (not replayed)",
        Event::Collective { .. } => {
            "an NCCL collective: a replay would need every rank of its communicator"
        }
        Event::Launch { touches, .. } => match replay {
            Some(Replay::Kernel { .. }) if touches.iter().any(|t| t.access == Access::Rw) => {
                "a kernel that may update memory holding contents in place (an operand it may \
                 read and write, in memory written before)"
            }
            Some(Replay::Kernel { .. }) => "a kernel that writes nothing the shim can name",
            _ => "a kernel launch whose parameter buffer was not recorded",
        },
        Event::Cublas { api, .. } if !GEMMS_REPLAYED.contains(&api.as_str()) => {
            "a cuBLAS call the shim does not replay (pointer-array batches, GEMV, ...)"
        }
        Event::Cublas { .. } => match replay {
            Some(Replay::Gemm { beta, .. } | Replay::Lt { beta, .. }) if *beta != 0.0 => {
                "a GEMM with beta not 0: it reads its output's old contents"
            }
            Some(Replay::Gemm { .. } | Replay::Lt { .. }) => {
                "a GEMM with a second output, an 8-bit type or an operand of unknown extent"
            }
            _ => "a cuBLAS call without its lineage",
        },
        Event::Cudnn { api, .. } => match replay {
            Some(Replay::Cudnn { beta: Some(b), .. }) if *b != 0.0 => {
                "a cuDNN call with beta not 0: it reads its output's old contents"
            }
            _ if api == "cudnnBackendExecute" => {
                "a backend execution with a tensor not read or written whole, or without its plan"
            }
            _ if !REPLAYED.contains(&api.as_str()) => {
                "a cuDNN call the shim does not replay (a backward pass, pooling, ...)"
            }
            _ => "a cuDNN call whose lineage lacks a descriptor's parameters",
        },
        _ => "not a call that computes",
    })
}
