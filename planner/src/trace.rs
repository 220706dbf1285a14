//! Marmoset's trace: JSON lines, one [`Record`] per line, schema version [`SCHEMA_VERSION`].
//! The shim fills these types; the `marmoset` command and the planner read them. The schema is
//! documented in `docs/trace-schema.md`; a change of meaning bumps the version.

pub mod hex;
mod reading;
mod run_files;

use serde::{Deserialize, Serialize};

pub use reading::{read, read_lines, read_with_cut};
pub use run_files::{
    new_run_id, run_in_header, run_of, sibling_files, sibling_path, traces_of_run,
};

pub const SCHEMA_VERSION: u32 = 1;

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Order of the calls as Marmoset saw them (unique, increasing; lines may be out of order
    /// when several threads call at once: sort by `seq`).
    pub seq: u64,
    /// Host nanoseconds since Marmoset started in this process.
    pub t_ns: u64,
    /// The calling thread (kernel thread id).
    pub tid: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// How a call uses memory it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    R,
    W,
    /// Read and/or written: what a kernel does with a pointer among its parameters.
    Rw,
}

/// A range of one allocation that a call touches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touch {
    /// The allocation's id (its `alloc` record).
    pub alloc: u64,
    pub offset: u64,
    pub bytes: u64,
    pub access: Access,
}

/// A tensor argument of a cuDNN call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorArg {
    /// x, w, y, dx, dw, dy, db, workspace, ...
    pub role: String,
    pub ptr: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dims: Vec<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strides: Vec<i64>,
    pub access: Access,
    /// A backend execution's tensor: its unique id in the variant pack (what a replay through
    /// the same execution plan pairs with the current address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
}

/// The direction of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CopyDir {
    H2d,
    D2h,
    D2d,
    H2h,
}

/// A convolution descriptor's parameters (`cudnnGetConvolutionNdDescriptor`, group count, math
/// type).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvParams {
    pub pads: Vec<i32>,
    pub strides: Vec<i32>,
    pub dilations: Vec<i32>,
    /// cudnnConvolutionMode_t.
    pub mode: i32,
    /// The compute type (cudnnDataType_t).
    pub compute: i32,
    pub groups: i32,
    /// cudnnMathType_t.
    pub math: i32,
}

/// An activation descriptor's parameters (`cudnnGetActivationDescriptor`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivationParams {
    /// cudnnActivationMode_t.
    pub mode: i32,
    /// cudnnNanPropagation_t.
    pub nan: i32,
    pub coef: f64,
}

/// A batch normalisation's parameters (`cudnnBatchNormalizationForwardTraining(Ex)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchNormParams {
    /// cudnnBatchNormMode_t.
    pub mode: i32,
    /// cudnnBatchNormOps_t (0, CUDNN_BATCHNORM_OPS_BN, for the plain call).
    pub ops: i32,
    pub epsilon: f64,
}

/// How the shim's allocator holds memory: tensors from `min_tensor` bytes take whole pages of
/// `gran` bytes each; smaller ones share a pool that never moves (`pool` bytes when it
/// planned), which comes off the budget, as does what the process held before Marmoset took
/// over (`preexisting`: the context, a framework's module variables; 0 in older traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub gran: u64,
    pub min_tensor: u64,
    pub pool: u64,
    #[serde(default)]
    pub preexisting: u64,
}

impl Held {
    /// What is left for the held model of a budget for the program's memory (the device's
    /// less `preexisting`): the pool comes off it.
    pub fn left_of(&self, budget: u64) -> u64 {
        budget.saturating_sub(self.pool)
    }

    /// What is left for the held model of a device budget (`--memory-limit`'s).
    pub fn left_of_device(&self, device: u64) -> u64 {
        self.left_of(device.saturating_sub(self.preexisting))
    }
}

