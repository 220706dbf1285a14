//! μ-cuDNN under LD_PRELOAD: convolutions run as micro-batches so faster algorithms fit the
//! workspace. On when `MARMOSET_WORKSPACE_LIMIT` (WR: per kernel) or `MARMOSET_WORKSPACE_TOTAL`
//! (WD: one workspace shared by all kernels, owned by Marmoset) is set.
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
mod db;
mod wd;

use wd::register;
pub(crate) use wd::{register_graph, wd_assignment, wd_mode, wd_pool, without_workspace};

use crate::core::config::Level;
use crate::core::state::{config, log};
use crate::real::{CUDA, CUDART, CUDNN, resolve};
use planner::microbatch::{Configuration, Micro, Sizes, desirable, fastest};
use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

type P = *mut c_void;
type C = *const c_void;

fn slot(s: &AtomicUsize, libs: &[&CStr], name: &CStr) -> usize {
    let mut p = s.load(Ordering::Acquire);
    if p == 0 {
        p = resolve(libs, name);
        s.store(p, Ordering::Release);
    }
    p
}

/// The real function `name` in `libs`, as `unsafe extern "C" fn(types) -> c_int`.
macro_rules! real {
    ($libs:expr, $name:literal, ($($t:ty),*)) => {{
        static SLOT: AtomicUsize = AtomicUsize::new(0);
        let p = slot(&SLOT, $libs, $name);
        // SAFETY: the real function named $name has this signature.
        (p != 0).then(|| unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> c_int>(p) })
    }};
}

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
    let get = real!(
        CUDNN,
        c"cudnnGetTensorNdDescriptor",
        (C, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int)
    )?;
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
    let get = real!(
        CUDNN,
        c"cudnnGetFilterNdDescriptor",
        (C, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int)
    )?;
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
    let get = real!(
        CUDNN,
        c"cudnnGetConvolutionNdDescriptor",
        (
            C,
            c_int,
            *mut c_int,
            *mut c_int,
            *mut c_int,
            *mut c_int,
            *mut c_int,
            *mut c_int
        )
    )?;
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
    if let Some(g) = real!(CUDNN, c"cudnnGetConvolutionGroupCount", (C, *mut c_int)) {
        // SAFETY: valid output pointer.
        unsafe { g(d, &mut groups) };
    }
    if let Some(m) = real!(CUDNN, c"cudnnGetConvolutionMathType", (C, *mut c_int)) {
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
    let create = real!(CUDNN, c"cudnnCreateTensorDescriptor", (*mut P))?;
    let set = real!(
        CUDNN,
        c"cudnnSetTensorNdDescriptor",
        (P, c_int, c_int, *const c_int, *const c_int)
    )?;
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

// ==================================================================== benchmarking

/// cudnnConvolution*AlgoPerf_t.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AlgoPerf {
    pub algo: c_int,
    pub status: c_int,
    pub time: f32,
    pub memory: usize,
    pub determinism: c_int,
    pub math_type: c_int,
    pub reserved: [c_int; 3],
}

