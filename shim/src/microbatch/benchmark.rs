//! μ-cuDNN's measurements of a legacy convolution: every algorithm at each micro-batch size,
//! with the real `cudnnFind*AlgorithmEx` on micro-batch descriptors, scratch buffers and a
//! scratch workspace Marmoset owns; the library's own workspace answers; and the device memory
//! Marmoset's buffers come from.

use super::{C, Dir, P, Sig, micro_desc, tensor_bytes};
use crate::core::config::Level;
use crate::core::own_memory;
use crate::core::state::log;
use crate::ffi::cudnn::AlgoPerf;
use crate::ffi::{last_error, table};
use planner::microbatch::Micro;
use std::ffi::{CStr, c_int};

pub(super) fn device_name() -> String {
    let mut buf = [0u8; 256];
    if let Some(f) = table::cuDeviceGetName() {
        // SAFETY: a 256-byte buffer, as stated.
        unsafe { f(buf.as_mut_ptr().cast(), 256, 0) };
    }
    CStr::from_bytes_until_nul(&buf)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

pub(super) fn cudnn_version() -> usize {
    // SAFETY: cudnnGetVersion() takes nothing.
    table::cudnnGetVersion().map_or(0, |v| unsafe { v() })
}

/// Device memory Marmoset owns (scratch buffers, the WD workspace), from the real cudaMalloc.
pub(super) fn dev_alloc(bytes: usize) -> Option<usize> {
    // Under a memory policy Marmoset's own buffers count in the budget too.
    if let Some(p) = own_memory::alloc(bytes) {
        return p.map(|p| p as usize);
    }
    let malloc = table::cudaMalloc()?;
    let mut p: P = std::ptr::null_mut();
    // SAFETY: real cudaMalloc with a valid output pointer.
    (last_error::quietly(|| unsafe { malloc(&mut p, bytes.max(1)) }) == 0).then_some(p as usize)
}

pub(super) fn dev_free(p: usize) {
    if own_memory::free(p as u64) {
        return;
    }
    if let Some(free) = table::cudaFree() {
        // SAFETY: p came from dev_alloc.
        last_error::quietly(|| unsafe { free(p as P) });
    }
}

/// How many algorithms cuDNN has for the direction (its *AlgorithmMaxCount; cuDNN's enum counts
/// when the query is missing).
fn algo_count(h: P, dir: Dir) -> c_int {
    let query = match dir {
        Dir::Fwd => table::cudnnGetConvolutionForwardAlgorithmMaxCount(),
        Dir::BwdData => table::cudnnGetConvolutionBackwardDataAlgorithmMaxCount(),
        Dir::BwdFilter => table::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(),
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
pub(super) fn library_workspace(
    h: P,
    sig: &Sig,
    w_desc: C,
    c_desc: C,
    b: u64,
    algo: c_int,
) -> Option<u64> {
    let get = match sig.dir {
        Dir::Fwd => table::cudnnGetConvolutionForwardWorkspaceSize(),
        Dir::BwdData => table::cudnnGetConvolutionBackwardDataWorkspaceSize(),
        Dir::BwdFilter => table::cudnnGetConvolutionBackwardFilterWorkspaceSize(),
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
pub(super) struct Measured {
    pub(super) micro: Vec<Micro>,
    pub(super) complete: bool,
}

/// The scratch workspace of a benchmark: the most any candidate within the limit needs (the
/// library's answers, never the limit itself). What the device refuses steps down to the next
/// smaller need, leaving out the candidates that need more, with one warning.
/// Returns (address or 0, bytes, whether every candidate fits).
pub(super) fn scratch_workspace(needs: &[u64], what: &str) -> (usize, usize, bool) {
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
pub(super) fn benchmark(
    h: P,
    sig: &Sig,
    w_desc: C,
    c_desc: C,
    sizes: &[u64],
    limit: u64,
) -> Measured {
    let failed = Measured {
        micro: Vec::new(),
        complete: false,
    };
    let find = match sig.dir {
        Dir::Fwd => table::cudnnFindConvolutionForwardAlgorithmEx(),
        Dir::BwdData => table::cudnnFindConvolutionBackwardDataAlgorithmEx(),
        Dir::BwdFilter => table::cudnnFindConvolutionBackwardFilterAlgorithmEx(),
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
pub(super) fn invalid_micro(
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