/// Lineage: what replaying a call needs beyond its own record (its tensors' shapes, pointers
/// and algorithm are there): scalars by value and the parameters of descriptors the framework
/// may destroy right after the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Replay {
    /// A kernel launch: its parameters as one buffer, each at the offset `cuFuncGetParamInfo`
    /// gives (as `CU_LAUNCH_PARAM_BUFFER_POINTER` takes them), written in hex; dynamic shared
    /// memory.
    Kernel {
        #[serde(with = "hex::bytes")]
        params: Vec<u8>,
        shared: u64,
    },
    /// A memset: the value, and the width it is repeated at (1 or 4 bytes).
    Memset { value: u32, width: u8 },
    /// A device-to-device copy of a whole allocation, replayed as a chain's member (see
    /// `shimtrace::whole_copy`): its record says all it needs. The shim writes no such record;
    /// the planner names a copy's lineage so in a chain.
    Copy,
    /// A cuDNN computation: scaling parameters (read as the tensors' type), the tensors' data
    /// type, and the descriptors it used.
    Cudnn {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alpha: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        beta: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dtype: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conv: Option<ConvParams>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        activation: Option<ActivationParams>,
        /// Softmax: (algorithm, mode).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        softmax: Option<(i32, i32)>,
        /// Batch normalisation's training forward pass (optional: older traces lack it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        batchnorm: Option<BatchNormParams>,
    },
    /// A cuDNN backend execution: the execution plan handle it ran (the program's; a replay
    /// executes it again with a variant pack of its own) and `life`, which creation of that
    /// handle it was (1 for the first plan created at that address, 2 for the next, ...): a plan
    /// destroyed since, or another plan made at the same address, is never replayed.
    Backend { plan: u64, life: u64 },
    /// A cuBLAS GEMM (`cublasSgemm_v2`, `cublasGemmEx`, the strided batches, ...): what its
    /// record's operands (their shapes, leading dimensions and batch strides) do not say. Alpha
    /// and beta by value (the handle in host pointer mode), the operations on A and B, the data
    /// types of A, B and C, the compute type, the algorithm and the handle's math mode.
    Gemm {
        trans: [i32; 2],
        types: [i32; 3],
        compute: i32,
        algo: i32,
        math: i32,
        alpha: f64,
        beta: f64,
    },
    /// A cuBLASLt matmul: the matmul descriptor's attributes and the four matrix layouts (A, B,
    /// C, D), which the framework destroys right after the call; alpha and beta by value (host
    /// pointer mode); the algorithm as its opaque bytes, written in hex (absent: the call passed
    /// none).
    Lt {
        compute: i32,
        scale: i32,
        trans: [i32; 2],
        epilogue: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bias_type: Option<i32>,
        layouts: Vec<LtLayout>,
        #[serde(
            default,
            with = "hex::optional",
            skip_serializing_if = "Option::is_none"
        )]
        algo: Option<Vec<u8>>,
        alpha: f64,
        beta: f64,
    },
}

