//! cuDNN hooks: the convolutions and their queries, the other compute calls, descriptors, and
//! the backend API. Shapes are read with the real Nd getters (frameworks set descriptors with
//! the Nd setters); backend executions are resolved by walking the plan with the real
//! `cudnnBackendGetAttribute`.

use super::{Pending, hooks, range};
use crate::ffi::table;
use planner::trace::{
    Access, ActivationParams, BatchNormParams, ConvParams, Event, Replay, TensorArg, Touch,
};
use std::ffi::{c_int, c_void};

type P = *mut c_void;
type C = *const c_void;

const NOT_INITIALIZED: c_int = 1001;

fn elem_bytes(dtype: c_int) -> u64 {
    crate::microbatch::elem_bytes(dtype) as u64
}

/// (dims, strides, bytes spanned) of a tensor descriptor.
fn tensor(d: C) -> Option<(Vec<i64>, Vec<i64>, u64)> {
    let get = table::cudnnGetTensorNdDescriptor()?;
    let (mut dt, mut nb) = (0, 0);
    let (mut dims, mut strides) = ([0 as c_int; 8], [0 as c_int; 8]);
    // SAFETY: output arrays of 8 entries, as requested.
    if unsafe {
        get(
            d,
            8,
            &mut dt,
            &mut nb,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
        )
    } != 0
    {
        return None;
    }
    let nb = (nb as usize).min(8);
    let dims: Vec<i64> = dims[..nb].iter().map(|&v| v as i64).collect();
    let strides: Vec<i64> = strides[..nb].iter().map(|&v| v as i64).collect();
    let span = 1 + dims
        .iter()
        .zip(&strides)
        .map(|(d, s)| (d - 1).max(0) * s)
        .sum::<i64>();
    Some((dims, strides, span as u64 * elem_bytes(dt)))
}

/// (dims, strides, bytes) of a filter descriptor (packed, KCRS or KRSC).
fn filter(d: C) -> Option<(Vec<i64>, Vec<i64>, u64)> {
    let get = table::cudnnGetFilterNdDescriptor()?;
    let (mut dt, mut fmt, mut nb) = (0, 0, 0);
    let mut dims = [0 as c_int; 8];
    // SAFETY: an output array of 8 entries, as requested.
    if unsafe { get(d, 8, &mut dt, &mut fmt, &mut nb, dims.as_mut_ptr()) } != 0 {
        return None;
    }
    let nb = (nb as usize).min(8);
    let dims: Vec<i64> = dims[..nb].iter().map(|&v| v as i64).collect();
    let order: Vec<usize> = if fmt == 1 && nb > 2 {
        std::iter::once(0)
            .chain(2..nb)
            .chain(std::iter::once(1))
            .collect()
    } else {
        (0..nb).collect()
    };
    let mut strides = vec![0; nb];
    let mut acc = 1;
    for &i in order.iter().rev() {
        strides[i] = acc;
        acc *= dims[i];
    }
    Some((dims, strides, acc as u64 * elem_bytes(dt)))
}

/// The data type of a tensor descriptor.
fn dtype(d: C) -> Option<c_int> {
    let get = table::cudnnGetTensorNdDescriptor()?;
    let (mut dt, mut nb) = (0, 0);
    let (mut dims, mut strides) = ([0 as c_int; 8], [0 as c_int; 8]);
    // SAFETY: output arrays of 8 entries, as requested.
    let r = unsafe {
        get(
            d,
            8,
            &mut dt,
            &mut nb,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
        )
    };
    (r == 0).then_some(dt)
}

const DATA_DOUBLE: c_int = 1;

/// A scaling parameter's value: a double for double tensors, else a float (cuDNN's rule).
fn scalar(p: C, dt: Option<c_int>) -> Option<f64> {
    if p.is_null() {
        return None;
    }
    Some(if dt == Some(DATA_DOUBLE) {
        // SAFETY: scaling parameters of double tensors point to a double.
        unsafe { *(p as *const f64) }
    } else {
        // SAFETY: scaling parameters of other tensors point to a float.
        unsafe { *(p as *const f32) as f64 }
    })
}

