//! μ-cuDNN under LD_PRELOAD: convolutions run as micro-batches so faster algorithms fit the
//! workspace. On when `MARMOSET_WORKSPACE_LIMIT` (WR: per kernel) or `MARMOSET_WORKSPACE_TOTAL`
//! (WD: one workspace shared by all kernels, owned by Marmoset) is set, and for backend graphs
//! under a memory budget without either (the joint plan, `joint.rs`; the legacy API is left as
//! the program calls it there).
//!
//! For each new convolution (its full signature: direction, every dimension and stride, pads,
//! strides, dilations, groups, mode, data and compute types, math type, layouts; with the device
//! and cuDNN version for the database) every algorithm is measured at each micro-batch size of
//! the policy with the real `cudnnFind*AlgorithmEx`, on micro-batch descriptors and scratch
//! buffers Marmoset owns, under the workspace limit. The scratch workspace is what the
//! candidates within the limit need by the library's `Get*WorkspaceSize`, never the limit
//! itself; when the device refuses it, the candidates that need more are left out, said once,
//! and that incomplete measurement is not written for other processes. Results are kept in
//! memory and in a database file shared by processes; an entry read from it is used only if the
//! library still offers each of its algorithms with no more workspace than the entry records,
//! else it is dropped with a warning naming the file and the entry, and measured again. WR picks
//! each kernel's fastest configuration; WD picks one configuration of each kernel's desirable set
//! under the total.
//!
//! The framework's view: algorithm queries answer one result, the plan (its first algorithm, its
//! time, the workspace the framework must provide: the plan's in WR, 0 in WD); workspace-size
//! queries answer the same; a convolution ignores the algorithm argument and runs the plan.
//! Forward and backward-data write disjoint slices with the caller's alpha and beta;
//! backward-filter accumulates (the caller's beta first, then 1). Anything unusual (N = 1, a
//! layout whose images are not contiguous blocks, a workspace smaller than the plan, a failed
//! step) runs the call undivided, exactly as the caller asked.

pub mod backend;
mod benchmark;
mod db;
pub(crate) mod joint;
mod wd;

use benchmark::{
    benchmark, cudnn_version, dev_alloc, dev_free, device_name, invalid_micro, library_workspace,
    scratch_workspace,
};
pub(crate) use joint::{joint_limit, joint_mode};
use wd::register;
pub(crate) use wd::{register_graph, wd_assignment, wd_mode, wd_pool, without_workspace};

use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::ffi::cudnn::AlgoPerf;
use crate::ffi::table;
use planner::microbatch::{Configuration, Micro, Sizes, desirable, fastest};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