fn device_name() -> String {
    let mut buf = [0u8; 256];
    if let Some(f) = real!(CUDA, c"cuDeviceGetName", (*mut u8, c_int, c_int)) {
        // SAFETY: a 256-byte buffer, as stated.
        unsafe { f(buf.as_mut_ptr(), 256, 0) };
    }
    CStr::from_bytes_until_nul(&buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn cudnn_version() -> usize {
    static V: AtomicUsize = AtomicUsize::new(0);
    let p = slot(&V, CUDNN, c"cudnnGetVersion");
    if p == 0 {
        return 0;
    }
    // SAFETY: cudnnGetVersion() -> size_t.
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn() -> usize>(p)() }
}

/// Device memory Marmoset owns (scratch buffers, the WD workspace), from the real cudaMalloc.
fn dev_alloc(bytes: usize) -> Option<usize> {
    if crate::virt::memory::active() {
        // Under a memory policy Marmoset's own buffers count in the budget too.
        return crate::virt::memory::alloc_internal(bytes).map(|p| p as usize);
    }
    let malloc = real!(CUDART, c"cudaMalloc", (*mut P, usize))?;
    let mut p: P = std::ptr::null_mut();
    // SAFETY: real cudaMalloc with a valid output pointer.
    (unsafe { malloc(&mut p, bytes.max(1)) } == 0).then_some(p as usize)
}

fn dev_free(p: usize) {
    if crate::virt::memory::free(p as u64, None).is_some() {
        return;
    }
    if let Some(free) = real!(CUDART, c"cudaFree", (P)) {
        // SAFETY: p came from dev_alloc.
        unsafe { free(p as P) };
    }
}

type FindEx = unsafe extern "C" fn(
    P,
    C,
    C,
    C,
    C,
    C,
    C,
    P,
    c_int,
    *mut c_int,
    *mut AlgoPerf,
    P,
    usize,
) -> c_int;

/// How many algorithms cuDNN has for the direction (its *AlgorithmMaxCount; cuDNN's enum counts
/// when the query is missing).
fn algo_count(h: P, dir: Dir) -> c_int {
    let query = match dir {
        Dir::Fwd => real!(
            CUDNN,
            c"cudnnGetConvolutionForwardAlgorithmMaxCount",
            (P, *mut c_int)
        ),
        Dir::BwdData => real!(
            CUDNN,
            c"cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
            (P, *mut c_int)
        ),
        Dir::BwdFilter => real!(
            CUDNN,
            c"cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
            (P, *mut c_int)
        ),
    };
    let mut n = 0;
    // SAFETY: real cuDNN query with a valid output pointer.
    match query {
        Some(q) if unsafe { q(h, &mut n) } == 0 && (1..=64).contains(&n) => n,
        _ => match dir {
            Dir::Fwd => 8,
            Dir::BwdData => 6,
            Dir::BwdFilter => 7,
        },
    }
}

/// The workspace cuDNN asks for `algo` on micro-batches of `b` images of the convolution (its
/// Get*WorkspaceSize); None: the library does not take that algorithm for this convolution.
fn library_workspace(h: P, sig: &Sig, w_desc: C, c_desc: C, b: u64, algo: c_int) -> Option<u64> {
    let get = match sig.dir {
        Dir::Fwd => real!(
            CUDNN,
            c"cudnnGetConvolutionForwardWorkspaceSize",
            (P, C, C, C, C, c_int, *mut usize)
        ),
        Dir::BwdData => real!(
            CUDNN,
            c"cudnnGetConvolutionBackwardDataWorkspaceSize",
            (P, C, C, C, C, c_int, *mut usize)
        ),
        Dir::BwdFilter => real!(
            CUDNN,
            c"cudnnGetConvolutionBackwardFilterWorkspaceSize",
            (P, C, C, C, C, c_int, *mut usize)
        ),
    }?;
    let b = c_int::try_from(b).ok().filter(|&b| b >= 1)?;
    let (xd, yd) = (micro_desc(&sig.x, b)?, micro_desc(&sig.y, b)?);
    let mut size = 0usize;
    // SAFETY: real cuDNN query on live descriptors (the caller's filter and convolution,
    // Marmoset's micro-batch tensors) with a valid output pointer.
    let r = unsafe {
        match sig.dir {
            Dir::Fwd => get(h, xd, w_desc, c_desc, yd, algo, &mut size),
            Dir::BwdData => get(h, w_desc, yd, c_desc, xd, algo, &mut size),
            Dir::BwdFilter => get(h, xd, yd, c_desc, w_desc, algo, &mut size),
        }
    };
    (r == 0).then_some(size as u64)
}

/// What a benchmark measured; `complete` is false when the device could not give the scratch
/// workspace every candidate needs (such measurements are not written to the database).
struct Measured {
    micro: Vec<Micro>,
    complete: bool,
}

/// The scratch workspace of a benchmark: the most any candidate within the limit needs (the
/// library's answers, never the limit itself). What the device refuses steps down to the next
/// smaller need, leaving out the candidates that need more, with one warning.
/// Returns (address or 0, bytes, whether every candidate fits).
fn scratch_workspace(needs: &[u64], what: &str) -> (usize, usize, bool) {
    // Distinct needs, largest first; 0 needs no allocation.
    let mut levels: Vec<u64> = needs.to_vec();
    levels.sort_unstable_by(|a, b| b.cmp(a));
    levels.dedup();
    let largest = levels.first().copied().unwrap_or(0);
    for &level in &levels {
        let Ok(bytes) = usize::try_from(level) else {
            continue;
        };
        let p = if bytes == 0 {
            Some(0)
        } else {
            dev_alloc(bytes)
        };
        if let Some(p) = p {
            if level < largest {
                log(
                    Level::Warn,
                    &format!(
                        "μ-cuDNN: the device cannot give the {largest} B of scratch workspace that benchmarking {what} needs; measuring only the configurations within {level} B"
                    ),
                );
            }
            return (p, bytes, level == largest);
        }
    }
    log(
        Level::Warn,
        &format!(
            "μ-cuDNN: the device cannot give any scratch workspace to benchmark {what}; it runs as the caller asks"
        ),
    );
    (0, 0, false)
}

/// Measures every algorithm at each micro-batch size: real cudnnFind*AlgorithmEx on micro-batch
/// descriptors, scratch buffers, and a scratch workspace of what the candidates within `limit`
/// need.
fn benchmark(h: P, sig: &Sig, w_desc: C, c_desc: C, sizes: &[u64], limit: u64) -> Measured {
    let failed = Measured {
        micro: Vec::new(),
        complete: false,
    };
    let find: Option<FindEx> = match sig.dir {
        Dir::Fwd => real!(
            CUDNN,
            c"cudnnFindConvolutionForwardAlgorithmEx",
            (
                P,
                C,
                C,
                C,
                C,
                C,
                C,
                P,
                c_int,
                *mut c_int,
                *mut AlgoPerf,
                P,
                usize
            )
        ),
        Dir::BwdData => real!(
            CUDNN,
            c"cudnnFindConvolutionBackwardDataAlgorithmEx",
            (
                P,
                C,
                C,
                C,
                C,
                C,
                C,
                P,
                c_int,
                *mut c_int,
                *mut AlgoPerf,
                P,
                usize
            )
        ),
        Dir::BwdFilter => real!(
            CUDNN,
            c"cudnnFindConvolutionBackwardFilterAlgorithmEx",
            (
                P,
                C,
                C,
                C,
                C,
                C,
                C,
                P,
                c_int,
                *mut c_int,
                *mut AlgoPerf,
                P,
                usize
            )
        ),
    };
    let Some(find) = find else { return failed };
    let n = sig.n() as i64;
    let what = format!("a {:?} convolution of {n} images", sig.dir);
    // The candidates' workspaces, by the library's own answers.
    let count = algo_count(h, sig.dir);
    let needs: Vec<u64> = sizes
        .iter()
        .flat_map(|&b| {
            (0..count).filter_map(move |a| library_workspace(h, sig, w_desc, c_desc, b, a))
        })
        .filter(|&w| w <= limit)
        .collect();
    let (xb, yb, wb) = (
        tensor_bytes(&sig.x, n),
        tensor_bytes(&sig.y, n),
        sig.filter_bytes(),
    );
    let bufs: Vec<Option<usize>> = [xb, yb, wb].into_iter().map(dev_alloc).collect();
    let [Some(x), Some(y), Some(w)] = bufs[..] else {
        bufs.into_iter().flatten().for_each(dev_free);
        log(
            Level::Warn,
            &format!(
                "μ-cuDNN: the device cannot give the {} B of scratch buffers to benchmark {what}; it runs as the caller asks",
                xb + yb + wb
            ),
        );
        return failed;
    };
    let (ws, ws_size, complete) = if needs.is_empty() {
        // The library answered no workspace query: what needs none is still measured, for this
        // process only.
        (0, 0, false)
    } else {
        scratch_workspace(&needs, &what)
    };
    let mut out = Vec::new();
    for &b in sizes {
        let (Some(xd), Some(yd)) = (
            micro_desc(&sig.x, b as c_int),
            micro_desc(&sig.y, b as c_int),
        ) else {
            continue;
        };
        let mut perf = [AlgoPerf::default(); 16];
        let mut got = 0;
        let wsp = ws as P;
        // SAFETY: real FindEx on Marmoset's own scratch buffers, sized for N >= b images, and a
        // scratch workspace of ws_size bytes (null when 0).
        let r = unsafe {
            match sig.dir {
                Dir::Fwd => find(
                    h,
                    xd,
                    x as C,
                    w_desc,
                    w as C,
                    c_desc,
                    yd,
                    y as P,
                    16,
                    &mut got,
                    perf.as_mut_ptr(),
                    wsp,
                    ws_size,
                ),
                Dir::BwdData => find(
                    h,
                    w_desc,
                    w as C,
                    yd,
                    y as C,
                    c_desc,
                    xd,
                    x as P,
                    16,
                    &mut got,
                    perf.as_mut_ptr(),
                    wsp,
                    ws_size,
                ),
                Dir::BwdFilter => find(
                    h,
                    xd,
                    x as C,
                    yd,
                    y as C,
                    c_desc,
                    w_desc,
                    w as P,
                    16,
                    &mut got,
                    perf.as_mut_ptr(),
                    wsp,
                    ws_size,
                ),
            }
        };
        if r != 0 {
            continue;
        }
        for p in &perf[..(got.max(0) as usize).min(16)] {
            if p.status == 0 && p.time >= 0.0 && p.memory as u64 <= limit && p.memory <= ws_size {
                out.push(Micro {
                    batch: b,
                    algo: p.algo,
                    time_ms: p.time as f64,
                    workspace: p.memory as u64,
                });
            }
        }
    }
    for p in [x, y, w, ws].into_iter().filter(|&p| p != 0) {
        dev_free(p);
    }
    Measured {
        micro: out,
        complete,
    }
}

/// Why a micro-configuration read from the database is not one the library would answer now:
/// an algorithm (or engine) it does not offer for the convolution at that micro-batch size, a
/// workspace below what it asks for that choice, or a size or time no benchmark gives. None: it
/// stands.
fn invalid_micro(
    m: &Micro,
    n: u64,
    choice: &str,
    library: impl Fn(u64, c_int) -> Option<u64>,
) -> Option<String> {
    if m.batch == 0 || m.batch > n {
        return Some(format!(
            "a micro-batch of {} images, for a convolution of {n}",
            m.batch
        ));
    }
    if !(m.time_ms.is_finite() && m.time_ms >= 0.0) {
        return Some(format!(
            "a time of {} ms for {choice} {} on {} images",
            m.time_ms, m.algo, m.batch
        ));
    }
    match library(m.batch, m.algo) {
        None => Some(format!(
            "{choice} {} on {} images, which cuDNN does not offer for this convolution",
            m.algo, m.batch
        )),
        Some(need) if m.workspace < need => Some(format!(
            "{} B of workspace for {choice} {} on {} images, where cuDNN asks {need} B",
            m.workspace, m.algo, m.batch
        )),
        Some(_) => None,
    }
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