/// A cuBLASLt matrix layout's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LtLayout {
    pub ty: i32,
    pub order: i32,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch: i32,
    pub stride: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// The first line: what wrote the trace.
    Header {
        schema: u32,
        pid: u32,
        policy: String,
        marmoset: String,
        /// The run this process belongs to: every process started by one `marmoset run` (or
        /// under one first process loaded with the shim) shares it; see [`sibling_path`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run: Option<String>,
        /// The process's rank in a distributed job (`RANK`, as torchrun sets it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rank: Option<u32>,
    },
    /// A device allocation (plain, stream-ordered or from a pool).
    Alloc {
        api: String,
        alloc: u64,
        ptr: u64,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        result: i32,
    },
    /// A device free; `alloc` is absent when the pointer was not a known allocation.
    Free {
        api: String,
        ptr: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        alloc: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        result: i32,
        /// Returns an allocation of the shim's pool of tensors under `MARMOSET_MIN_TENSOR`:
        /// no call of the iteration (see [`crate::iteration::is_call`]), since no plan moves
        /// it and a framework may free it from another thread, anywhere among the calls of
        /// the thread that runs the step.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pooled: bool,
    },
    Copy {
        api: String,
        dst: u64,
        src: u64,
        size: u64,
        dir: CopyDir,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        touches: Vec<Touch>,
        result: i32,
    },
    Memset {
        api: String,
        ptr: u64,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        touches: Vec<Touch>,
        result: i32,
    },
    /// A kernel launch; touches are the allocations pointed to from its parameters.
    Launch {
        api: String,
        func: u64,
        grid: [u32; 3],
        block: [u32; 3],
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        touches: Vec<Touch>,
        result: i32,
    },
    /// A cuDNN call that computes, benchmarks or plans.
    Cudnn {
        api: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algo: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tensors: Vec<TensorArg>,
        touches: Vec<Touch>,
        result: i32,
    },
    /// A cuBLAS or cuBLASLt GEMM call: the library runs it as its own kernel(s) on `stream`.
    /// `kernels` is how many kernels it counts as (1, or 0 when m, n or the batch is 0 and
    /// nothing runs); A, B, C, D, bias, aux and workspace are in `tensors` with their accesses.
    Cublas {
        api: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        m: u64,
        n: u64,
        k: u64,
        batch: u64,
        kernels: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tensors: Vec<TensorArg>,
        touches: Vec<Touch>,
        result: i32,
    },
    /// An NCCL collective or point-to-point call (`ncclAllReduce`, `ncclSend`, ...) on `stream`:
    /// it reads its send buffer and writes its receive buffer (`touches`) together with the
    /// communicator's other ranks, so it is never replayed (a replay would need every rank).
    /// `bytes` is the call's buffer size as nccl-tests counts it (an all-reduce's per-rank
    /// buffer), `ranks` the communicator's size.
    Collective {
        api: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        bytes: u64,
        ranks: u32,
        touches: Vec<Touch>,
        result: i32,
    },
    /// A synchronisation: stream, event, device, or a stream waiting for an event.
    Sync {
        api: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u64>,
        result: i32,
    },
    /// Device duration of the call with sequence number `of` (MARMOSET_TRACE_TIMING=1).
    Timing { of: u64, device_ms: f64 },
    /// Marmoset moved a tensor to host memory (swap-out copy on `stream`, then unmapped).
    Evict {
        alloc: u64,
        bytes: u64,
        stream: u64,
        device_ms: f64,
    },
    /// Marmoset brought a tensor back (mapped, copied in on `stream`; the operation's stream
    /// waits for it). Its device time comes as a `timing` record with MARMOSET_TRACE_TIMING=1.
    Restore { alloc: u64, bytes: u64, stream: u64 },
    /// What replaying the next call record of the same thread needs (written just before the
    /// call is forwarded; evict and restore records may come between).
    Lineage { replay: Replay },
    /// A kernel's name (demangled), once per kernel handle, before its first `launch` record.
    Kernel { func: u64, name: String },
    /// The shim's tracker found and verified a repeating iteration: `period` calls, the steady
    /// one starting at the call record `start` (a sequence number), after `calls` calls.
    Iteration { start: u64, period: u64, calls: u64 },
    /// The shim's planner bridge planned that iteration with `policy` for `budget` bytes, in
    /// `planning_ms` of host time (on a background thread); the plan's decisions, and what the
    /// planner predicts for one guided iteration (`predicted_ms`, simulated on its model).
    Plan {
        policy: String,
        budget: u64,
        start: u64,
        period: u64,
        ops: u64,
        swaps: u64,
        recomputes: u64,
        feasible: bool,
        predicted_ms: f64,
        planning_ms: f64,
        /// Bytes the plan copies out per iteration, and the device time of its recomputations
        /// (both on the planner's timeline, simulated).
        #[serde(default)]
        swap_bytes: u64,
        #[serde(default)]
        recompute_ms: f64,
        /// How the allocator held memory when it planned: the model it planned is the trace
        /// as held (see `shimtrace::as_held`), so `marmoset plan` plans it too. (Absent in
        /// traces from before it was recorded.)
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held: Option<Held>,
        /// The PCIe bandwidths the plan assumed, bytes per second each way (the run's
        /// evictions measured them), so that `marmoset plan` assumes them too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pcie_bps: Option<(f64, f64)>,
        /// The iteration's kind: a hash of its calls, sizes included (absent in traces from
        /// before plans were kept per kind).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iteration_kind: Option<u64>,
        /// This kind's plan was planned before and is used again: no planning (the figures
        /// are the first planning's; `planning_ms` is the look-up's).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reused: bool,
        /// The search's steps (the times it asked whether to go on; absent in traces from
        /// before they were counted). The in-process search stops after a number of steps, so
        /// that the same trace and budget give the same plan whatever the host's speed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steps: Option<u64>,
        /// The host-time bound cut the search before its steps did: the plan depends on the
        /// host's speed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
        /// Bytes of the budget guided execution's memory feedback left unplanned (already off
        /// `budget`): a replan because the allocator needed more than a plan counted. Absent
        /// when none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unplanned: Option<u64>,
        /// The memory feedback made this plan: a replan of the iteration a plan guided, within
        /// less of the budget.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        feedback: bool,
        /// The memory feedback's plan did not predict an iteration shorter than the guiding
        /// plan's with the allocator's evictions: it never guided (the guiding plan stayed).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        declined: bool,
        /// The joint plan's cap on the workspace lent a convolution, which the plan chose
        /// (`memory::joint`). Absent where the executor lends none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace_cap: Option<u64>,
    },
    /// Planning found no plan (`why`): execution stays passive.
    NoPlan {
        policy: String,
        why: String,
        planning_ms: f64,
    },
    /// The program left the planned sequence at call `call` of the iteration (the record
    /// `at`, a sequence number): the rest of the iteration runs passively, and the planner replans.
    Divergence { at: u64, call: u64, period: u64 },
    /// Marmoset released a tensor's memory (or its host copy) without copying anything: its
    /// contents were dead (guided execution: the plan's next access overwrites them whole;
    /// or never written).
    Drop { alloc: u64, bytes: u64 },
    /// Marmoset rebuilt a dropped tensor by replaying the call `api` that produced it (guided
    /// execution's recomputation), right before the call that needs it.
    Recompute { alloc: u64, api: String },
    /// Guided execution's feedback: the prefetch of `alloc` arrived after the operation that
    /// needed it was issued, so its in-trigger moves from call offset `from` to `to` (earlier)
    /// for the iterations that follow.
    Trigger { alloc: u64, from: u64, to: u64 },
    /// The configurations a convolution's execution plan `plan` (in its `life`) may run under
    /// μ-cuDNN (its desirable set, fastest first: measured time and workspace), written when
    /// the plan is finalised. Every execution of it could have run any of them: the lower bound
    /// takes the fastest time and the least workspace.
    Configs {
        plan: u64,
        life: u64,
        configs: Vec<Alternative>,
    },
}