type P = *mut c_void;
type C = *const c_void;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    Fwd,
    BwdData,
    BwdFilter,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TensorSig {
    dtype: c_int,
    dims: Vec<c_int>,
    strides: Vec<c_int>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FilterSig {
    dtype: c_int,
    format: c_int,
    dims: Vec<c_int>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ConvSig {
    pad: Vec<c_int>,
    stride: Vec<c_int>,
    dil: Vec<c_int>,
    mode: c_int,
    compute: c_int,
    groups: c_int,
    math: c_int,
}

/// A convolution's full signature. `x` and `y` are the image-side tensors of the direction:
/// (x, y) forward, (dx, dy) backward-data, (x, dy) backward-filter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sig {
    dir: Dir,
    x: TensorSig,
    w: FilterSig,
    y: TensorSig,
    conv: ConvSig,
}

fn tensor_sig(d: C) -> Option<TensorSig> {
    let get = table::cudnnGetTensorNdDescriptor()?;
    let (mut dt, mut nb) = (0, 0);
    let (mut dims, mut st) = ([0; 8], [0; 8]);
    // SAFETY: arrays of 8, as requested.
    if unsafe { get(d, 8, &mut dt, &mut nb, dims.as_mut_ptr(), st.as_mut_ptr()) } != 0
        || !(3..=8).contains(&nb)
    {
        return None;
    }
    Some(TensorSig {
        dtype: dt,
        dims: dims[..nb as usize].to_vec(),
        strides: st[..nb as usize].to_vec(),
    })
}

fn filter_sig(d: C) -> Option<FilterSig> {
    let get = table::cudnnGetFilterNdDescriptor()?;
    let (mut dt, mut fmt, mut nb) = (0, 0, 0);
    let mut dims = [0; 8];
    // SAFETY: an array of 8, as requested.
    if unsafe { get(d, 8, &mut dt, &mut fmt, &mut nb, dims.as_mut_ptr()) } != 0
        || !(3..=8).contains(&nb)
    {
        return None;
    }
    Some(FilterSig {
        dtype: dt,
        format: fmt,
        dims: dims[..nb as usize].to_vec(),
    })
}

fn conv_sig(d: C) -> Option<ConvSig> {
    let get = table::cudnnGetConvolutionNdDescriptor()?;
    let (mut len, mut mode, mut ct) = (0, 0, 0);
    let (mut pad, mut st, mut dil) = ([0; 3], [0; 3], [0; 3]);
    // SAFETY: arrays of 3, as requested.
    let r = unsafe {
        get(
            d,
            3,
            &mut len,
            pad.as_mut_ptr(),
            st.as_mut_ptr(),
            dil.as_mut_ptr(),
            &mut mode,
            &mut ct,
        )
    };
    if r != 0 || !(1..=3).contains(&len) {
        return None;
    }
    let (mut groups, mut math) = (1, 0);
    if let Some(g) = table::cudnnGetConvolutionGroupCount() {
        // SAFETY: valid output pointer.
        unsafe { g(d, &mut groups) };
    }
    if let Some(m) = table::cudnnGetConvolutionMathType() {
        // SAFETY: valid output pointer.
        unsafe { m(d, &mut math) };
    }
    let n = len as usize;
    Some(ConvSig {
        pad: pad[..n].to_vec(),
        stride: st[..n].to_vec(),
        dil: dil[..n].to_vec(),
        mode,
        compute: ct,
        groups,
        math,
    })
}

/// The signature of a call given its descriptors in (x, w, conv, y) roles.
pub fn signature(dir: Dir, x: C, w: C, c: C, y: C) -> Option<Sig> {
    Some(Sig {
        dir,
        x: tensor_sig(x)?,
        w: filter_sig(w)?,
        y: tensor_sig(y)?,
        conv: conv_sig(c)?,
    })
}

/// Bytes of one element of a cudnnDataType_t.
pub(crate) fn elem_bytes(dtype: c_int) -> usize {
    match dtype {
        1 | 10 => 8,
        2 | 9 => 2,
        3 | 6 | 11 | 12 | 13 => 1,
        _ => 4,
    }
}

/// Elements spanned by one image (all dimensions but N).
fn image_span(t: &TensorSig) -> i64 {
    1 + t
        .dims
        .iter()
        .zip(&t.strides)
        .skip(1)
        .map(|(&d, &s)| (d as i64 - 1) * s as i64)
        .sum::<i64>()
}

fn tensor_bytes(t: &TensorSig, n: i64) -> usize {
    let span = image_span(t) + (n - 1).max(0) * t.strides[0] as i64;
    span as usize * elem_bytes(t.dtype)
}

impl Sig {
    fn n(&self) -> u64 {
        self.x.dims[0].max(0) as u64
    }

    /// Micro-batching needs N > 1, the same N on both sides, and each image a block of its own.
    fn splittable(&self) -> bool {
        let n = self.x.dims[0];
        n > 1
            && self.y.dims[0] == n
            && [&self.x, &self.y]
                .iter()
                .all(|t| t.strides[0] as i64 >= image_span(t) && t.strides.iter().all(|&s| s > 0))
    }

    fn filter_bytes(&self) -> usize {
        self.w.dims.iter().map(|&d| d as usize).product::<usize>() * elem_bytes(self.w.dtype)
    }

    /// The database key: the signature, where it runs, and what the benchmark was allowed.
    fn key(&self, device: &str, cudnn: usize, limit: u64, sizes: &str) -> String {
        format!(
            "{:?}|x={:?}/{:?}/t{}|w={:?}/f{}/t{}|y={:?}/{:?}|pad={:?}|stride={:?}|dil={:?}|mode={}|compute={}|groups={}|math={}|{device}|cudnn={cudnn}|limit={limit}|sizes={sizes}",
            self.dir,
            self.x.dims,
            self.x.strides,
            self.x.dtype,
            self.w.dims,
            self.w.format,
            self.w.dtype,
            self.y.dims,
            self.y.strides,
            self.conv.pad,
            self.conv.stride,
            self.conv.dil,
            self.conv.mode,
            self.conv.compute,
            self.conv.groups,
            self.conv.math,
        )
    }
}

// ==================================================================== descriptors for micro-batches

/// Tensor descriptors for a micro-batch of `b` images (same strides), created once.
static MICRO_DESCS: Mutex<Option<HashMap<(TensorSig, c_int), usize>>> = Mutex::new(None);

fn micro_desc(t: &TensorSig, b: c_int) -> Option<P> {
    let key = (t.clone(), b);
    if let Some(&d) = MICRO_DESCS
        .lock()
        .ok()?
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Some(d as P);
    }
    let create = table::cudnnCreateTensorDescriptor()?;
    let set = table::cudnnSetTensorNdDescriptor()?;
    let mut d: P = std::ptr::null_mut();
    let mut dims = t.dims.clone();
    dims[0] = b;
    // SAFETY: real cuDNN calls with valid pointers; the descriptor lives for the process.
    unsafe {
        if create(&mut d) != 0
            || set(
                d,
                t.dtype,
                dims.len() as c_int,
                dims.as_ptr(),
                t.strides.as_ptr(),
            ) != 0
        {
            return None;
        }
    }
    MICRO_DESCS
        .lock()
        .ok()?
        .get_or_insert_with(HashMap::new)
        .insert(key, d as usize);
    Some(d)
}

