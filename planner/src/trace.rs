//! Marmoset's trace: JSON lines, one [`Record`] per line, schema version [`SCHEMA_VERSION`].
//! The shim fills these types; the `marmoset` command and the planner read them. The schema is
//! documented in `docs/trace-schema.md`; a change of meaning bumps the version.

use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
    /// gives (as `CU_LAUNCH_PARAM_BUFFER_POINTER` takes them), in hex; dynamic shared memory.
    Kernel { params: String, shared: u64 },
    /// A memset: the value, and the width it is repeated at (1 or 4 bytes).
    Memset { value: u32, width: u8 },
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
    /// pointer mode); the algorithm as its opaque bytes in hex (absent: the call passed none).
    Lt {
        compute: i32,
        scale: i32,
        trans: [i32; 2],
        epilogue: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bias_type: Option<i32>,
        layouts: Vec<LtLayout>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        algo: Option<String>,
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
            | Event::Cublas { touches, .. } => touches,
            _ => &[],
        }
    }
}

/// Reads a trace, one record per non-empty line; an error names the line and what is wrong.
/// A trace cut mid-record is read up to its last complete record (see [`read_with_cut`]).
pub fn read(text: &str) -> Result<Vec<Record>, String> {
    read_with_cut(text).map(|(records, _)| records)
}

/// Reads a trace like [`read`], and says where it was cut (see [`read_lines`]).
pub fn read_with_cut(text: &str) -> Result<(Vec<Record>, Option<String>), String> {
    let (mut out, cut) = read_lines(text, |line| {
        let r: Record = serde_json::from_str(line).map_err(|e| e.to_string())?;
        if let Event::Header { schema, .. } = &r.event
            && *schema != SCHEMA_VERSION
        {
            return Err(format!(
                "trace schema {schema}, this marmoset reads {SCHEMA_VERSION}"
            ));
        }
        Ok(r)
    })?;
    out.sort_by_key(|r| r.seq);
    Ok((out, cut))
}

/// The one reading of a trace's lines, whatever each line becomes (`parse`: a typed [`Record`],
/// or a JSON value for readers that keep kinds they do not know). Every non-empty line is
/// parsed, in file order, and a trace may end early in two ways, each read up to its last whole
/// record with a note saying so (the second value):
/// - its last line is the writer's `trace_cut` mark (a write failed: a full disk, a size limit);
/// - its last line, after a whole record, has no newline and is not JSON (a writer stopped
///   mid-record).
///
/// Any other line that does not parse is an error naming the line.
pub fn read_lines<T>(
    text: &str,
    mut parse: impl FnMut(&str) -> Result<T, String>,
) -> Result<(Vec<T>, Option<String>), String> {
    let mut out = Vec::new();
    let last = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i)
        .last();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let is_last = Some(i) == last;
        if is_last && let Some(why) = cut_mark(line) {
            let note = format!(
                "cut: writing it failed ({why}); read the {} complete records before that",
                out.len()
            );
            return Ok((out, Some(note)));
        }
        match parse(line) {
            Ok(r) => out.push(r),
            // Cut inside a record: not JSON at all, after at least one whole record (a record
            // that is whole JSON but wrong is an error wherever it stands, and a file whose
            // only line is not JSON is not a trace).
            Err(e)
                if is_last
                    && !out.is_empty()
                    && !text.ends_with('\n')
                    && serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() =>
            {
                let note = format!(
                    "cut: line {} is an incomplete record ({e}); read the {} complete records before it",
                    i + 1,
                    out.len()
                );
                return Ok((out, Some(note)));
            }
            Err(e) => return Err(format!("line {}: {e}", i + 1)),
        }
    }
    Ok((out, None))
}

/// The error a `trace_cut` line names (docs/trace-schema.md), if `line` is one.
fn cut_mark(line: &str) -> Option<String> {
    if !line.contains("\"trace_cut\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let mark = v.as_object()?.get("trace_cut")?;
    Some(
        mark.get("error")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("unknown")
            .to_string(),
    )
}

/// A new run id: what the processes of one run write in their headers (see [`sibling_path`]).
/// Unique enough across runs of one host: the creating process's pid and the time.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{nanos:x}", std::process::id())
}

