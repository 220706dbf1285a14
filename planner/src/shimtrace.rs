//! A Marmoset trace as planner input: one steady iteration of the shim's call stream in the
//! planner's [`Trace`] model, as faithful as DTR's operator-level logs.
//!
//! - **The iteration** is found by [`crate::iteration`]: the repetition of the call stream, cut
//!   where the fewest bytes of live contents cross the cut (between an optimizer step and the
//!   next forward pass, wherever the program's calls happen to start), verified against the
//!   iteration before, and not the first.
//! - **Contents, not allocations.** A storage of the model is one content of one allocation:
//!   it needs memory from the call that writes it (Marmoset maps physical memory at the first
//!   touch) to its last read. Between a last read and the next full overwrite the allocation's
//!   bytes are dead and need no memory (a cuDNN output with beta 0, a memset or a copy covering
//!   the whole allocation overwrite it fully). Caffe's blobs, allocated once up front, thus live
//!   only while their contents do.
//! - **Roles** come from the trace: cuDNN tensors' `access` (beta 0: `w`, else `rw`), copies
//!   (source read, destination written), memsets (written). A cuDNN or cuBLASLt workspace is
//!   scratch: the library writes it before reading it within the call and nothing reads it
//!   after (the simulated GPU scribbles over cuDNN's), so it lives for its call only. Kernels do not say what they do with a
//!   pointer: every allocation a kernel's parameters point into is read *and may be written*
//!   (a new version, the old one gone), so a recomputation is only ever planned from sources
//!   that provably hold the bytes they held (the planner's version rule). A write that covers
//!   part of an allocation keeps the rest: it is a new version too.
//! - **Across iterations.** Contents live when the iteration starts (weights, optimizer state,
//!   inputs read before they are written) are constants, as in DTR's logs; what is live when it
//!   ends is what the next iteration will read (the same rule, one period on), kept resident.
//! - **Lineage.** A storage's producer is the call that wrote it; host-to-device copies read
//!   host memory the program may have changed since, so their contents have no producer (they
//!   can be swapped, never recomputed).
//! - **Durations** are the `timing` records' device times (`MARMOSET_TRACE_TIMING=1`), measured
//!   from after Marmoset's own work for the call (a restore the call's stream waits for, the
//!   host waiting for room), so a trace recorded under a budget gives the program's times.
//!
//! The in-shim executor maps the plan back with [`Converted::ops`] (each operation's call within
//! the iteration) and [`Converted::storages`] (each storage's tensor and version).

use crate::iteration::{self, Call, Effect, Region, Steady, TensorId};
use crate::model::{Op, Step, Storage, Trace};
use crate::trace::{Access, Event, Record, Replay};
use std::collections::HashMap;

/// What one call does to one allocation, its touches merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Read,
    /// Written whole without being read: the old contents are dead before the call.
    Overwrite,
    /// Read and (or) partly written: a new version that depends on the old one.
    Update,
    /// A cuDNN workspace: written and read within the call only.
    Scratch,
}

impl Role {
    /// Whether the call needs the contents the allocation held before it.
    pub fn reads(self) -> bool {
        matches!(self, Role::Read | Role::Update)
    }
}

/// The roles of a call's touches, one per allocation, in the order first touched. `allocs`
/// gives each allocation's address and size.
pub fn roles(event: &Event, allocs: &HashMap<u64, (u64, u64)>) -> Vec<(u64, Role)> {
    let scratch: Vec<u64> = match event {
        Event::Cudnn { tensors, .. } | Event::Cublas { tensors, .. } => tensors
            .iter()
            .filter(|t| t.role == "workspace")
            .map(|t| t.ptr)
            .collect(),
        _ => Vec::new(),
    };
    // Per allocation: (reads, writes, a write covering it all, all touches are the workspace).
    let mut acc: Vec<(u64, bool, bool, bool, bool)> = Vec::new();
    for t in event.touches() {
        let Some(&(ptr, size)) = allocs.get(&t.alloc) else {
            continue;
        };
        let is_ws = scratch.contains(&(ptr + t.offset));
        let (r, w) = match t.access {
            Access::R => (true, false),
            Access::W => (false, true),
            Access::Rw => (true, true),
        };
        let full = w && t.access == Access::W && t.offset == 0 && t.bytes >= size;
        match acc.iter_mut().find(|a| a.0 == t.alloc) {
            Some(a) => {
                a.1 |= r;
                a.2 |= w;
                a.3 |= full;
                a.4 &= is_ws;
            }
            None => acc.push((t.alloc, r, w, full, is_ws)),
        }
    }
    acc.into_iter()
        .map(|(a, r, w, full, ws)| {
            let role = if ws {
                Role::Scratch
            } else if r && w {
                Role::Update
            } else if r {
                Role::Read
            } else if full {
                Role::Overwrite
            } else {
                Role::Update
            };
            (a, role)
        })
        .collect()
}

