//! Batch normalisation as PyTorch's BatchNorm calls it: the derived parameter descriptor, the
//! training forward pass (Ex and plain) with running averages and saved statistics, the backward
//! pass (Ex and plain), inference, and the workspace and reserve-space queries. Only the plain
//! BN operation is simulated (the fused activation / add-activation variants answer
//! NOT_SUPPORTED). Time is a memory-bound pass: the bytes read and written over the profile's
//! bandwidth, at the fraction of it its `batch_norm_efficiency` says.

use simgpu_cudnn_core::batchnorm::{self as bn, BnShape};
use simgpu_cudnn_core::*;

const OPS_BN: c_int = 0;

/// The shape of x for `mode`, checked against the parameter descriptor.
fn shape(mode: c_int, x: &Tensor, param: Option<&Tensor>) -> Result<BnShape, Status> {
    if !(bn::PER_ACTIVATION..=bn::SPATIAL_PERSISTENT).contains(&mode) || !(4..=5).contains(&x.nb) {
        return Err(BAD_PARAM);
    }
    let sh = BnShape {
        n: x.dims[0] as usize,
        c: x.dims[1] as usize,
        s: x.dims[2..x.nb].iter().product::<i64>() as usize,
        per_activation: mode == bn::PER_ACTIVATION,
    };
    if let Some(p) = param {
        let ok = p.nb == x.nb
            && p.dims[0] == 1
            && p.dims[1] == x.dims[1]
            && (2..x.nb).all(|i| p.dims[i] == if sh.per_activation { x.dims[i] } else { 1 });
        if !ok {
            return Err(BAD_PARAM);
        }
    }
    Ok(sh)
}

fn bn_time(s: &Sim, elems: usize, passes: usize) -> f64 {
    let bytes = (4 * elems * passes) as f64;
    s.profile.kernel_time(8.0 * elems as f64, bytes, 1.0, false) / s.profile.batch_norm_efficiency
}