/// Where another process of the same run writes its trace, beside `base`: the tag before the
/// extension (`t.jsonl` -> `t.rank1.jsonl`, `t.4242.jsonl`, `t.4242-2.jsonl`; `t` -> `t.4242`).
/// Tags are `rank<R>` (the process's RANK, as torchrun sets it), `<pid>`, or `<pid>-<n>`.
pub fn sibling_path(base: &Path, tag: &str) -> PathBuf {
    let name = base.file_name().unwrap_or_default();
    let (stem, ext) = split_name(name.as_bytes());
    let mut n = Vec::with_capacity(name.len() + tag.len() + 1);
    n.extend_from_slice(stem);
    n.push(b'.');
    n.extend_from_slice(tag.as_bytes());
    n.extend_from_slice(ext);
    base.with_file_name(std::ffi::OsStr::from_bytes(&n))
}

/// A file name split before its last extension (`t.jsonl` -> `t`, `.jsonl`; `t` -> `t`, ``;
/// `.trace` -> `.trace`, ``).
fn split_name(name: &[u8]) -> (&[u8], &[u8]) {
    match name.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => name.split_at(i),
        _ => (name, &[]),
    }
}

/// Whether `tag` is one [`sibling_path`] makes.
fn is_sibling_tag(tag: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if let Some(r) = tag.strip_prefix(b"rank") {
        return digits(r);
    }
    match tag.iter().position(|&b| b == b'-') {
        Some(i) => digits(&tag[..i]) && digits(&tag[i + 1..]),
        None => digits(tag),
    }
}

/// The files beside `base` named as its siblings ([`sibling_path`]), of any run, sorted.
pub fn sibling_files(base: &Path) -> Vec<PathBuf> {
    let Some(name) = base.file_name() else {
        return Vec::new();
    };
    let (stem, ext) = split_name(name.as_bytes());
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.strip_prefix(stem)
                .and_then(|r| r.strip_prefix(b"."))
                .and_then(|r| r.strip_suffix(ext))
                .is_some_and(is_sibling_tag)
        })
        .map(|e| base.with_file_name(e.file_name()))
        .collect();
    out.sort();
    out
}

/// The run id in the header of the trace at `path`: None when it is not a regular file, does
/// not start with a header, or its header names no run. Reads the first line only.
pub fn run_of(path: &Path) -> Option<String> {
    use std::io::Read;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut first = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut first)
        .ok()?;
    run_in_header(&first)
}

/// The run id of a trace's first line (`text`: the file's first bytes).
pub fn run_in_header(text: &[u8]) -> Option<String> {
    let end = text.iter().position(|&b| b == b'\n')?;
    match serde_json::from_slice::<Record>(&text[..end]).ok()?.event {
        Event::Header { run, .. } => run,
        _ => None,
    }
}