/// The calls of a trace with each call's record and the roles of its touches.
struct Stream<'a> {
    calls: Vec<Call>,
    records: Vec<&'a Record>,
    roles: Vec<Vec<(u64, Role)>>,
    /// Allocation id -> (call index of the allocation, call index of its free, size).
    life: HashMap<u64, (usize, usize, u64)>,
    /// Allocation id -> the calls that touch it, with their roles, in order.
    uses: HashMap<u64, Vec<(usize, Role)>>,
    /// Allocation id -> (address, size).
    allocs: HashMap<u64, (u64, u64)>,
}

impl<'a> Stream<'a> {
    fn new(records: &'a [Record]) -> Stream<'a> {
        let calls = iteration::calls(records);
        let records: Vec<&Record> = records.iter().filter(|r| r.event.api().is_some()).collect();
        debug_assert_eq!(calls.len(), records.len());
        let mut allocs: HashMap<u64, (u64, u64)> = HashMap::new();
        let mut life = HashMap::new();
        let mut uses: HashMap<u64, Vec<(usize, Role)>> = HashMap::new();
        let mut all = Vec::with_capacity(calls.len());
        for (i, r) in records.iter().enumerate() {
            match r.event {
                Event::Alloc {
                    alloc,
                    ptr,
                    size,
                    result: 0,
                    ..
                } => {
                    allocs.insert(alloc, (ptr, size));
                    life.insert(alloc, (i, usize::MAX, size));
                }
                Event::Free {
                    alloc: Some(a),
                    result: 0,
                    ..
                } => {
                    if let Some(l) = life.get_mut(&a) {
                        l.1 = i;
                    }
                }
                _ => {}
            }
            let ro = if r.event.result() == 0 {
                roles(&r.event, &allocs)
            } else {
                Vec::new()
            };
            for &(a, role) in &ro {
                uses.entry(a).or_default().push((i, role));
            }
            all.push(ro);
        }
        Stream {
            calls,
            records,
            roles: all,
            life,
            uses,
            allocs,
        }
    }

    /// Whether allocation `a` holds contents someone will read, just before call `pos`: it
    /// exists, was touched before, and its next touch reads (or there is none and it is never
    /// freed: kept, to be safe).
    fn live_at(&self, a: u64, pos: usize) -> bool {
        let Some(&(made, freed, _)) = self.life.get(&a) else {
            return false;
        };
        if made >= pos || freed < pos {
            return false;
        }
        let u = self.uses.get(&a).map_or(&[][..], |v| &v[..]);
        let k = u.partition_point(|&(i, _)| i < pos);
        if k == 0 {
            return false;
        }
        match u.get(k) {
            Some(&(_, role)) => role.reads(),
            None => freed == usize::MAX,
        }
    }

    /// Bytes allocated just before each call (index n: after the last).
    fn allocated_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for &(made, freed, size) in self.life.values() {
            diff[made + 1] += size as i128;
            diff[freed.min(n) + 1] -= size as i128;
        }
        prefix(&diff[..=n])
    }

    /// Bytes of live contents just before each call (index n: after the last).
    fn live_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for (a, u) in &self.uses {
            let (_, freed, size) = self.life[a];
            for w in u.windows(2) {
                if w[1].1.reads() {
                    // Live just before calls w[0].0 + 1 ..= w[1].0.
                    diff[w[0].0 + 1] += size as i128;
                    diff[w[1].0 + 1] -= size as i128;
                }
            }
            if freed == usize::MAX
                && let Some(&(last, _)) = u.last()
            {
                diff[last + 1] += size as i128;
            }
        }
        prefix(&diff[..=n])
    }
}