/// Loads an optional parameter vector (NULL pointers are allowed where cuDNN allows them).
fn params(
    s: &Sim,
    p: &Tensor,
    ptr: *const c_void,
    what: &CStr,
) -> Result<Option<Vec<f32>>, Status> {
    if ptr.is_null() {
        Ok(None)
    } else {
        load(s, p, ptr, what).map(Some)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDeriveBNTensorDescriptor(
    derived: Handle,
    xd: *const c_void,
    mode: c_int,
) -> Status {
    run(|| {
        let x = tensor(xd)?;
        let sh = shape(mode, &x, None)?;
        let mut dims = vec![1i64; x.nb];
        dims[1] = sh.c as i64;
        if sh.per_activation {
            dims[2..x.nb].copy_from_slice(&x.dims[2..x.nb]);
        }
        // Half and bfloat16 tensors keep float statistics; float and double keep their own.
        let dtype = if x.dtype == 1 { 1 } else { DATA_FLOAT };
        set_tensor(derived, dtype, &dims, &packed_strides(&dims, TENSOR_NCHW))
    })
}

fn ws_query(h: Handle, mode: c_int, ops: c_int, xd: *const c_void, size: *mut usize) -> Status {
    run(|| {
        handle_stream(h)?;
        shape(mode, &tensor(xd)?, None)?;
        if ops != OPS_BN {
            return Err(NOT_SUPPORTED);
        }
        // The simulated kernels keep no state between passes beyond the saved statistics.
        put(size, 0)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    h: Handle,
    mode: c_int,
    ops: c_int,
    xd: *const c_void,
    _zd: *const c_void,
    _yd: *const c_void,
    _pd: *const c_void,
    _act: *const c_void,
    size: *mut usize,
) -> Status {
    ws_query(h, mode, ops, xd, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    h: Handle,
    mode: c_int,
    ops: c_int,
    xd: *const c_void,
    _yd: *const c_void,
    _dyd: *const c_void,
    _dzd: *const c_void,
    _dxd: *const c_void,
    _pd: *const c_void,
    _act: *const c_void,
    size: *mut usize,
) -> Status {
    ws_query(h, mode, ops, xd, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    h: Handle,
    mode: c_int,
    ops: c_int,
    _act: *const c_void,
    xd: *const c_void,
    size: *mut usize,
) -> Status {
    ws_query(h, mode, ops, xd, size)
}

/// The training forward pass shared by the Ex and plain calls.
fn forward_training(
    h: Handle,
    mode: c_int,
    (alpha, beta): (*const c_void, *const c_void),
    (xd, x): (*const c_void, *const c_void),
    (yd, y): (*const c_void, *mut c_void),
    (pd, scale, bias): (*const c_void, *const c_void, *const c_void),
    factor: f64,
    (run_mean, run_var): (*mut c_void, *mut c_void),
    epsilon: f64,
    (save_mean, save_inv): (*mut c_void, *mut c_void),
) -> Result<(), Status> {
    let s = sim().ok_or(NOT_INITIALIZED)?;
    handle_stream(h)?;
    let (xt, yt, pt) = (tensor(xd)?, tensor(yd)?, tensor(pd)?);
    require_float(&[xt.dtype, yt.dtype, pt.dtype])?;
    same_dims(&xt, &yt)?;
    let sh = shape(mode, &xt, Some(&pt))?;
    if epsilon < 0.0 || !(0.0..=1.0).contains(&factor) || scale.is_null() || bias.is_null() {
        return Err(BAD_PARAM);
    }
    if run_mean.is_null() != run_var.is_null() || save_mean.is_null() != save_inv.is_null() {
        return Err(BAD_PARAM);
    }
    let (a, b) = (scalar(alpha)?, scalar(beta)?);
    let what = c"cudnnBatchNormalizationForwardTraining";
    let xv = load(s, &xt, x, what)?;
    let (sc, bi) = (load(s, &pt, scale, what)?, load(s, &pt, bias, what)?);
    let mut yv = if b != 0.0 {
        load(s, &yt, y, what)?
    } else {
        vec![0.0; count(&yt)]
    };
    let mut rm = params(s, &pt, run_mean, what)?;
    let mut rv = params(s, &pt, run_var, what)?;
    if data_mode(s) {
        let (mean, var) = bn::stats(&sh, &xv);
        let inv = bn::inv_std(&var, epsilon);
        math::blend(
            &mut yv,
            &bn::normalize(&sh, &xv, &sc, &bi, &mean, &inv),
            a,
            b,
        );
        if let (Some(rm), Some(rv)) = (rm.as_mut(), rv.as_mut()) {
            bn::update_running(&sh, rm, rv, &mean, &var, factor);
        }
        if !save_mean.is_null() {
            let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
            store(s, &pt, save_mean, &f(&mean), what)?;
            store(s, &pt, save_inv, &f(&inv), what)?;
        }
    } else if !save_mean.is_null() {
        store(s, &pt, save_mean, &[], what)?;
        store(s, &pt, save_inv, &[], what)?;
    }
    store(s, &yt, y, &yv, what)?;
    if let (Some(rm), Some(rv)) = (rm, rv) {
        store(s, &pt, run_mean, &rm, what)?;
        store(s, &pt, run_var, &rv, what)?;
    }
    // Statistics (one read of x), normalisation (a second read, one write).
    submit(s, h, bn_time(s, count(&xt), 3), false)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBatchNormalizationForwardTrainingEx(
    h: Handle,
    mode: c_int,
    ops: c_int,
    alpha: *const c_void,
    beta: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    _zd: *const c_void,
    _z: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
    pd: *const c_void,
    scale: *const c_void,
    bias: *const c_void,
    factor: f64,
    run_mean: *mut c_void,
    run_var: *mut c_void,
    epsilon: f64,
    save_mean: *mut c_void,
    save_inv: *mut c_void,
    _act: *const c_void,
    _ws: *mut c_void,
    _ws_size: usize,
    _reserve: *mut c_void,
    _reserve_size: usize,
) -> Status {
    run(|| {
        if ops != OPS_BN {
            return Err(NOT_SUPPORTED);
        }
        forward_training(
            h,
            mode,
            (alpha, beta),
            (xd, x),
            (yd, y),
            (pd, scale, bias),
            factor,
            (run_mean, run_var),
            epsilon,
            (save_mean, save_inv),
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBatchNormalizationForwardTraining(
    h: Handle,
    mode: c_int,
    alpha: *const c_void,
    beta: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
    pd: *const c_void,
    scale: *const c_void,
    bias: *const c_void,
    factor: f64,
    run_mean: *mut c_void,
    run_var: *mut c_void,
    epsilon: f64,
    save_mean: *mut c_void,
    save_inv: *mut c_void,
) -> Status {
    run(|| {
        forward_training(
            h,
            mode,
            (alpha, beta),
            (xd, x),
            (yd, y),
            (pd, scale, bias),
            factor,
            (run_mean, run_var),
            epsilon,
            (save_mean, save_inv),
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBatchNormalizationForwardInference(
    h: Handle,
    mode: c_int,
    alpha: *const c_void,
    beta: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
    pd: *const c_void,
    scale: *const c_void,
    bias: *const c_void,
    mean: *const c_void,
    var: *const c_void,
    epsilon: f64,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (xt, yt, pt) = (tensor(xd)?, tensor(yd)?, tensor(pd)?);
        require_float(&[xt.dtype, yt.dtype, pt.dtype])?;
        same_dims(&xt, &yt)?;
        let sh = shape(mode, &xt, Some(&pt))?;
        if epsilon < 0.0 {
            return Err(BAD_PARAM);
        }
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnBatchNormalizationForwardInference";
        let xv = load(s, &xt, x, what)?;
        let [sc, bi, mv, vv] = [scale, bias, mean, var].map(|p| load(s, &pt, p, what));
        let (sc, bi, mv, vv) = (sc?, bi?, mv?, vv?);
        let mut yv = if b != 0.0 {
            load(s, &yt, y, what)?
        } else {
            vec![0.0; count(&yt)]
        };
        if data_mode(s) {
            let mean: Vec<f64> = mv.iter().map(|&v| v as f64).collect();
            let var: Vec<f64> = vv.iter().map(|&v| v as f64).collect();
            let inv = bn::inv_std(&var, epsilon);
            math::blend(
                &mut yv,
                &bn::normalize(&sh, &xv, &sc, &bi, &mean, &inv),
                a,
                b,
            );
        }
        store(s, &yt, y, &yv, what)?;
        submit(s, h, bn_time(s, count(&xt), 2), false)
    })
}

/// The backward pass shared by the Ex and plain calls.
fn backward(
    h: Handle,
    mode: c_int,
    (ad, bd, ap, bp): (*const c_void, *const c_void, *const c_void, *const c_void),
    (xd, x): (*const c_void, *const c_void),
    (dyd, dy): (*const c_void, *const c_void),
    (dxd, dx): (*const c_void, *mut c_void),
    (pd, scale, dscale, dbias): (*const c_void, *const c_void, *mut c_void, *mut c_void),
    epsilon: f64,
    (saved_mean, saved_inv): (*const c_void, *const c_void),
) -> Result<(), Status> {
    let s = sim().ok_or(NOT_INITIALIZED)?;
    handle_stream(h)?;
    let (xt, dyt, dxt, pt) = (tensor(xd)?, tensor(dyd)?, tensor(dxd)?, tensor(pd)?);
    require_float(&[xt.dtype, dyt.dtype, dxt.dtype, pt.dtype])?;
    same_dims(&xt, &dyt)?;
    same_dims(&xt, &dxt)?;
    let sh = shape(mode, &xt, Some(&pt))?;
    if epsilon < 0.0 || saved_mean.is_null() != saved_inv.is_null() || scale.is_null() {
        return Err(BAD_PARAM);
    }
    let (a_d, b_d, a_p, b_p) = (scalar(ad)?, scalar(bd)?, scalar(ap)?, scalar(bp)?);
    let what = c"cudnnBatchNormalizationBackward";
    let (xv, dyv, sc) = (
        load(s, &xt, x, what)?,
        load(s, &dyt, dy, what)?,
        load(s, &pt, scale, what)?,
    );
    let saved = match (
        params(s, &pt, saved_mean, what)?,
        params(s, &pt, saved_inv, what)?,
    ) {
        (Some(m), Some(i)) => Some((m, i)),
        _ => None,
    };
    let prior = |t: &Tensor, p: *const c_void, beta: f32| -> Result<Vec<f32>, Status> {
        if beta != 0.0 {
            load(s, t, p, what)
        } else {
            Ok(vec![0.0; count(t)])
        }
    };
    let mut dxv = prior(&dxt, dx, b_d)?;
    let mut dsv = prior(&pt, dscale, b_p)?;
    let mut dbv = prior(&pt, dbias, b_p)?;
    if data_mode(s) {
        // Without saved statistics cuDNN recomputes them from x.
        let (mean, inv) = match saved {
            Some((m, i)) => (
                m.iter().map(|&v| v as f64).collect(),
                i.iter().map(|&v| v as f64).collect(),
            ),
            None => {
                let (m, v) = bn::stats(&sh, &xv);
                let i = bn::inv_std(&v, epsilon);
                (m, i)
            }
        };
        let (gx, gs, gb) = bn::backward(&sh, &xv, &dyv, &sc, &mean, &inv);
        math::blend(&mut dxv, &gx, a_d, b_d);
        math::blend(&mut dsv, &gs, a_p, b_p);
        math::blend(&mut dbv, &gb, a_p, b_p);
    }
    store(s, &dxt, dx, &dxv, what)?;
    store(s, &pt, dscale, &dsv, what)?;
    store(s, &pt, dbias, &dbv, what)?;
    // Reads x and dy for the sums, again for dx, and writes dx.
    submit(s, h, bn_time(s, count(&xt), 5), false)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBatchNormalizationBackwardEx(
    h: Handle,
    mode: c_int,
    ops: c_int,
    alpha_data: *const c_void,
    beta_data: *const c_void,
    alpha_param: *const c_void,
    beta_param: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    _yd: *const c_void,
    _y: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    _dzd: *const c_void,
    _dz: *mut c_void,
    dxd: *const c_void,
    dx: *mut c_void,
    pd: *const c_void,
    scale: *const c_void,
    _bias: *const c_void,
    dscale: *mut c_void,
    dbias: *mut c_void,
    epsilon: f64,
    saved_mean: *const c_void,
    saved_inv: *const c_void,
    _act: *const c_void,
    _ws: *mut c_void,
    _ws_size: usize,
    _reserve: *mut c_void,
    _reserve_size: usize,
) -> Status {
    run(|| {
        if ops != OPS_BN {
            return Err(NOT_SUPPORTED);
        }
        backward(
            h,
            mode,
            (alpha_data, beta_data, alpha_param, beta_param),
            (xd, x),
            (dyd, dy),
            (dxd, dx),
            (pd, scale, dscale, dbias),
            epsilon,
            (saved_mean, saved_inv),
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBatchNormalizationBackward(
    h: Handle,
    mode: c_int,
    alpha_data: *const c_void,
    beta_data: *const c_void,
    alpha_param: *const c_void,
    beta_param: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
    pd: *const c_void,
    scale: *const c_void,
    dscale: *mut c_void,
    dbias: *mut c_void,
    epsilon: f64,
    saved_mean: *const c_void,
    saved_inv: *const c_void,
) -> Status {
    run(|| {
        backward(
            h,
            mode,
            (alpha_data, beta_data, alpha_param, beta_param),
            (xd, x),
            (dyd, dy),
            (dxd, dx),
            (pd, scale, dscale, dbias),
            epsilon,
            (saved_mean, saved_inv),
        )
    })
}