// ==================================================================== plans

/// What Marmoset knows of one convolution kernel.
#[derive(Debug)]
pub struct KernelPlan {
    pub sig: Sig,
    /// WR's choice (or the test facility's).
    pub wr: Option<Configuration>,
    /// The desirable set (WD's options).
    pub front: Vec<Configuration>,
}

/// A kernel of WD's knapsack: a legacy convolution (its signature) or a backend graph (its
/// database key: operations, tensors, the caller's engine and knob choices).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Conv(Box<Sig>),
    Graph(String),
}

struct State {
    plans: HashMap<Sig, Arc<KernelPlan>>,
    db: Option<HashMap<String, Vec<Micro>>>,
    /// WD: the desirable sets of backend graphs, by database key.
    graphs: HashMap<String, Vec<Configuration>>,
    /// WD: kernels in registration order, the set the current assignment was solved for, the
    /// assignment (configuration, offset into the pool) and the pool.
    registered: Vec<Kernel>,
    solved: usize,
    assignment: HashMap<Kernel, (Configuration, u64)>,
    pool: usize,
    pool_size: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    let mut g = STATE.lock().ok()?;
    let s = g.get_or_insert_with(|| State {
        plans: HashMap::new(),
        db: None,
        graphs: HashMap::new(),
        registered: Vec::new(),
        solved: 0,
        assignment: HashMap::new(),
        pool: 0,
        pool_size: 0,
    });
    Some(f(s))
}