/// Running sums of a difference array.
fn prefix(diff: &[i128]) -> Vec<u64> {
    let mut cur = 0i128;
    diff.iter()
        .map(|d| {
            cur += d;
            cur.max(0) as u64
        })
        .collect()
}

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
/// (see `BN_REBUILT`), and with the exact in-place kernels right after it as one chain (see
/// [`Converted::chains`]). The rest (kernels whose roles are inferred, library calls whose
/// descriptors the lineage does not carry, host-to-device copies, whose source the program may
/// have changed) are never recomputed: their outputs are kept or swapped. cuBLAS GEMMs with beta
/// 0 are replayed too (see [`GEMMS_REPLAYED`]).
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

/// Whether a launch is an exact in-place update of one whole allocation (see the shim's
/// `hooks::launch`: PyTorch's elementwise kernel whose output is also an input, starting its
/// allocation and filling it exactly: `rw` with `bytes` the allocation's size), every other
/// touch a read, with a recorded parameter buffer: its allocation, given each allocation's
/// size. A conservative `rw` (bytes 0: extent unknown) is never exact.
pub fn exact_update(
    event: &Event,
    replay: Option<&Replay>,
    size: impl Fn(u64) -> Option<u64>,
) -> Option<u64> {
    let (
        Event::Launch {
            touches, result: 0, ..
        },
        Some(Replay::Kernel { .. }),
    ) = (event, replay)
    else {
        return None;
    };
    let mut rw = touches.iter().filter(|t| t.access != Access::R);
    let t = rw.next()?;
    let exact = rw.next().is_none()
        && t.access == Access::Rw
        && t.offset == 0
        && t.bytes > 0
        && size(t.alloc) == Some(t.bytes)
        && touches.iter().filter(|u| u.alloc == t.alloc).count() == 1;
    exact.then_some(t.alloc)
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
        algo,
        workspace,
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
        alpha: Some(_),
        beta: Some(beta),
        dtype: Some(_),
        conv,
        activation,
        softmax,
        batchnorm,
    }) = replay
    else {
        return false;
    };
    // With beta 0 the output is written whole from the inputs alone; otherwise the call reads
    // the output's old contents, which the recomputed version replaced.
    if *beta != 0.0 {
        return false;
    }
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

/// A demangled kernel name without `void `, its parameter list and past 100 characters.
pub fn short_kernel_name(name: &str) -> String {
    let name = name.strip_prefix("void ").unwrap_or(name);
    let head = name.rfind(">(").map_or(name, |i| &name[..=i]);
    let mut out: String = head.chars().take(100).collect();
    if out.len() < head.len() {
        out.push_str("...");
    }
    out
}

/// Where a storage of the model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub tensor: TensorId,
    /// The call (offset within the iteration) that wrote this content; `None` for contents
    /// carried in from the iteration before (the model's constants).
    pub written_by: Option<usize>,
}

/// The model of one iteration and how it maps back to the calls.
#[derive(Debug, Clone)]
pub struct Converted {
    pub trace: Trace,
    /// The steady iteration, or why none was found (the whole trace is modelled then).
    pub iteration: Result<Steady, String>,
    /// For each operation: its call's offset within the iteration, and that call's `seq`.
    pub ops: Vec<(usize, u64)>,
    pub storages: Vec<Origin>,
    /// Each operation's lineage (what replaying its call needs), where the trace has it.
    pub replays: Vec<Option<Replay>>,
    /// For each operation fused from a chain (a call whose replay rebuilds an allocation whole,
    /// then exact in-place updates of that allocation right after it, such as a batch norm's
    /// `y += identity` and ReLU; or a replayed call that reads the whole output of the one
    /// before it, which dies with it, such as an out-of-place `y + identity` after a batch
    /// norm): the calls after the first, in order; empty for every other operation. The
    /// operation is all of them: it ends with its last member's call, and a recomputation
    /// replays the first call and then each member.
    pub chains: Vec<Vec<Member>>,
    /// For each chain: the storages internal to it (the output of a call that only the next
    /// member, an elementwise kernel, reads, freed by the program right after it), each with
    /// the storage a recomputation rebuilds it in: that kernel's output, of the same size, the
    /// kernel then running in place. Never recomputed on their own (no producer).
    pub internal: Vec<Vec<(usize, usize)>>,
    /// Operations with no `timing` record (their time is 0).
    pub untimed: usize,
}