/// The traces one run wrote at `base`: `base` first when it is that run's, then its siblings of
/// that run ([`sibling_files`]).
pub fn traces_of_run(base: &Path, run: &str) -> Vec<PathBuf> {
    std::iter::once(base.to_path_buf())
        .chain(sibling_files(base))
        .filter(|p| run_of(p).as_deref() == Some(run))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_shape_of_a_line() {
        let r = Record {
            seq: 7,
            t_ns: 1000,
            tid: 42,
            event: Event::Copy {
                api: "cudaMemcpyAsync".into(),
                dst: 0x5000_0000_0000,
                src: 4096,
                size: 64,
                dir: CopyDir::H2d,
                stream: Some(16),
                touches: vec![Touch {
                    alloc: 3,
                    offset: 0,
                    bytes: 64,
                    access: Access::W,
                }],
                result: 0,
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            line.contains(r#""kind":"copy""#) && line.contains(r#""dir":"h2d""#),
            "{line}"
        );
        assert!(line.contains(r#""access":"w""#), "{line}");
        assert_eq!(read(&line).unwrap(), vec![r]);
    }

    /// A backend execution's lineage and unique ids round-trip; a line written before they
    /// existed still parses, with no unique id.
    #[test]
    fn backend_lineage_and_unique_ids() {
        let line = r#"{"seq":3,"t_ns":0,"tid":1,"kind":"lineage","replay":{"call":"backend","plan":4096,"life":2}}"#;
        let r = read(line).unwrap();
        assert_eq!(
            r[0].event,
            Event::Lineage {
                replay: Replay::Backend {
                    plan: 4096,
                    life: 2
                }
            }
        );
        let old = r#"{"role":"x","ptr":64,"dims":[1,2],"strides":[2,1],"access":"r"}"#;
        let t: TensorArg = serde_json::from_str(old).unwrap();
        assert_eq!(t.uid, None);
        let new = TensorArg {
            uid: Some(120),
            ..t.clone()
        };
        let line = serde_json::to_string(&new).unwrap();
        assert!(line.contains(r#""uid":120"#), "{line}");
        assert!(!serde_json::to_string(&t).unwrap().contains("uid"));
        assert_eq!(serde_json::from_str::<TensorArg>(&line).unwrap(), new);
    }

    #[test]
    fn lineage_round_trips() {
        let r = Record {
            seq: 9,
            t_ns: 0,
            tid: 1,
            event: Event::Lineage {
                replay: Replay::Cudnn {
                    alpha: Some(1.0),
                    beta: Some(0.0),
                    dtype: Some(0),
                    conv: Some(ConvParams {
                        pads: vec![1, 1],
                        strides: vec![1, 1],
                        dilations: vec![1, 1],
                        mode: 1,
                        compute: 0,
                        groups: 1,
                        math: 0,
                    }),
                    activation: None,
                    softmax: None,
                    batchnorm: Some(BatchNormParams {
                        mode: 1,
                        ops: 0,
                        epsilon: 1e-5,
                    }),
                },
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            // The field names; the value's spelling is serde_json's (the round trip checks it).
            line.contains(r#""batchnorm":{"mode":1,"ops":0,"epsilon":"#),
            "{line}"
        );
        assert!(
            line.contains(r#""kind":"lineage""#) && line.contains(r#""call":"cudnn""#),
            "{line}"
        );
        assert_eq!(read(&line).unwrap(), vec![r]);
        let k = r#"{"seq":3,"t_ns":0,"tid":1,"kind":"lineage","replay":{"call":"kernel","params":"0a00","shared":0}}"#;
        assert!(matches!(
            read(k).unwrap()[0].event,
            Event::Lineage {
                replay: Replay::Kernel { .. },
                ..
            }
        ));
    }

    #[test]
    fn cublas_lineage_round_trips() {
        let gemm = Replay::Gemm {
            trans: [0, 1],
            types: [0, 0, 0],
            compute: 68,
            algo: -1,
            math: 0,
            alpha: 1.0,
            beta: 0.0,
        };
        let lt = Replay::Lt {
            compute: 68,
            scale: 0,
            trans: [1, 0],
            epilogue: 4,
            bias_type: None,
            layouts: vec![
                LtLayout {
                    ty: 0,
                    order: 0,
                    rows: 768,
                    cols: 3072,
                    ld: 768,
                    batch: 1,
                    stride: 0,
                };
                4
            ],
            algo: Some("00ff".into()),
            alpha: 1.0,
            beta: 0.0,
        };
        for (replay, call) in [(gemm, "gemm"), (lt, "lt")] {
            let r = Record {
                seq: 4,
                t_ns: 0,
                tid: 1,
                event: Event::Lineage { replay },
            };
            let line = serde_json::to_string(&r).unwrap();
            assert!(line.contains(&format!(r#""call":"{call}""#)), "{line}");
            assert_eq!(read(&line).unwrap(), vec![r]);
        }
    }

    #[test]
    fn read_names_the_bad_line_and_sorts_by_seq() {
        let a =
            r#"{"seq":2,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
        let b = r#"{"seq":1,"t_ns":0,"tid":1,"kind":"free","api":"cudaFree","ptr":5,"result":0}"#;
        let recs = read(&format!("{a}\n{b}\n")).unwrap();
        assert_eq!(recs.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2]);
        let e = read(&format!("{a}\nnot json\n")).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let h = r#"{"seq":0,"t_ns":0,"tid":1,"kind":"header","schema":99,"pid":1,"policy":"none","marmoset":"x"}"#;
        assert!(read(h).unwrap_err().contains("schema 99"));
    }

    #[test]
    fn a_trace_cut_mid_record_reads_up_to_its_last_complete_record() {
        let a =
            r#"{"seq":1,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
        let b = r#"{"seq":2,"t_ns":0,"tid":1,"kind":"free","api":"cudaFree","ptr":5,"result":0}"#;
        let cut = format!("{a}\n{b}\n{}", &b[..40]);
        let (recs, note) = read_with_cut(&cut).unwrap();
        assert_eq!(recs.len(), 2);
        let note = note.expect("said to be cut");
        assert!(
            note.contains("line 3") && note.contains("2 complete records"),
            "{note}"
        );
        assert_eq!(read(&cut).unwrap().len(), 2);
        // The line the writer leaves when a write fails.
        let marked = format!(
            "{a}\n{b}\n{}\n",
            r#"{"trace_cut":{"records":2,"error":"No space left on device (os error 28)"}}"#
        );
        let (recs, note) = read_with_cut(&marked).unwrap();
        assert_eq!(recs.len(), 2);
        let note = note.unwrap();
        assert!(
            note.contains("No space left") && note.contains("2 complete"),
            "{note}"
        );
        // Whole, or cut exactly at a record boundary: nothing to say.
        assert_eq!(read_with_cut(&format!("{a}\n{b}")).unwrap().1, None);
        assert_eq!(read_with_cut(&format!("{a}\n")).unwrap().1, None);
        // A bad last line that ends with its newline is not a cut: an error, as in the middle.
        let e = read_with_cut(&format!("{a}\n{}\n", &b[..40])).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let e = read_with_cut(&format!("{}\n{b}", &a[..30])).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }

    #[test]
    fn any_line_reader_reads_the_cut_mark_the_same_way() {
        let a =
            r#"{"seq":1,"t_ns":0,"tid":1,"kind":"sync","api":"cudaDeviceSynchronize","result":0}"#;
        let mark = r#"{"trace_cut":{"records":1,"error":"No space left on device (os error 28)"}}"#;
        let as_value =
            |l: &str| serde_json::from_str::<serde_json::Value>(l).map_err(|e| e.to_string());
        // Blank lines after the mark change nothing; typed and untyped readers say the same.
        let text = format!("{a}\n{mark}\n\n");
        let (values, note) = read_lines(&text, as_value).unwrap();
        assert_eq!(values.len(), 1);
        assert_eq!(note, read_with_cut(&text).unwrap().1);
        assert!(note.unwrap().contains("No space left"));
        // A mark anywhere but at the end is not a record.
        let e = read_with_cut(&format!("{mark}\n{a}\n")).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        // A single line that is not JSON is not a trace cut short: it is not a trace.
        assert!(
            read_with_cut("nonsense")
                .unwrap_err()
                .starts_with("line 1:")
        );
    }

    #[test]
    fn other_processes_of_a_run_trace_beside_its_path() {
        assert_eq!(
            sibling_path(Path::new("d/t.jsonl"), "rank1"),
            Path::new("d/t.rank1.jsonl")
        );
        assert_eq!(sibling_path(Path::new("t"), "42"), Path::new("t.42"));
        assert_eq!(
            sibling_path(Path::new("/x/.trace"), "42-2"),
            Path::new("/x/.trace.42-2")
        );
        assert_eq!(
            sibling_path(Path::new("a.b/t.tar.gz"), "7"),
            Path::new("a.b/t.tar.7.gz")
        );
        let dir = std::env::temp_dir().join(format!("marmoset-siblings-{}", new_run_id()));
        std::fs::create_dir_all(&dir).unwrap();
        let header = |run: &str| {
            format!(
                "{{\"seq\":0,\"t_ns\":0,\"tid\":1,\"kind\":\"header\",\"schema\":1,\"pid\":1,\"policy\":\"none\",\"marmoset\":\"x\",\"run\":\"{run}\"}}\n"
            )
        };
        for (name, text) in [
            ("t.jsonl", header("a")),
            ("t.12.jsonl", header("a")),
            ("t.rank2.jsonl", header("b")),
            ("t.3-2.jsonl", String::new()),
            ("t.backup.jsonl", header("a")),
            ("t.jsonl.1", header("a")),
            ("u.1.jsonl", header("a")),
            ("t.rank.jsonl", header("a")),
        ] {
            std::fs::write(dir.join(name), text).unwrap();
        }
        let base = dir.join("t.jsonl");
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(sibling_files(&base)),
            ["t.12.jsonl", "t.3-2.jsonl", "t.rank2.jsonl"]
        );
        assert_eq!(names(traces_of_run(&base, "a")), ["t.jsonl", "t.12.jsonl"]);
        assert_eq!(names(traces_of_run(&base, "b")), ["t.rank2.jsonl"]);
        assert_eq!(run_of(&dir), None);
        assert_eq!(run_of(&dir.join("t.3-2.jsonl")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