/// The database's entry for `key` when the library stands by every micro-configuration in it
/// (`library`: the workspace it asks for a `choice`, an algorithm or an engine, at a micro-batch
/// size; None when it does not offer that choice there). A bad entry is dropped, with one
/// warning naming the cache and the entry, and the kernel is measured again; the new
/// measurement supersedes it in the file.
fn cached(
    key: &str,
    n: u64,
    choice: &str,
    library: impl Fn(u64, c_int) -> Option<u64>,
) -> Option<Vec<Micro>> {
    let micro = with_state(|s| s.db.get_or_insert_with(db::load).get(key).cloned()).flatten()?;
    match micro
        .iter()
        .find_map(|m| invalid_micro(m, n, choice, &library))
    {
        None => Some(micro),
        Some(why) => {
            with_state(|s| s.db.as_mut().map(|d| d.remove(key)));
            db::dropped(key, &why);
            None
        }
    }
}

/// Keeps a measurement for this process and, when `complete` (every candidate was measured),
/// in the database for others.
fn remember(key: &str, micro: &[Micro], complete: bool) {
    if micro.is_empty() {
        return;
    }
    if complete {
        db::append(key, micro);
    }
    with_state(|s| {
        s.db.get_or_insert_with(HashMap::new)
            .insert(key.to_string(), micro.to_vec());
    });
}

/// The configuration the test facility asks for: micro-batches of `b` (the last smaller), each
/// with its fastest measured algorithm.
pub(crate) fn forced(n: u64, b: u64, micro: &[Micro]) -> Option<Configuration> {
    let mut parts = Vec::new();
    let (mut time, mut ws) = (0.0, 0);
    let mut left = n;
    while left > 0 {
        let size = b.min(left);
        let m = micro
            .iter()
            .filter(|m| m.batch == size)
            .min_by(|a, c| a.time_ms.total_cmp(&c.time_ms))?;
        parts.push((size, m.algo));
        time += m.time_ms;
        ws = ws.max(m.workspace);
        left -= size;
    }
    Some(Configuration {
        parts,
        time_ms: time,
        workspace: ws,
    })
}

/// The plan of a convolution, benchmarking it (or reading the database) the first time.
/// No lock is held while benchmarking.
pub fn plan(h: P, sig: &Sig, w_desc: C, c_desc: C) -> Option<Arc<KernelPlan>> {
    if let Some(p) = with_state(|s| s.plans.get(sig).cloned()).flatten() {
        return Some(p);
    }
    let cfg = config();
    let limit = cfg.workspace_limit.or(cfg.workspace_total)?;
    let n = sig.n();
    if n > planner::microbatch::MAX_BATCH {
        // Beyond what the optimisers take: the convolution runs undivided, as asked.
        log(
            Level::Info,
            &format!(
                "a convolution of {n} images is more than μ-cuDNN plans for ({}); it runs undivided",
                planner::microbatch::MAX_BATCH
            ),
        );
        return None;
    }
    let sizes: Vec<u64> = match cfg.test_microbatch {
        Some(b) => {
            let mut v = vec![b.min(n), n % b.min(n)];
            v.retain(|&x| x > 0);
            v.dedup();
            v
        }
        None => cfg.batch_sizes.sizes(n),
    };
    let policy = match cfg.test_microbatch {
        Some(b) => format!("test{b}"),
        None => cfg.batch_sizes.name().to_string(),
    };
    let key = sig.key(&device_name(), cudnn_version(), limit, &policy);
    let cached = cached(&key, n, "algorithm", |b, a| {
        library_workspace(h, sig, w_desc, c_desc, b, a)
    });
    let started = std::time::Instant::now();
    let (micro, from_cache) = match cached {
        Some(m) => (m, true),
        None => {
            let m = benchmark(h, sig, w_desc, c_desc, &sizes, limit);
            remember(&key, &m.micro, m.complete);
            (m.micro, false)
        }
    };
    let bench_ms = started.elapsed().as_secs_f64() * 1e3;
    let t = std::time::Instant::now();
    let sizes_policy = if cfg.test_microbatch.is_some() {
        Sizes::All
    } else {
        cfg.batch_sizes
    };
    let wr = match cfg.test_microbatch {
        Some(b) => forced(n, b, &micro),
        None => fastest(n, &micro, limit, sizes_policy),
    };
    // WD chooses among each kernel's desirable set; WR needs only the fastest.
    let front = if wd_mode() {
        desirable(n, &micro, limit, sizes_policy)
    } else {
        Vec::new()
    };
    log(
        Level::Info,
        &format!(
            "planned a {:?} convolution of {n} images: {} ({} micro-configurations {}, {:.2} ms; dynamic program {:.3} ms)",
            sig.dir,
            wr.as_ref()
                .map(describe)
                .unwrap_or_else(|| "undivided (nothing measured)".into()),
            micro.len(),
            if from_cache {
                "from the cache"
            } else {
                "measured"
            },
            bench_ms,
            t.elapsed().as_secs_f64() * 1e3,
        ),
    );
    let p = Arc::new(KernelPlan {
        sig: sig.clone(),
        wr,
        front,
    });
    with_state(|s| s.plans.entry(sig.clone()).or_insert(p).clone())
}