/// A call that joined the operation before it (see [`Converted::chains`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Its offset within the iteration, and its `seq`.
    pub call: usize,
    pub seq: u64,
    /// Its lineage (a kernel's parameter buffer).
    pub replay: Option<Replay>,
}

impl Converted {
    /// The offset within the iteration of operation `op`'s last call (its first call, unless
    /// it is a chain): what happens after the operation happens after this call.
    pub fn last_call(&self, op: usize) -> Option<usize> {
        let first = self.ops.get(op)?.0;
        Some(
            self.chains
                .get(op)
                .and_then(|c| c.last())
                .map_or(first, |m| m.call),
        )
    }
}

/// The cut with the fewest live bytes crossing it; on a tie, the fewest allocated bytes (after
/// the program's frees, not between a last read and a free), then the earliest.
fn choose_cut(live: &[u64], allocated: &[u64], region: Region) -> usize {
    region
        .cuts()
        .min_by_key(|&c| (live[c], allocated[c], c))
        .unwrap_or(region.start)
}

/// Builds the model of one steady iteration of a Marmoset trace (recorded with
/// `MARMOSET_TRACE_TIMING=1`), chains folded (see [`convert_with`]).
pub fn convert(records: &[Record]) -> Result<Converted, String> {
    convert_with(records, true)
}