/// One configuration of a convolution (a `configs` record).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    pub time_ms: f64,
    pub workspace: u64,
}

/// The records of API calls (they carry `api` and `result`), binding field `$f`: the one list
/// of them.
macro_rules! api_call {
    ($f:ident) => {
        Event::Alloc { $f, .. }
            | Event::Free { $f, .. }
            | Event::Copy { $f, .. }
            | Event::Memset { $f, .. }
            | Event::Launch { $f, .. }
            | Event::Cudnn { $f, .. }
            | Event::Cublas { $f, .. }
            | Event::Collective { $f, .. }
            | Event::Sync { $f, .. }
    };
}

impl Event {
    /// The record's kind as written in the trace.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Header { .. } => "header",
            Event::Alloc { .. } => "alloc",
            Event::Free { .. } => "free",
            Event::Copy { .. } => "copy",
            Event::Memset { .. } => "memset",
            Event::Launch { .. } => "launch",
            Event::Cudnn { .. } => "cudnn",
            Event::Cublas { .. } => "cublas",
            Event::Collective { .. } => "collective",
            Event::Sync { .. } => "sync",
            Event::Timing { .. } => "timing",
            Event::Evict { .. } => "evict",
            Event::Restore { .. } => "restore",
            Event::Lineage { .. } => "lineage",
            Event::Kernel { .. } => "kernel",
            Event::Iteration { .. } => "iteration",
            Event::Plan { .. } => "plan",
            Event::NoPlan { .. } => "no_plan",
            Event::Divergence { .. } => "divergence",
            Event::Drop { .. } => "drop",
            Event::Recompute { .. } => "recompute",
            Event::Trigger { .. } => "trigger",
            Event::Configs { .. } => "configs",
        }
    }

    /// The API call behind the record, if it is one.
    pub fn api(&self) -> Option<&str> {
        match self {
            api_call!(api) => Some(api),
            _ => None,
        }
    }

    /// The status code the API call returned, for the records of API calls.
    pub fn result_mut(&mut self) -> Option<&mut i32> {
        match self {
            api_call!(result) => Some(result),
            _ => None,
        }
    }

    /// The status code the API call returned (0 for records that are not API calls).
    pub fn result(&self) -> i32 {
        match self {
            api_call!(result) => *result,
            _ => 0,
        }
    }

    pub fn touches(&self) -> &[Touch] {
        match self {
            Event::Copy { touches, .. }
            | Event::Memset { touches, .. }
            | Event::Launch { touches, .. }
            | Event::Cudnn { touches, .. }
            | Event::Cublas { touches, .. }
            | Event::Collective { touches, .. } => touches,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests;