/// A convolution descriptor's parameters, read with the real getters.
fn conv_params(cd: C) -> Option<ConvParams> {
    let get = table::cudnnGetConvolutionNdDescriptor()?;
    let (mut nb, mut mode, mut compute) = (0, 0, 0);
    let (mut pads, mut strides, mut dil) = ([0 as c_int; 8], [0 as c_int; 8], [0 as c_int; 8]);
    // SAFETY: output arrays of 8 entries, as requested; valid output pointers.
    let r = unsafe {
        get(
            cd,
            8,
            &mut nb,
            pads.as_mut_ptr(),
            strides.as_mut_ptr(),
            dil.as_mut_ptr(),
            &mut mode,
            &mut compute,
        )
    };
    if r != 0 {
        return None;
    }
    let nb = (nb.max(0) as usize).min(8);
    let (mut groups, mut math) = (1, 0);
    if let Some(g) = table::cudnnGetConvolutionGroupCount() {
        // SAFETY: a valid output pointer; on failure the default stays.
        unsafe { g(cd, &mut groups) };
    }
    if let Some(m) = table::cudnnGetConvolutionMathType() {
        // SAFETY: as above.
        unsafe { m(cd, &mut math) };
    }
    Some(ConvParams {
        pads: pads[..nb].to_vec(),
        strides: strides[..nb].to_vec(),
        dilations: dil[..nb].to_vec(),
        mode,
        compute,
        groups,
        math,
    })
}

/// An activation descriptor's parameters.
fn activation_params(ad: C) -> Option<ActivationParams> {
    let get = table::cudnnGetActivationDescriptor()?;
    let (mut mode, mut nan, mut coef) = (0, 0, 0.0f64);
    // SAFETY: valid output pointers.
    (unsafe { get(ad, &mut mode, &mut nan, &mut coef) } == 0).then_some(ActivationParams {
        mode,
        nan,
        coef,
    })
}

/// Lineage of a cuDNN computation: scaling parameters, data type (of tensor descriptor `td`),
/// and the convolution / activation descriptors and softmax settings it used.
fn lineage(
    p: Option<Pending>,
    (alpha, beta, td): (C, C, C),
    conv: Option<C>,
    act: Option<C>,
    softmax: Option<(c_int, c_int)>,
) -> Option<Pending> {
    super::runtime::with_lineage(p, || {
        let dt = dtype(td);
        Some(Replay::Cudnn {
            alpha: scalar(alpha, dt),
            beta: scalar(beta, dt),
            dtype: dt,
            conv: conv.and_then(conv_params),
            activation: act.and_then(activation_params),
            softmax,
            batchnorm: None,
        })
    })
}