/// [`convert`], with `fold` saying whether an elementwise kernel that reads a replayed call's
/// whole output, which dies with it, joins that call's chain (see [`Converted::internal`]).
/// Folded, the model is what the shim can carry out; unfolded, the kernel's output is rebuilt
/// from the dead output, which the planner may keep past its free (`Extend`, which the shim
/// does not do: such a recomputation stays resident). The shim plans the folded model; the
/// unfolded one's plans were predicted faster than they ran (MARMOSET_TEST_FOLD=0 plans it).
pub fn convert_with(records: &[Record], fold: bool) -> Result<Converted, String> {
    let mut times: HashMap<u64, f64> = HashMap::new();
    for r in records {
        if let Event::Timing { of, device_ms } = r.event {
            times.insert(of, device_ms * 1e-3);
        }
    }
    let replays = lineage(records);
    let kernel_names: HashMap<u64, &str> = records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Kernel { func, name } => Some((*func, name.as_str())),
            _ => None,
        })
        .collect();
    let s = Stream::new(records);
    if times.is_empty() {
        let used = s.roles.iter().any(|r| !r.is_empty());
        return Err(if used {
            "the trace has no device timings: record it with MARMOSET_TRACE_TIMING=1".into()
        } else {
            "the trace has no operations".into()
        });
    }
    let tokens: Vec<u64> = s.calls.iter().map(|c| c.token).collect();
    let (live, allocated) = (s.live_bytes(), s.allocated_bytes());
    let iteration = match iteration::detect(&tokens) {
        Some(region) => {
            iteration::steady_from(&s.calls, region, |r| choose_cut(&live, &allocated, r))
                .map_err(|d| d.to_string())
        }
        None => Err(format!(
            "no repeating iteration in {} calls (two iterations or more are needed)",
            s.calls.len()
        )),
    };
    let (ws, we) = match &iteration {
        Ok(st) => (st.start, st.start + st.period),
        Err(_) => (0, s.calls.len()),
    };
    let name = |a: u64| -> TensorId {
        match &iteration {
            Ok(st) => st.names.get(&a).copied(),
            Err(_) => None,
        }
        .unwrap_or(TensorId::Persistent {
            alloc: a,
            size: s.life.get(&a).map_or(0, |l| l.2),
        })
    };
    // Whether allocation `a`'s last contents in the iteration are read by the next one: what
    // held for its counterpart one period earlier, at this iteration's start.
    let live_after = |a: u64| -> bool {
        let Some(&(made, freed, _)) = s.life.get(&a) else {
            return false;
        };
        if freed < we {
            return false;
        }
        match (&iteration, name(a)) {
            // Made inside the repetition: its counterpart was made one period earlier.
            (Ok(st), TensorId::Rel { .. }) if made >= st.period => {
                match s.calls[made - st.period].effect {
                    Effect::Alloc { id, .. } => s.live_at(id, ws),
                    Effect::Free { .. } | Effect::Use => true,
                }
            }
            (Ok(_), _) => s.live_at(a, ws),
            (Err(_), _) => freed == usize::MAX,
        }
    };

    // The shim replays a recomputation into the tensor's own memory, from sources in place.
    let mut t = Trace {
        replay_in_place: true,
        ..Trace::default()
    };
    let mut origins: Vec<Origin> = Vec::new();
    let mut current: HashMap<u64, usize> = HashMap::new();
    // Storages never freed (live at the end), and each storage's last operation.
    let mut last_op: Vec<Option<usize>> = Vec::new();
    let new_storage = |t: &mut Trace,
                       origins: &mut Vec<Origin>,
                       last_op: &mut Vec<Option<usize>>,
                       a: u64,
                       constant: bool,
                       producer: Option<usize>,
                       written_by: Option<usize>| {
        t.storages.push(Storage {
            size: s.life.get(&a).map_or(0, |l| l.2),
            constant,
            producer,
        });
        origins.push(Origin {
            tensor: name(a),
            written_by,
        });
        last_op.push(producer);
        t.storages.len() - 1
    };
    // Contents carried in: the constants, in allocation order.
    let mut carried: Vec<u64> = s
        .life
        .keys()
        .copied()
        .filter(|&a| s.live_at(a, ws))
        .collect();
    carried.sort_by_key(|a| s.life[a].0);
    for a in carried {
        let st = new_storage(&mut t, &mut origins, &mut last_op, a, true, None, None);
        current.insert(a, st);
    }
    let mut op_calls = Vec::new();
    let mut op_replays = Vec::new();
    let mut chains: Vec<Vec<Member>> = Vec::new();
    let mut internal: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut untimed = 0;
    // Storages to free right after each operation.
    let mut scratch_of: Vec<Vec<usize>> = Vec::new();
    let base = |a: u64| s.allocs.get(&a).map(|x| x.0);
    let size_of = |a: u64| s.allocs.get(&a).map(|x| x.1);
    // The last operation, when a replay rebuilds allocations of it whole (their contents its
    // outputs): an exact in-place update of one of them right after it joins it (a chain).
    let mut open: Option<(usize, Vec<u64>)> = None;
    for i in ws..we {
        if s.roles[i].is_empty() {
            continue;
        }
        let r = s.records[i];
        let secs = times.get(&r.seq).copied();
        let lineage_of = replays.get(&r.seq).copied();
        if let Some((opi, rebuilt)) = &open
            && let Some(a) = exact_update(&r.event, lineage_of, size_of)
            && rebuilt.contains(&a)
        {
            // W, U1..Uk as one operation: the intermediate versions of `a` never exist in the
            // model; its content (W's output, produced by the chain) is the final one.
            let opi = *opi;
            t.ops[opi].time_s += secs.unwrap_or(0.0);
            for &(b, role) in &s.roles[i] {
                if b == a {
                    if let Some(&c) = current.get(&a) {
                        last_op[c] = Some(opi);
                    }
                    continue;
                }
                debug_assert_eq!(role, Role::Read);
                let c = match current.get(&b) {
                    Some(&c) => c,
                    None => {
                        let c =
                            new_storage(&mut t, &mut origins, &mut last_op, b, true, None, None);
                        current.insert(b, c);
                        c
                    }
                };
                if !t.ops[opi].inputs.contains(&c) && !t.ops[opi].outputs.contains(&c) {
                    t.ops[opi].inputs.push(c);
                }
                last_op[c] = Some(opi);
            }
            chains[opi].push(Member {
                call: i - ws,
                seq: r.seq,
                replay: lineage_of.cloned(),
            });
            continue;
        }
        let opi = t.ops.len();
        let secs_missing = secs.is_none();
        let secs = secs.unwrap_or_else(|| {
            untimed += 1;
            0.0
        });
        let name_of_op = match &r.event {
            Event::Launch { func, .. } => match kernel_names.get(func) {
                Some(n) => format!("kernel {}", short_kernel_name(n)),
                None => format!("kernel {func:#x}"),
            },
            e => e.api().unwrap_or("?").to_string(),
        };
        let replayable = replays_in_shim(&r.event, lineage_of);
        // What the replay rebuilds and reads (None: all the call writes and reads).
        let scope = if replayable {
            replay_scope(&r.event, base)
        } else {
            None
        };
        let rebuilds = |a: u64| replayable && scope.as_ref().is_none_or(|sc| sc.0.contains(&a));
        let source = |a: u64| scope.as_ref().is_none_or(|sc| sc.1.contains(&a));
        let mut op = Op::new(&name_of_op, secs, vec![], vec![]);
        // The shim's replay writes the outputs it does not rebuild aside.
        op.separate_outputs = true;
        let mut scratch = Vec::new();
        let mut whole = Vec::new();
        for &(a, role) in &s.roles[i] {
            let cur = current.get(&a).copied();
            match (role, cur) {
                (Role::Read, Some(c)) => op.inputs.push(c),
                (Role::Update, Some(c)) => {
                    // What the replay does not read (batch normalisation's running
                    // statistics) is no source of a recomputation; the operation still needs
                    // it resident, as the timeline reads `mutates` too.
                    if source(a) {
                        op.inputs.push(c);
                    }
                    op.mutates.push(c);
                }
                (Role::Read, None) => {
                    // Read before anything wrote it: what it held before (garbage or data the
                    // program put there some other way) is needed from the start.
                    let c = new_storage(&mut t, &mut origins, &mut last_op, a, true, None, None);
                    current.insert(a, c);
                    op.inputs.push(c);
                }
                (Role::Overwrite | Role::Update | Role::Scratch, _) => {
                    let producer = (rebuilds(a) && role != Role::Scratch).then_some(opi);
                    let c = new_storage(
                        &mut t,
                        &mut origins,
                        &mut last_op,
                        a,
                        false,
                        producer,
                        Some(i - ws),
                    );
                    last_op[c] = Some(opi);
                    op.outputs.push(c);
                    if role == Role::Scratch {
                        // cuDNN scribbles over whatever the workspace held.
                        scratch.push(c);
                        current.remove(&a);
                    } else {
                        current.insert(a, c);
                    }
                    if role == Role::Overwrite && producer.is_some() {
                        whole.push(a);
                    }
                }
            }
            if let Some(c) = cur
                && role.reads()
            {
                last_op[c] = Some(opi);
            }
        }
        if replayable {
            // A replay brings a workspace of its own, as large as the call's.
            op.scratch = scratch.iter().map(|&c| t.storages[c].size).sum();
        }
        t.ops.push(op);
        op_calls.push((i - ws, r.seq));
        op_replays.push(lineage_of.cloned());
        chains.push(Vec::new());
        internal.push(Vec::new());
        let muts = t.ops[opi].mutates.clone();
        for old in muts {
            let Some(a) = s.roles[i]
                .iter()
                .map(|x| x.0)
                .find(|a| current.get(a) == Some(&old))
            else {
                continue;
            };
            let new = new_storage(
                &mut t,
                &mut origins,
                &mut last_op,
                a,
                false,
                rebuilds(a).then_some(opi),
                Some(i - ws),
            );
            last_op[new] = Some(opi);
            t.ops[opi].inplace.push((old, new));
            current.insert(a, new);
        }
        scratch_of.push(scratch);
        // An exact elementwise kernel right after a replayed call, reading the call's whole
        // output, which dies with it, and writing an allocation of the same size whole (a batch
        // norm's `y` into an out-of-place `y + identity`; GELU's output into dropout's, whose
        // mask is a second whole output): both are one operation, and the dead output is
        // internal to it. The program frees it, so a recomputation rebuilds it in the kernel's
        // output of its size instead, and the kernel runs in place there (elementwise: each
        // output element from the inputs' elements at its index, as ATen's in-place kernels
        // run).
        if fold
            && replayable
            && matches!(r.event, Event::Launch { .. })
            && scope.is_none()
            && !whole.is_empty()
            && t.ops[opi].mutates.is_empty()
            && let Some((p, pwhole)) = &open
            && *p + 1 == opi
            && chains[*p].is_empty()
            && let Some(&(dead, sc)) = s.roles[i]
                .iter()
                .filter(|&&(a, role)| role == Role::Read && pwhole.contains(&a))
                .filter_map(|&(a, _)| Some((a, *current.get(&a)?)))
                .collect::<Vec<_>>()
                .first()
            && t.storages[sc].producer == Some(*p)
            && s.uses.get(&dead).and_then(|u| u.last()).map(|u| u.0) == Some(i)
            && s.life.get(&dead).is_some_and(|l| l.1 > i && l.1 < we)
            && let Some(&out) = whole.iter().find(|&&w| size_of(w) == size_of(dead))
            && let Some(&alias) = current.get(&out)
        {
            let p = *p;
            let w = t.ops.pop().expect("the operation just made");
            op_calls.pop();
            op_replays.pop();
            chains.pop();
            internal.pop();
            let w_scratch = scratch_of.pop().unwrap_or_default();
            if secs_missing {
                untimed -= 1;
            }
            for &o in &w.outputs {
                if t.storages[o].producer == Some(opi) {
                    t.storages[o].producer = Some(p);
                }
            }
            for lo in last_op.iter_mut() {
                if *lo == Some(opi) {
                    *lo = Some(p);
                }
            }
            t.storages[sc].producer = None;
            let op = &mut t.ops[p];
            op.time_s += w.time_s;
            for x in w.inputs {
                if x != sc && !op.inputs.contains(&x) && !op.outputs.contains(&x) {
                    op.inputs.push(x);
                }
            }
            op.outputs.extend(w.outputs);
            op.scratch += w.scratch;
            scratch_of[p].extend(w_scratch);
            chains[p].push(Member {
                call: i - ws,
                seq: r.seq,
                replay: lineage_of.cloned(),
            });
            internal[p].push((sc, alias));
            open = Some((p, whole));
            continue;
        }
        open = (!whole.is_empty()).then_some((opi, whole));
    }
    if t.ops.is_empty() {
        return Err("the iteration has no operations".into());
    }
    // A chain says so in its name (`marmoset plan --explain`).
    for (op, chain) in t.ops.iter_mut().zip(&chains) {
        if !chain.is_empty() {
            op.name = format!("{} + {} chained", op.name, chain.len());
        }
    }
    if untimed == t.ops.len() {
        return Err(
            "the iteration's calls have no device timings: record it with MARMOSET_TRACE_TIMING=1"
                .into(),
        );
    }
    // Frees: every content that is not the live last content of its allocation goes after its
    // last operation (dead contents cost nothing); in-place versions hand their memory on.
    let replaced: Vec<bool> = {
        let mut v = vec![false; t.storages.len()];
        for op in &t.ops {
            for &(old, _) in &op.inplace {
                v[old] = true;
            }
        }
        v
    };
    let keep: Vec<bool> = {
        let mut v = vec![false; t.storages.len()];
        for (&a, &c) in &current {
            v[c] = live_after(a);
        }
        v
    };
    let mut free_after: Vec<Vec<usize>> = vec![Vec::new(); t.ops.len()];
    for (c, lo) in last_op.iter().enumerate() {
        if replaced[c] || keep[c] {
            continue;
        }
        if let Some(o) = lo {
            free_after[*o].push(c);
        }
    }
    for (o, frees) in free_after.iter_mut().enumerate() {
        frees.extend(scratch_of[o].iter().copied());
        frees.sort_unstable();
        frees.dedup();
    }
    for (o, frees) in free_after.into_iter().enumerate() {
        t.steps.push(Step::Op(o));
        t.steps.extend(frees.into_iter().map(Step::Free));
    }
    mark_backward(&mut t);
    t.validate()
        .map_err(|e| format!("the iteration does not form a consistent model: {e}"))?;
    Ok(Converted {
        trace: t,
        iteration,
        ops: op_calls,
        storages: origins,
        replays: op_replays,
        chains,
        internal,
        untimed,
    })
}

/// No call says where the backward pass begins (DTR's logs annotate it). Inferred: after the
/// operation at which the memory load peaks, the end of the forward pass in training.
fn mark_backward(t: &mut Trace) {
    let mut used = t.constant_bytes();
    let (mut peak, mut at) = (used, 0);
    for step in &t.steps {
        match *step {
            Step::Op(i) => {
                used += t.ops[i]
                    .outputs
                    .iter()
                    .map(|&s| t.storages[s].size)
                    .sum::<u64>();
                if used > peak {
                    (peak, at) = (used, i);
                }
            }
            Step::Free(s) => used -= t.storages[s].size,
        }
    }
    for (i, op) in t.ops.iter_mut().enumerate() {
        op.backward = i > at;
    }
}

mod held;
pub use held::{as_held, held_and_links};

#[cfg(test)]
mod tests;