fn describe(c: &Configuration) -> String {
    let mut groups: Vec<(u64, i32, usize)> = Vec::new();
    for &(b, a) in &c.parts {
        match groups.last_mut() {
            Some(g) if g.0 == b && g.1 == a => g.2 += 1,
            _ => groups.push((b, a, 1)),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(b, a, k)| format!("{k} x {b} with algorithm {a}"))
        .collect();
    format!(
        "{} ({:.4} ms, {} B of workspace)",
        parts.join(" + "),
        c.time_ms,
        c.workspace
    )
}

// ==================================================================== the framework's view

/// The convolution descriptors of a query, in (x, w, conv, y) roles, for the direction.
pub struct Query {
    pub dir: Dir,
    pub x: C,
    pub w: C,
    pub conv: C,
    pub y: C,
}

/// The plan that answers a query or runs a call, if micro-batching handles this convolution.
fn managed(h: P, q: &Query) -> Option<(Arc<KernelPlan>, Configuration)> {
    if !crate::core::state::active() || !config().microbatching() {
        return None;
    }
    let sig = signature(q.dir, q.x, q.w, q.conv, q.y)?;
    if !sig.splittable() {
        return None;
    }
    let plan = plan(h, &sig, q.w, q.conv)?;
    let c = plan.wr.clone()?;
    if wd_mode() {
        register(Kernel::Conv(Box::new(sig)));
    }
    Some((plan, c))
}

/// Algorithm queries (Get*_v7, Find*, Find*Ex): one result, the plan. None: not ours, forward.
pub fn answer_query(
    h: P,
    q: &Query,
    requested: c_int,
    returned: *mut c_int,
    perf: *mut AlgoPerf,
) -> Option<c_int> {
    if requested < 1 || returned.is_null() || perf.is_null() {
        return None;
    }
    let (plan, c) = managed(h, q)?;
    let first = c.parts.first()?.1;
    let entry = AlgoPerf {
        algo: first,
        status: 0,
        time: c.time_ms as f32,
        memory: if wd_mode() { 0 } else { c.workspace as usize },
        determinism: !matches!(
            (plan.sig.dir, first),
            (Dir::BwdData, 0) | (Dir::BwdFilter, 0) | (Dir::BwdFilter, 3)
        ) as c_int,
        math_type: plan.sig.conv.math,
        reserved: [0; 3],
    };
    // SAFETY: perf holds `requested` >= 1 entries and returned is non-null (checked).
    unsafe {
        *perf = entry;
        *returned = 1;
    }
    Some(0)
}

/// Workspace-size queries: the plan's workspace (WR) or 0 (WD: Marmoset owns it).
pub fn answer_workspace(h: P, q: &Query, size: *mut usize) -> Option<c_int> {
    if size.is_null() {
        return None;
    }
    let (_, c) = managed(h, q)?;
    // SAFETY: non-null output pointer.
    unsafe { *size = if wd_mode() { 0 } else { c.workspace as usize } };
    Some(0)
}

/// The buffers of a convolution call in (x, w, y) roles, with alpha, beta and the workspace.
pub struct Call {
    pub alpha: C,
    pub beta: C,
    pub x: usize,
    pub w: usize,
    pub y: usize,
    pub ws: P,
    pub ws_size: usize,
}

type ConvFn = unsafe extern "C" fn(P, C, C, C, C, C, C, c_int, P, usize, C, C, P) -> c_int;

/// Runs a convolution as its plan's micro-batches; None: run it undivided as the caller asked.
pub fn run(h: P, q: &Query, call: &Call, real: ConvFn) -> Option<c_int> {
    let (plan, wr) = managed(h, q)?;
    let (config_, ws, ws_size) = if wd_mode() {
        match wd_assignment(&Kernel::Conv(Box::new(plan.sig.clone()))) {
            Some((c, segment)) => {
                let size = c.workspace as usize;
                (c, segment as P, size)
            }
            None => (without_workspace(&plan.front)?, std::ptr::null_mut(), 0),
        }
    } else {
        if call.ws_size < wr.workspace as usize || (wr.workspace > 0 && call.ws.is_null()) {
            log(
                Level::Debug,
                "the caller's workspace is smaller than the plan's: running undivided",
            );
            return None;
        }
        (wr, call.ws, call.ws_size)
    };
    let sig = &plan.sig;
    let (x_stride, y_stride) = (
        sig.x.strides[0] as usize * elem_bytes(sig.x.dtype),
        sig.y.strides[0] as usize * elem_bytes(sig.y.dtype),
    );
    // BackwardFilter accumulates: the caller's beta on the first micro-batch, then 1.
    let one_f32 = 1.0f32;
    let one_f64 = 1.0f64;
    let one: C = if sig.w.dtype == 1 {
        &one_f64 as *const f64 as C
    } else {
        &one_f32 as *const f32 as C
    };
    let mut start = 0usize;
    for (i, &(b, algo)) in config_.parts.iter().enumerate() {
        let (xd, yd) = (
            micro_desc(&sig.x, b as c_int)?,
            micro_desc(&sig.y, b as c_int)?,
        );
        let (x, y) = (call.x + start * x_stride, call.y + start * y_stride);
        let beta = if sig.dir == Dir::BwdFilter && i > 0 {
            one
        } else {
            call.beta
        };
        // SAFETY: the caller's buffers, offset by whole images within the mini-batch; the
        // micro-batch descriptors describe b images with the caller's strides.
        let r = unsafe {
            match sig.dir {
                Dir::Fwd => real(
                    h,
                    call.alpha,
                    xd,
                    x as C,
                    q.w,
                    call.w as C,
                    q.conv,
                    algo,
                    ws,
                    ws_size,
                    beta,
                    yd,
                    y as P,
                ),
                Dir::BwdData => real(
                    h,
                    call.alpha,
                    q.w,
                    call.w as C,
                    yd,
                    y as C,
                    q.conv,
                    algo,
                    ws,
                    ws_size,
                    beta,
                    xd,
                    x as P,
                ),
                Dir::BwdFilter => real(
                    h,
                    call.alpha,
                    xd,
                    x as C,
                    yd,
                    y as C,
                    q.conv,
                    algo,
                    ws,
                    ws_size,
                    beta,
                    q.w,
                    call.w as P,
                ),
            }
        };
        if r != 0 {
            if i == 0 {
                // Nothing written yet: the caller's call can still run undivided.
                log(
                    Level::Warn,
                    &format!("micro-batch failed ({r}); running the convolution undivided"),
                );
                return None;
            }
            return Some(r);
        }
        start += b as usize;
    }
    Some(0)
}