/// Lineage of a batch normalisation's training forward pass: its scaling parameters, mode,
/// operations and epsilon (the exponential-average factor is not needed: a replay updates no
/// running statistics).
fn bn_lineage(
    p: Option<Pending>,
    (alpha, beta, xd): (C, C, C),
    mode: c_int,
    ops: c_int,
    epsilon: f64,
) -> Option<Pending> {
    super::runtime::with_lineage(p, || {
        let dt = dtype(xd);
        Some(Replay::Cudnn {
            alpha: scalar(alpha, dt),
            beta: scalar(beta, dt),
            dtype: dt,
            conv: None,
            activation: None,
            softmax: None,
            batchnorm: Some(BatchNormParams { mode, ops, epsilon }),
        })
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Tensor,
    Filter,
}

/// Describes the call's tensors: (role, descriptor kind, descriptor, pointer, access).
fn args(list: &[(&str, Kind, C, C, Access)]) -> (Vec<TensorArg>, Vec<Touch>) {
    let (mut tensors, mut touches) = (Vec::new(), Vec::new());
    for &(role, kind, desc, ptr, access) in list {
        let Some((dims, strides, bytes)) = (match kind {
            Kind::Tensor => tensor(desc),
            Kind::Filter => filter(desc),
        }) else {
            continue;
        };
        touches.extend(range(ptr as u64, bytes, access));
        tensors.push(TensorArg {
            role: role.into(),
            ptr: ptr as u64,
            dims,
            strides,
            access,
            uid: None,
        });
    }
    (tensors, touches)
}

fn stream_of(h: P) -> Option<u64> {
    let get = table::cudnnGetStream()?;
    let mut s: P = std::ptr::null_mut();
    // SAFETY: valid output pointer; h is the caller's handle.
    (unsafe { get(h, &mut s) } == 0).then_some(s as u64)
}

/// The output is read too when beta is not 0 (float scaling parameters).
fn out_access(beta: C) -> Access {
    // SAFETY: beta points to a float for float tensors (cuDNN's scaling-parameter rule).
    if !beta.is_null() && unsafe { *(beta as *const f32) } != 0.0 {
        Access::Rw
    } else {
        Access::W
    }
}

fn call(
    api: &str,
    h: P,
    algo: Option<c_int>,
    ws: Option<(C, usize)>,
    list: &[(&str, Kind, C, C, Access)],
    timed: bool,
) -> Option<Pending> {
    let (mut tensors, mut touches) = args(list);
    if let Some((p, n)) = ws
        && !p.is_null()
        && n > 0
    {
        touches.extend(range(p as u64, n as u64, Access::Rw));
        tensors.push(TensorArg {
            role: "workspace".into(),
            ptr: p as u64,
            dims: vec![],
            strides: vec![],
            access: Access::Rw,
            uid: None,
        });
    }
    let stream = stream_of(h);
    let p = Pending::new(Event::Cudnn {
        api: api.into(),
        stream,
        algo,
        workspace: ws.map(|w| w.1 as u64),
        tensors,
        touches,
        result: 0,
    });
    Some(if timed {
        p.timed(stream.unwrap_or(0))
    } else {
        p
    })
}

/// Adds an untyped device buffer the call reads and writes (BatchNorm's reserve space).
fn raw(p: Option<Pending>, role: &str, ptr: C, bytes: usize) -> Option<Pending> {
    let mut p = p?;
    if let Event::Cudnn {
        tensors, touches, ..
    } = &mut p.event
        && !ptr.is_null()
        && bytes > 0
    {
        touches.extend(range(ptr as u64, bytes as u64, Rw));
        tensors.push(TensorArg {
            role: role.into(),
            ptr: ptr as u64,
            dims: vec![],
            strides: vec![],
            access: Rw,
            uid: None,
        });
    }
    Some(p)
}

use crate::ffi::cudnn::AlgoPerf;
use crate::ffi::cudnn_backend::plan_life;
use crate::microbatch::{self, Call, Dir, Query, backend};
use Access::{R, Rw, W};

type ConvFn = unsafe extern "C" fn(P, C, C, C, C, C, C, c_int, P, usize, C, C, P) -> c_int;

fn conv(entry: &'static super::Entry, h: P, q: Query, c: Call, real: ConvFn) -> Option<c_int> {
    super::attempt(entry, || microbatch::run(h, &q, &c, real))
}

fn query(
    entry: &'static super::Entry,
    h: P,
    q: Query,
    req: c_int,
    ret: *mut c_int,
    perf: P,
) -> Option<c_int> {
    super::attempt(entry, || {
        microbatch::answer_query(h, &q, req, ret, perf as *mut AlgoPerf)
    })
}

fn workspace(entry: &'static super::Entry, h: P, q: Query, size: *mut usize) -> Option<c_int> {
    super::attempt(entry, || microbatch::answer_workspace(h, &q, size))
}
use Kind::{Filter as F, Tensor as T};

// SAFETY (every `unsafe { real(..) }` in this table): `real` is the real function of the
// entry's own name and signature (see `hooks!`), called with the caller's arguments unchanged.
hooks! {
    libs = crate::ffi::real::CUDNN, unavailable = NOT_INITIALIZED, names = (entry, real);
    [""] fn cudnnConvolutionForward(h: P, alpha: C, xd: C, x: C, wd: C, w: C, cd: C, algo: c_int, ws: P, wss: usize,
        beta: C, yd: C, y: P) =>
        lineage(
            call("cudnnConvolutionForward", h, Some(algo), Some((ws, wss)),
            &[("x", T, xd, x, R), ("w", F, wd, w, R), ("y", T, yd, y, out_access(beta))], true),
            (alpha, beta, xd), Some(cd), None, None),
        call = conv(entry, h, Query { dir: Dir::Fwd, x: xd, w: wd, conv: cd, y: yd },
            Call { alpha, beta, x: x as usize, w: w as usize, y: y as usize, ws, ws_size: wss }, real)
            .unwrap_or_else(|| unsafe { real(h, alpha, xd, x, wd, w, cd, algo, ws, wss, beta, yd, y) });
    [""] fn cudnnConvolutionBackwardData(h: P, alpha: C, wd: C, w: C, dyd: C, dy: C, cd: C, algo: c_int, ws: P, wss: usize,
        beta: C, dxd: C, dx: P) =>
        lineage(
            call("cudnnConvolutionBackwardData", h, Some(algo), Some((ws, wss)),
            &[("w", F, wd, w, R), ("dy", T, dyd, dy, R), ("dx", T, dxd, dx, out_access(beta))], true),
            (alpha, beta, dyd), Some(cd), None, None),
        call = conv(entry, h, Query { dir: Dir::BwdData, x: dxd, w: wd, conv: cd, y: dyd },
            Call { alpha, beta, x: dx as usize, w: w as usize, y: dy as usize, ws, ws_size: wss }, real)
            .unwrap_or_else(|| unsafe { real(h, alpha, wd, w, dyd, dy, cd, algo, ws, wss, beta, dxd, dx) });
    [""] fn cudnnConvolutionBackwardFilter(h: P, alpha: C, xd: C, x: C, dyd: C, dy: C, cd: C, algo: c_int, ws: P,
        wss: usize, beta: C, dwd: C, dw: P) =>
        lineage(
            call("cudnnConvolutionBackwardFilter", h, Some(algo), Some((ws, wss)),
            &[("x", T, xd, x, R), ("dy", T, dyd, dy, R), ("dw", F, dwd, dw, out_access(beta))], true),
            (alpha, beta, xd), Some(cd), None, None),
        call = conv(entry, h, Query { dir: Dir::BwdFilter, x: xd, w: dwd, conv: cd, y: dyd },
            Call { alpha, beta, x: x as usize, w: dw as usize, y: dy as usize, ws, ws_size: wss }, real)
            .unwrap_or_else(|| unsafe { real(h, alpha, xd, x, dyd, dy, cd, algo, ws, wss, beta, dwd, dw) });
    [""] fn cudnnConvolutionBackwardBias(h: P, alpha: C, dyd: C, dy: C, beta: C, dbd: C, db: P) =>
        lineage(
            call("cudnnConvolutionBackwardBias", h, None, None, &[("dy", T, dyd, dy, R), ("db", T, dbd, db, out_access(beta))], true),
            (alpha, beta, dyd), None, None, None);
    [""] fn cudnnFindConvolutionForwardAlgorithm(h: P, xd: C, wd: C, cd: C, yd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnFindConvolutionForwardAlgorithm", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::Fwd, x: xd, w: wd, conv: cd, y: yd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, wd, cd, yd, req, ret, perf) });
    [""] fn cudnnFindConvolutionBackwardDataAlgorithm(h: P, wd: C, dyd: C, cd: C, dxd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnFindConvolutionBackwardDataAlgorithm", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::BwdData, x: dxd, w: wd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, wd, dyd, cd, dxd, req, ret, perf) });
    [""] fn cudnnFindConvolutionBackwardFilterAlgorithm(h: P, xd: C, dyd: C, cd: C, dwd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnFindConvolutionBackwardFilterAlgorithm", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::BwdFilter, x: xd, w: dwd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, dyd, cd, dwd, req, ret, perf) });
    [""] fn cudnnFindConvolutionForwardAlgorithmEx(h: P, xd: C, x: C, wd: C, w: C, cd: C, yd: C, y: P, req: c_int,
        ret: *mut c_int, perf: P, ws: P, wss: usize) =>
        call("cudnnFindConvolutionForwardAlgorithmEx", h, None, Some((ws, wss)),
            &[("x", T, xd, x, R), ("w", F, wd, w, R), ("y", T, yd, y, Access::W)], false),
        call = query(entry, h, Query { dir: Dir::Fwd, x: xd, w: wd, conv: cd, y: yd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, x, wd, w, cd, yd, y, req, ret, perf, ws, wss) });
    [""] fn cudnnFindConvolutionBackwardDataAlgorithmEx(h: P, wd: C, w: C, dyd: C, dy: C, cd: C, dxd: C, dx: P, req: c_int,
        ret: *mut c_int, perf: P, ws: P, wss: usize) =>
        call("cudnnFindConvolutionBackwardDataAlgorithmEx", h, None, Some((ws, wss)),
            &[("w", F, wd, w, R), ("dy", T, dyd, dy, R), ("dx", T, dxd, dx, Access::W)], false),
        call = query(entry, h, Query { dir: Dir::BwdData, x: dxd, w: wd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, wd, w, dyd, dy, cd, dxd, dx, req, ret, perf, ws, wss) });
    [""] fn cudnnFindConvolutionBackwardFilterAlgorithmEx(h: P, xd: C, x: C, dyd: C, dy: C, cd: C, dwd: C, dw: P, req: c_int,
        ret: *mut c_int, perf: P, ws: P, wss: usize) =>
        call("cudnnFindConvolutionBackwardFilterAlgorithmEx", h, None, Some((ws, wss)),
            &[("x", T, xd, x, R), ("dy", T, dyd, dy, R), ("dw", F, dwd, dw, Access::W)], false),
        call = query(entry, h, Query { dir: Dir::BwdFilter, x: xd, w: dwd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, x, dyd, dy, cd, dwd, dw, req, ret, perf, ws, wss) });
    [""] fn cudnnGetConvolutionForwardAlgorithm_v7(h: P, xd: C, wd: C, cd: C, yd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnGetConvolutionForwardAlgorithm_v7", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::Fwd, x: xd, w: wd, conv: cd, y: yd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, wd, cd, yd, req, ret, perf) });
    [""] fn cudnnGetConvolutionBackwardDataAlgorithm_v7(h: P, wd: C, dyd: C, cd: C, dxd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnGetConvolutionBackwardDataAlgorithm_v7", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::BwdData, x: dxd, w: wd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, wd, dyd, cd, dxd, req, ret, perf) });
    [""] fn cudnnGetConvolutionBackwardFilterAlgorithm_v7(h: P, xd: C, dyd: C, cd: C, dwd: C, req: c_int, ret: *mut c_int, perf: P) =>
        call("cudnnGetConvolutionBackwardFilterAlgorithm_v7", h, None, None, &[], false),
        call = query(entry, h, Query { dir: Dir::BwdFilter, x: xd, w: dwd, conv: cd, y: dyd }, req, ret, perf)
            .unwrap_or_else(|| unsafe { real(h, xd, dyd, cd, dwd, req, ret, perf) });
    [""] fn cudnnGetConvolutionForwardWorkspaceSize(h: P, xd: C, wd: C, cd: C, yd: C, algo: c_int, size: *mut usize) =>
        call("cudnnGetConvolutionForwardWorkspaceSize", h, Some(algo), None, &[], false),
        call = workspace(entry, h, Query { dir: Dir::Fwd, x: xd, w: wd, conv: cd, y: yd }, size)
            .unwrap_or_else(|| unsafe { real(h, xd, wd, cd, yd, algo, size) });
    [""] fn cudnnGetConvolutionBackwardDataWorkspaceSize(h: P, wd: C, dyd: C, cd: C, dxd: C, algo: c_int, size: *mut usize) =>
        call("cudnnGetConvolutionBackwardDataWorkspaceSize", h, Some(algo), None, &[], false),
        call = workspace(entry, h, Query { dir: Dir::BwdData, x: dxd, w: wd, conv: cd, y: dyd }, size)
            .unwrap_or_else(|| unsafe { real(h, wd, dyd, cd, dxd, algo, size) });
    [""] fn cudnnGetConvolutionBackwardFilterWorkspaceSize(h: P, xd: C, dyd: C, cd: C, dwd: C, algo: c_int, size: *mut usize) =>
        call("cudnnGetConvolutionBackwardFilterWorkspaceSize", h, Some(algo), None, &[], false),
        call = workspace(entry, h, Query { dir: Dir::BwdFilter, x: xd, w: dwd, conv: cd, y: dyd }, size)
            .unwrap_or_else(|| unsafe { real(h, xd, dyd, cd, dwd, algo, size) });
    [""] fn cudnnActivationForward(h: P, ad: C, alpha: C, xd: C, x: C, beta: C, yd: C, y: P) =>
        lineage(
            call("cudnnActivationForward", h, None, None, &[("x", T, xd, x, R), ("y", T, yd, y, out_access(beta))], true),
            (alpha, beta, xd), None, Some(ad), None);
    [""] fn cudnnActivationBackward(h: P, ad: C, alpha: C, yd: C, y: C, dyd: C, dy: C, xd: C, x: C, beta: C, dxd: C, dx: P) =>
        lineage(
            call("cudnnActivationBackward", h, None, None,
            &[("y", T, yd, y, R), ("dy", T, dyd, dy, R), ("x", T, xd, x, R), ("dx", T, dxd, dx, out_access(beta))], true),
            (alpha, beta, yd), None, Some(ad), None);
    [""] fn cudnnPoolingForward(h: P, pd: C, alpha: C, xd: C, x: C, beta: C, yd: C, y: P) =>
        lineage(
            call("cudnnPoolingForward", h, None, None, &[("x", T, xd, x, R), ("y", T, yd, y, out_access(beta))], true),
            (alpha, beta, xd), None, None, None);
    [""] fn cudnnPoolingBackward(h: P, pd: C, alpha: C, yd: C, y: C, dyd: C, dy: C, xd: C, x: C, beta: C, dxd: C, dx: P) =>
        lineage(
            call("cudnnPoolingBackward", h, None, None,
            &[("y", T, yd, y, R), ("dy", T, dyd, dy, R), ("x", T, xd, x, R), ("dx", T, dxd, dx, out_access(beta))], true),
            (alpha, beta, yd), None, None, None);
    [""] fn cudnnSoftmaxForward(h: P, algo: c_int, mode: c_int, alpha: C, xd: C, x: C, beta: C, yd: C, y: P) =>
        lineage(
            call("cudnnSoftmaxForward", h, None, None, &[("x", T, xd, x, R), ("y", T, yd, y, out_access(beta))], true),
            (alpha, beta, xd), None, None, Some((algo, mode)));
    [""] fn cudnnSoftmaxBackward(h: P, algo: c_int, mode: c_int, alpha: C, yd: C, y: C, dyd: C, dy: C, beta: C, dxd: C, dx: P) =>
        lineage(
            call("cudnnSoftmaxBackward", h, None, None,
            &[("y", T, yd, y, R), ("dy", T, dyd, dy, R), ("dx", T, dxd, dx, out_access(beta))], true),
            (alpha, beta, yd), None, None, Some((algo, mode)));
    [""] fn cudnnAddTensor(h: P, alpha: C, ad: C, a: C, beta: C, cdesc: C, c: P) =>
        lineage(
            call("cudnnAddTensor", h, None, None, &[("a", T, ad, a, R), ("c", T, cdesc, c, out_access(beta))], true),
            (alpha, beta, ad), None, None, None);
    [""] fn cudnnBatchNormalizationForwardTraining(h: P, mode: c_int, alpha: C, beta: C, xd: C, x: C, yd: C, y: P, pd: C,
        scale: C, bias: C, factor: f64, rmean: P, rvar: P, eps: f64, smean: P, sinv: P) =>
        bn_lineage(call("cudnnBatchNormalizationForwardTraining", h, None, None,
            &[("x", T, xd, x, R), ("y", T, yd, y, out_access(beta)), ("scale", T, pd, scale, R), ("bias", T, pd, bias, R),
              ("running_mean", T, pd, rmean, Rw), ("running_var", T, pd, rvar, Rw),
              ("saved_mean", T, pd, smean, W), ("saved_inv_var", T, pd, sinv, W)], true),
            (alpha, beta, xd), mode, 0, eps);
    [""] fn cudnnBatchNormalizationForwardTrainingEx(h: P, mode: c_int, ops: c_int, alpha: C, beta: C, xd: C, x: C, zd: C,
        z: C, yd: C, y: P, pd: C, scale: C, bias: C, factor: f64, rmean: P, rvar: P, eps: f64, smean: P, sinv: P, ad: C,
        ws: P, wss: usize, rs: P, rss: usize) =>
        bn_lineage(raw(call("cudnnBatchNormalizationForwardTrainingEx", h, None, Some((ws, wss)),
            &[("x", T, xd, x, R), ("z", T, zd, z, R), ("y", T, yd, y, out_access(beta)), ("scale", T, pd, scale, R),
              ("bias", T, pd, bias, R), ("running_mean", T, pd, rmean, Rw), ("running_var", T, pd, rvar, Rw),
              ("saved_mean", T, pd, smean, W), ("saved_inv_var", T, pd, sinv, W)], true),
            "reserve", rs, rss),
            (alpha, beta, xd), mode, ops, eps);
    [""] fn cudnnBatchNormalizationForwardInference(h: P, mode: c_int, alpha: C, beta: C, xd: C, x: C, yd: C, y: P, pd: C,
        scale: C, bias: C, mean: C, var: C, eps: f64) =>
        call("cudnnBatchNormalizationForwardInference", h, None, None,
            &[("x", T, xd, x, R), ("y", T, yd, y, out_access(beta)), ("scale", T, pd, scale, R), ("bias", T, pd, bias, R),
              ("mean", T, pd, mean, R), ("var", T, pd, var, R)], true);
    [""] fn cudnnBatchNormalizationBackward(h: P, mode: c_int, ad: C, bd: C, ap: C, bp: C, xd: C, x: C, dyd: C, dy: C,
        dxd: C, dx: P, pd: C, scale: C, dscale: P, dbias: P, eps: f64, smean: C, sinv: C) =>
        call("cudnnBatchNormalizationBackward", h, None, None,
            &[("x", T, xd, x, R), ("dy", T, dyd, dy, R), ("dx", T, dxd, dx, out_access(bd)), ("scale", T, pd, scale, R),
              ("dscale", T, pd, dscale, out_access(bp)), ("dbias", T, pd, dbias, out_access(bp)),
              ("saved_mean", T, pd, smean, R), ("saved_inv_var", T, pd, sinv, R)], true);
    [""] fn cudnnBatchNormalizationBackwardEx(h: P, mode: c_int, ops: c_int, ad: C, bd: C, ap: C, bp: C, xd: C, x: C,
        yd: C, y: C, dyd: C, dy: C, dzd: C, dz: P, dxd: C, dx: P, pd: C, scale: C, bias: C, dscale: P, dbias: P, eps: f64,
        smean: C, sinv: C, act: C, ws: P, wss: usize, rs: P, rss: usize) =>
        raw(call("cudnnBatchNormalizationBackwardEx", h, None, Some((ws, wss)),
            &[("x", T, xd, x, R), ("y", T, yd, y, R), ("dy", T, dyd, dy, R), ("dz", T, dzd, dz, W),
              ("dx", T, dxd, dx, out_access(bd)), ("scale", T, pd, scale, R), ("bias", T, pd, bias, R),
              ("dscale", T, pd, dscale, out_access(bp)), ("dbias", T, pd, dbias, out_access(bp)),
              ("saved_mean", T, pd, smean, R), ("saved_inv_var", T, pd, sinv, R)], true),
            "reserve", rs, rss);
    [""] fn cudnnSetStream(h: P, s: P) => None;
    [""] fn cudnnSetTensor4dDescriptor(d: P, fmt: c_int, dt: c_int, n: c_int, c: c_int, hh: c_int, w: c_int) => None;
    [""] fn cudnnSetTensor4dDescriptorEx(d: P, dt: c_int, n: c_int, c: c_int, hh: c_int, w: c_int, ns: c_int, cs: c_int,
        hs: c_int, ws: c_int) => None;
    [""] fn cudnnSetTensorNdDescriptor(d: P, dt: c_int, nb: c_int, dims: *const c_int, strides: *const c_int) => None;
    [""] fn cudnnGetTensorNdDescriptor(d: C, req: c_int, dt: *mut c_int, nb: *mut c_int, dims: *mut c_int, st: *mut c_int) => None;
    [""] fn cudnnSetFilter4dDescriptor(d: P, dt: c_int, fmt: c_int, k: c_int, c: c_int, hh: c_int, w: c_int) => None;
    [""] fn cudnnSetFilterNdDescriptor(d: P, dt: c_int, fmt: c_int, nb: c_int, dims: *const c_int) => None;
    [""] fn cudnnGetFilterNdDescriptor(d: C, req: c_int, dt: *mut c_int, fmt: *mut c_int, nb: *mut c_int, dims: *mut c_int) => None;
    [""] fn cudnnSetConvolution2dDescriptor(d: P, ph: c_int, pw: c_int, u: c_int, v: c_int, dh: c_int, dw: c_int, mode: c_int,
        ct: c_int) => None;
    [""] fn cudnnSetConvolutionNdDescriptor(d: P, len: c_int, pad: *const c_int, st: *const c_int, dil: *const c_int,
        mode: c_int, ct: c_int) => None;
    [""] fn cudnnGetConvolutionNdDescriptor(d: C, req: c_int, len: *mut c_int, pad: *mut c_int, st: *mut c_int, dil: *mut c_int,
        mode: *mut c_int, ct: *mut c_int) => None;
    [""] fn cudnnSetConvolutionGroupCount(d: P, g: c_int) => None;
    [""] fn cudnnSetConvolutionMathType(d: P, m: c_int) => None;
    [""] fn cudnnBackendCreateDescriptor(ty: c_int, d: *mut P) => None,
        call = {
            let r = unsafe { real(ty, d) };
            if r == 0 && !d.is_null() {
                // SAFETY: cuDNN wrote the new descriptor through the caller's non-null pointer.
                let made = unsafe { *d } as usize;
                super::attempt(entry, || { backend::created(ty, made); Some(()) });
                super::attempt(entry, || { crate::ffi::variant_pack::created(ty, made); Some(()) });
            }
            r
        };
    [""] fn cudnnBackendDestroyDescriptor(d: P) => None,
        call = {
            super::attempt(entry, || { backend::destroyed(d as usize); Some(()) });
            super::attempt(entry, || { crate::ffi::variant_pack::destroyed(d as usize); Some(()) });
            // What the online policy rebuilds through this plan, it rebuilds while it exists.
            super::attempt(entry, || { crate::virt::online::before_plan_gone(d as u64); Some(()) });
            unsafe { real(d) }
        };
    [""] fn cudnnBackendSetAttribute(d: P, name: c_int, ty: c_int, n: i64, v: C) => None,
        call = {
            let r = unsafe { real(d, name, ty, n, v) };
            if r == 0 {
                super::attempt(entry, || { crate::ffi::variant_pack::set(d as usize, name, ty, n, v); Some(()) });
            }
            r
        };
    [""] fn cudnnBackendGetAttribute(d: C, name: c_int, ty: c_int, req: i64, n: *mut i64, v: P) => None,
        call = super::attempt(entry, || plan_workspace(d, name, ty, req, n, v))
            .or_else(|| super::attempt(entry, || backend::heuristic_results(d as usize, name, ty, req, n, v)))
            .unwrap_or_else(|| unsafe { real(d, name, ty, req, n, v) });
    [""] fn cudnnBackendFinalize(d: P) => None,
        call = {
            let r = unsafe { real(d) };
            if r == 0 {
                super::attempt(entry, || { backend::finalized(d as usize); Some(()) });
            }
            r
        };
    [""] fn cudnnBackendExecute(h: P, plan: P, pack: P) => backend_execute(h, plan, pack),
        call = super::attempt(entry, || backend::execute(h, plan as usize, pack as usize))
            .unwrap_or_else(|| unsafe { real(h, plan, pack) });
}

// ==================================================================== backend executions

/// A planned plan's workspace-size query answers its configuration's workspace (WR).
fn plan_workspace(d: C, name: c_int, ty: c_int, req: i64, n: *mut i64, v: P) -> Option<c_int> {
    if name != EXECUTION_PLAN_WORKSPACE_SIZE || ty != TYPE_INT64 || req < 1 || v.is_null() {
        return None;
    }
    let ws = backend::workspace_answer(d as usize)?;
    // SAFETY: v holds `req` >= 1 INT64 values; n, when given, one (the API's contract).
    unsafe {
        *(v as *mut i64) = ws;
        if !n.is_null() {
            *n = 1;
        }
    }
    Some(0)
}

const TYPE_INT64: c_int = 3;
const TYPE_VOID_PTR: c_int = 6;
const EXECUTION_PLAN_WORKSPACE_SIZE: c_int = 402;
const VARIANT_PACK_UNIQUE_IDS: c_int = 1000;
const VARIANT_PACK_DATA_POINTERS: c_int = 1001;
const VARIANT_PACK_WORKSPACE: c_int = 1003;

fn get_attr(d: usize, name: c_int, ty: c_int, max: usize) -> Option<Vec<i64>> {
    let get = table::cudnnBackendGetAttribute()?;
    let mut n = 0i64;
    let mut v = vec![0i64; max];
    // SAFETY: v holds `max` 8-byte elements (all the attribute types read here are 8 bytes).
    (unsafe { get(d as C, name, ty, max as i64, &mut n, v.as_mut_ptr() as P) } == 0).then(|| {
        v.truncate((n.max(0) as usize).min(max));
        v
    })
}

fn one(d: usize, name: c_int, ty: c_int) -> Option<i64> {
    get_attr(d, name, ty, 1)?.first().copied()
}

/// A convolution tensor of a plan: (unique id, role, access, dims, strides).
type PlanTensor = (i64, &'static str, Access, Vec<i64>, Vec<i64>);

/// Every tensor of the plan with a pointer (read back with the real GetAttribute into
/// descriptors Marmoset creates, as the real library requires).
fn plan_tensors(plan: usize) -> Vec<PlanTensor> {
    backend::traced_tensors(plan)
}

fn backend_execute(h: P, plan: P, pack: P) -> Option<Pending> {
    // The pack as the program filled it; read back from cuDNN only where Marmoset did not see
    // it made (the real cuDNN does not always give it back).
    let set = crate::ffi::variant_pack::contents(pack as usize).filter(|p| !p.uids.is_empty());
    let ids = match &set {
        Some(p) => p.uids.clone(),
        None => {
            get_attr(pack as usize, VARIANT_PACK_UNIQUE_IDS, TYPE_INT64, 256).unwrap_or_default()
        }
    };
    let ptrs: Vec<i64> = match &set {
        Some(p) => p.ptrs.iter().map(|&x| x as i64).collect(),
        None => get_attr(
            pack as usize,
            VARIANT_PACK_DATA_POINTERS,
            TYPE_VOID_PTR,
            256,
        )
        .unwrap_or_default(),
    };
    let known = plan_tensors(plan as usize);
    let (mut tensors, mut touches) = (Vec::new(), Vec::new());
    for (uid, ptr) in ids.iter().zip(&ptrs) {
        let ptr = *ptr as u64;
        let (role, access, dims, strides, id) = match known.iter().find(|k| k.0 == *uid) {
            Some((_, role, access, dims, strides)) => (
                role.to_string(),
                *access,
                dims.clone(),
                strides.clone(),
                Some(*uid),
            ),
            None => (format!("uid{uid}"), Rw, Vec::new(), Vec::new(), None),
        };
        let span = 1 + dims
            .iter()
            .zip(&strides)
            .map(|(d, s)| (d - 1).max(0) * s)
            .sum::<i64>();
        touches.extend(range(
            ptr,
            if dims.is_empty() { 1 } else { 4 * span as u64 },
            access,
        ));
        tensors.push(TensorArg {
            role,
            ptr,
            dims,
            strides,
            access,
            uid: id,
        });
    }
    let ws = match set.as_ref().and_then(|p| p.workspace) {
        Some(w) => w,
        None => one(pack as usize, VARIANT_PACK_WORKSPACE, TYPE_VOID_PTR).unwrap_or(0) as u64,
    };
    // The workspace the program provides: what its size query was answered (μ-cuDNN's
    // configuration's for a planned plan, the plan's own otherwise). A replay brings that much.
    let ws_size = backend::workspace_answer(plan as usize)
        .or_else(|| one(plan as usize, EXECUTION_PLAN_WORKSPACE_SIZE, TYPE_INT64))
        .unwrap_or(0)
        .max(0) as u64;
    if ws != 0 && ws_size > 0 {
        touches.extend(range(ws, ws_size, Rw));
        tensors.push(TensorArg {
            role: "workspace".into(),
            ptr: ws,
            dims: vec![],
            strides: vec![],
            access: Rw,
            uid: None,
        });
    }
    let stream = stream_of(h);
    let p = Pending::new(Event::Cudnn {
        api: "cudnnBackendExecute".into(),
        stream,
        algo: None,
        workspace: Some(ws_size),
        tensors,
        touches,
        result: 0,
    });
    // Lineage: the plan and which of the plans made at its address it is (a replay goes
    // through this very plan, never one made later at the same address).
    let lineage = plan_life(plan as usize).map(|life| Replay::Backend {
        plan: plan as u64,
        life,
    });
    super::runtime::with_lineage(Some(p.timed(stream.unwrap_or(0))), || lineage)
}
