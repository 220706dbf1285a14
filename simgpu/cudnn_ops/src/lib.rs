//! `libcudnn_ops.so.9` of the simulated GPU: tensor and filter descriptors, activation,
//! pooling, softmax and add-tensor, with real float32 arithmetic in data mode.
//! NVIDIA's `libcudnn.so.9` forwards these calls here by name.
#![allow(non_snake_case)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

mod batchnorm;

use simgpu_cudnn_core::*;

// ==================================================================== tensor descriptors

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreateTensorDescriptor(d: *mut Handle) -> Status {
    create(d, Obj::Tensor(None))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroyTensorDescriptor(d: Handle) -> Status {
    match get(d) {
        Ok(Obj::Tensor(_)) => destroy(d),
        _ => BAD_PARAM,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetTensor4dDescriptor(
    d: Handle,
    format: c_int,
    dtype: c_int,
    n: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
) -> Status {
    run(|| {
        if format != TENSOR_NCHW && format != TENSOR_NHWC {
            return Err(BAD_PARAM);
        }
        let dims = [n as i64, c as i64, h as i64, w as i64];
        set_tensor(d, dtype, &dims, &packed_strides(&dims, format))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetTensor4dDescriptorEx(
    d: Handle,
    dtype: c_int,
    n: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
    ns: c_int,
    cs: c_int,
    hs: c_int,
    ws: c_int,
) -> Status {
    run(|| {
        let dims = [n, c, h, w].map(|v| v as i64);
        set_tensor(d, dtype, &dims, &[ns, cs, hs, ws].map(|v| v as i64))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetTensorNdDescriptor(
    d: Handle,
    dtype: c_int,
    nb: c_int,
    dims: *const c_int,
    strides: *const c_int,
) -> Status {
    run(|| {
        if !(3..=8).contains(&nb) {
            return Err(BAD_PARAM);
        }
        let dims: Vec<i64> = slice(dims, nb as usize)?
            .iter()
            .map(|&v| v as i64)
            .collect();
        let strides: Vec<i64> = slice(strides, nb as usize)?
            .iter()
            .map(|&v| v as i64)
            .collect();
        set_tensor(d, dtype, &dims, &strides)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetTensorNdDescriptorEx(
    d: Handle,
    format: c_int,
    dtype: c_int,
    nb: c_int,
    dims: *const c_int,
) -> Status {
    run(|| {
        if !(3..=8).contains(&nb) || (format != TENSOR_NCHW && format != TENSOR_NHWC) {
            return Err(BAD_PARAM);
        }
        let dims: Vec<i64> = slice(dims, nb as usize)?
            .iter()
            .map(|&v| v as i64)
            .collect();
        set_tensor(d, dtype, &dims, &packed_strides(&dims, format))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetTensor4dDescriptor(
    d: *const c_void,
    dtype: *mut c_int,
    n: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    w: *mut c_int,
    ns: *mut c_int,
    cs: *mut c_int,
    hs: *mut c_int,
    ws: *mut c_int,
) -> Status {
    run(|| {
        let t = tensor(d)?;
        if t.nb != 4 {
            return Err(BAD_PARAM);
        }
        put(dtype, t.dtype)?;
        for (p, v) in [
            (n, t.dims[0]),
            (c, t.dims[1]),
            (h, t.dims[2]),
            (w, t.dims[3]),
        ] {
            put(p, v as c_int)?;
        }
        for (p, v) in [
            (ns, t.strides[0]),
            (cs, t.strides[1]),
            (hs, t.strides[2]),
            (ws, t.strides[3]),
        ] {
            put(p, v as c_int)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetTensorNdDescriptor(
    d: *const c_void,
    requested: c_int,
    dtype: *mut c_int,
    nb: *mut c_int,
    dims: *mut c_int,
    strides: *mut c_int,
) -> Status {
    run(|| {
        let t = tensor(d)?;
        put(dtype, t.dtype)?;
        put(nb, t.nb as c_int)?;
        for i in 0..(requested.max(0) as usize).min(t.nb) {
            // SAFETY: dims/strides hold `requested` entries (API contract); i < requested.
            unsafe {
                put(dims.add(i), t.dims[i] as c_int)?;
                put(strides.add(i), t.strides[i] as c_int)?;
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetTensorSizeInBytes(d: *const c_void, size: *mut usize) -> Status {
    run(|| {
        let t = tensor(d)?;
        put(size, extent(&t) * elem_size(t.dtype))
    })
}

// ==================================================================== filter descriptors

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreateFilterDescriptor(d: *mut Handle) -> Status {
    create(d, Obj::Filter(None))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroyFilterDescriptor(d: Handle) -> Status {
    match get(d) {
        Ok(Obj::Filter(_)) => destroy(d),
        _ => BAD_PARAM,
    }
}

fn set_filter(d: Handle, dtype: c_int, format: c_int, dims: &[i64]) -> Result<(), Status> {
    if !matches!(get(d)?, Obj::Filter(_)) {
        return Err(BAD_PARAM);
    }
    if !(3..=8).contains(&dims.len()) || dims.iter().any(|&v| v <= 0) || !(0..=1).contains(&format)
    {
        return Err(BAD_PARAM);
    }
    let mut f = Filter {
        dtype,
        format,
        nb: dims.len(),
        dims: [1; 8],
    };
    f.dims[..dims.len()].copy_from_slice(dims);
    set(d, Obj::Filter(Some(f)));
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetFilter4dDescriptor(
    d: Handle,
    dtype: c_int,
    format: c_int,
    k: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
) -> Status {
    run(|| set_filter(d, dtype, format, &[k, c, h, w].map(|v| v as i64)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetFilterNdDescriptor(
    d: Handle,
    dtype: c_int,
    format: c_int,
    nb: c_int,
    dims: *const c_int,
) -> Status {
    run(|| {
        if !(3..=8).contains(&nb) {
            return Err(BAD_PARAM);
        }
        let dims: Vec<i64> = slice(dims, nb as usize)?
            .iter()
            .map(|&v| v as i64)
            .collect();
        set_filter(d, dtype, format, &dims)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetFilter4dDescriptor(
    d: *const c_void,
    dtype: *mut c_int,
    format: *mut c_int,
    k: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    w: *mut c_int,
) -> Status {
    run(|| {
        let f = filter(d)?;
        if f.nb != 4 {
            return Err(BAD_PARAM);
        }
        put(dtype, f.dtype)?;
        put(format, f.format)?;
        for (p, v) in [
            (k, f.dims[0]),
            (c, f.dims[1]),
            (h, f.dims[2]),
            (w, f.dims[3]),
        ] {
            put(p, v as c_int)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetFilterNdDescriptor(
    d: *const c_void,
    requested: c_int,
    dtype: *mut c_int,
    format: *mut c_int,
    nb: *mut c_int,
    dims: *mut c_int,
) -> Status {
    run(|| {
        let f = filter(d)?;
        put(dtype, f.dtype)?;
        put(format, f.format)?;
        put(nb, f.nb as c_int)?;
        for i in 0..(requested.max(0) as usize).min(f.nb) {
            // SAFETY: dims holds `requested` entries (API contract).
            unsafe { put(dims.add(i), f.dims[i] as c_int)? };
        }
        Ok(())
    })
}
// ==================================================================== activation

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreateActivationDescriptor(d: *mut Handle) -> Status {
    create(d, Obj::Activation(Activation { mode: 1, coef: 0.0 }))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroyActivationDescriptor(d: Handle) -> Status {
    match get(d) {
        Ok(Obj::Activation(_)) => destroy(d),
        _ => BAD_PARAM,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetActivationDescriptor(
    d: Handle,
    mode: c_int,
    _nan: c_int,
    coef: f64,
) -> Status {
    run(|| {
        if !matches!(get(d)?, Obj::Activation(_)) || !(0..=6).contains(&mode) {
            return Err(BAD_PARAM);
        }
        set(d, Obj::Activation(Activation { mode, coef }));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetActivationDescriptor(
    d: *const c_void,
    mode: *mut c_int,
    nan: *mut c_int,
    coef: *mut f64,
) -> Status {
    run(|| match get(d)? {
        Obj::Activation(a) => {
            put(mode, a.mode)?;
            put(nan, 0)?;
            put(coef, a.coef)
        }
        _ => Err(BAD_PARAM),
    })
}

fn activation(d: *const c_void) -> Result<Activation, Status> {
    match get(d)? {
        Obj::Activation(a) => Ok(a),
        _ => Err(BAD_PARAM),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnActivationForward(
    h: Handle,
    ad: *const c_void,
    alpha: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    beta: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let act = activation(ad)?;
        let (xt, yt) = (tensor(xd)?, tensor(yd)?);
        require_float(&[xt.dtype, yt.dtype])?;
        same_dims(&xt, &yt)?;
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnActivationForward";
        let xv = load(s, &xt, x, what)?;
        let mut yv = if b != 0.0 {
            load(s, &yt, y, what)?
        } else {
            vec![0.0; count(&yt)]
        };
        if data_mode(s) {
            let r = math::activation_forward(act.mode, act.coef as f32, &xv).ok_or(BAD_PARAM)?;
            math::blend(&mut yv, &r, a, b);
        }
        store(s, &yt, y, &yv, what)?;
        submit(s, h, elementwise_time(s, count(&xt), 2), false)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnActivationBackward(
    h: Handle,
    ad: *const c_void,
    alpha: *const c_void,
    yd: *const c_void,
    y: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    beta: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let act = activation(ad)?;
        let (yt, dyt, xt, dxt) = (tensor(yd)?, tensor(dyd)?, tensor(xd)?, tensor(dxd)?);
        require_float(&[yt.dtype, dyt.dtype, xt.dtype, dxt.dtype])?;
        for t in [&dyt, &xt, &dxt] {
            same_dims(&yt, t)?;
        }
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnActivationBackward";
        let (yv, dyv, xv) = (
            load(s, &yt, y, what)?,
            load(s, &dyt, dy, what)?,
            load(s, &xt, x, what)?,
        );
        let mut dxv = if b != 0.0 {
            load(s, &dxt, dx, what)?
        } else {
            vec![0.0; count(&dxt)]
        };
        if data_mode(s) {
            let r = math::activation_backward(act.mode, act.coef as f32, &yv, &dyv, &xv)
                .ok_or(BAD_PARAM)?;
            math::blend(&mut dxv, &r, a, b);
        }
        store(s, &dxt, dx, &dxv, what)?;
        submit(s, h, elementwise_time(s, count(&xt), 4), false)
    })
}
// ==================================================================== pooling

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreatePoolingDescriptor(d: *mut Handle) -> Status {
    create(d, Obj::Pool(None))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroyPoolingDescriptor(d: Handle) -> Status {
    match get(d) {
        Ok(Obj::Pool(_)) => destroy(d),
        _ => BAD_PARAM,
    }
}

fn set_pool(
    d: Handle,
    mode: c_int,
    window: &[i64],
    pad: &[i64],
    stride: &[i64],
) -> Result<(), Status> {
    if !matches!(get(d)?, Obj::Pool(_)) || !(0..=3).contains(&mode) {
        return Err(BAD_PARAM);
    }
    let nb = window.len();
    if !(1..=3).contains(&nb)
        || window.iter().any(|&w| w <= 0)
        || stride.iter().any(|&s| s <= 0)
        || pad.iter().any(|&p| p < 0)
    {
        return Err(BAD_PARAM);
    }
    let mut p = PoolDesc {
        mode,
        nb,
        window: [1; 3],
        pad: [0; 3],
        stride: [1; 3],
    };
    p.window[3 - nb..].copy_from_slice(window);
    p.pad[3 - nb..].copy_from_slice(pad);
    p.stride[3 - nb..].copy_from_slice(stride);
    set(d, Obj::Pool(Some(p)));
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetPooling2dDescriptor(
    d: Handle,
    mode: c_int,
    _nan: c_int,
    wh: c_int,
    ww: c_int,
    ph: c_int,
    pw: c_int,
    sh: c_int,
    sw: c_int,
) -> Status {
    run(|| {
        set_pool(
            d,
            mode,
            &[wh as i64, ww as i64],
            &[ph as i64, pw as i64],
            &[sh as i64, sw as i64],
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetPoolingNdDescriptor(
    d: Handle,
    mode: c_int,
    _nan: c_int,
    nb: c_int,
    window: *const c_int,
    pad: *const c_int,
    stride: *const c_int,
) -> Status {
    run(|| {
        if !(1..=3).contains(&nb) {
            return Err(BAD_PARAM);
        }
        let v = |p: *const c_int| -> Result<Vec<i64>, Status> {
            Ok(slice(p, nb as usize)?.iter().map(|&x| x as i64).collect())
        };
        set_pool(d, mode, &v(window)?, &v(pad)?, &v(stride)?)
    })
}

fn pool_of(d: *const c_void, x: &Tensor) -> Result<(Pool, [usize; 3], [usize; 3]), Status> {
    let Obj::Pool(Some(p)) = get(d)? else {
        return Err(BAD_PARAM);
    };
    if x.nb != p.nb + 2 {
        return Err(BAD_PARAM);
    }
    let mut input = [1usize; 3];
    for i in 0..p.nb {
        input[3 - p.nb + i] = x.dims[2 + i] as usize;
    }
    let pool = Pool {
        mode: p.mode,
        window: p.window.map(|v| v as usize),
        pad: p.pad.map(|v| v as usize),
        stride: p.stride.map(|v| v as usize),
    };
    let out = pool.output(input).ok_or(BAD_PARAM)?;
    Ok((pool, input, out))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetPooling2dForwardOutputDim(
    d: *const c_void,
    xd: *const c_void,
    n: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    w: *mut c_int,
) -> Status {
    run(|| {
        let x = tensor(xd)?;
        let (_, _, out) = pool_of(d, &x)?;
        if x.nb != 4 {
            return Err(BAD_PARAM);
        }
        for (p, v) in [
            (n, x.dims[0] as usize),
            (c, x.dims[1] as usize),
            (h, out[1]),
            (w, out[2]),
        ] {
            put(p, v as c_int)?;
        }
        Ok(())
    })
}

fn pool_check_y(x: &Tensor, y: &Tensor, out: [usize; 3]) -> Result<(), Status> {
    let sd = x.nb - 2;
    let ok = y.nb == x.nb
        && y.dims[0] == x.dims[0]
        && y.dims[1] == x.dims[1]
        && (0..sd).all(|i| y.dims[2 + i] as usize == out[3 - sd + i]);
    if ok { Ok(()) } else { Err(BAD_PARAM) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnPoolingForward(
    h: Handle,
    pd: *const c_void,
    alpha: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    beta: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (xt, yt) = (tensor(xd)?, tensor(yd)?);
        require_float(&[xt.dtype, yt.dtype])?;
        let (pool, input, out) = pool_of(pd, &xt)?;
        pool_check_y(&xt, &yt, out)?;
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnPoolingForward";
        let xv = load(s, &xt, x, what)?;
        let mut yv = if b != 0.0 {
            load(s, &yt, y, what)?
        } else {
            vec![0.0; count(&yt)]
        };
        if data_mode(s) {
            let nc = (xt.dims[0] * xt.dims[1]) as usize;
            let r = pool.forward(nc, input, &xv, yv.len()).ok_or(BAD_PARAM)?;
            math::blend(&mut yv, &r, a, b);
        }
        store(s, &yt, y, &yv, what)?;
        submit(s, h, elementwise_time(s, count(&xt) + count(&yt), 1), false)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnPoolingBackward(
    h: Handle,
    pd: *const c_void,
    alpha: *const c_void,
    yd: *const c_void,
    y: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    beta: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (yt, dyt, xt, dxt) = (tensor(yd)?, tensor(dyd)?, tensor(xd)?, tensor(dxd)?);
        require_float(&[yt.dtype, dyt.dtype, xt.dtype, dxt.dtype])?;
        let (pool, input, out) = pool_of(pd, &xt)?;
        pool_check_y(&xt, &yt, out)?;
        same_dims(&yt, &dyt)?;
        same_dims(&xt, &dxt)?;
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnPoolingBackward";
        load(s, &yt, y, what)?;
        let (dyv, xv) = (load(s, &dyt, dy, what)?, load(s, &xt, x, what)?);
        let mut dxv = if b != 0.0 {
            load(s, &dxt, dx, what)?
        } else {
            vec![0.0; count(&dxt)]
        };
        if data_mode(s) {
            let nc = (xt.dims[0] * xt.dims[1]) as usize;
            let r = pool.backward(nc, input, &xv, &dyv);
            math::blend(&mut dxv, &r, a, b);
        }
        store(s, &dxt, dx, &dxv, what)?;
        submit(
            s,
            h,
            elementwise_time(s, 2 * count(&xt) + 2 * count(&yt), 1),
            false,
        )
    })
}
// ==================================================================== softmax and add-tensor

fn softmax_shape(t: &Tensor) -> (usize, usize, usize) {
    let n = t.dims[0] as usize;
    let c = t.dims[1] as usize;
    (n, c, count(t) / (n * c).max(1))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSoftmaxForward(
    h: Handle,
    algo: c_int,
    mode: c_int,
    alpha: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    beta: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        if !(0..=2).contains(&algo) || !(0..=1).contains(&mode) {
            return Err(BAD_PARAM);
        }
        let (xt, yt) = (tensor(xd)?, tensor(yd)?);
        require_float(&[xt.dtype, yt.dtype])?;
        same_dims(&xt, &yt)?;
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnSoftmaxForward";
        let xv = load(s, &xt, x, what)?;
        let mut yv = if b != 0.0 {
            load(s, &yt, y, what)?
        } else {
            vec![0.0; count(&yt)]
        };
        if data_mode(s) {
            let (n, c, vol) = softmax_shape(&xt);
            let r = math::softmax_forward(algo, mode, n, c, vol, &xv);
            math::blend(&mut yv, &r, a, b);
        }
        store(s, &yt, y, &yv, what)?;
        submit(s, h, elementwise_time(s, count(&xt), 3), false)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSoftmaxBackward(
    h: Handle,
    algo: c_int,
    mode: c_int,
    alpha: *const c_void,
    yd: *const c_void,
    y: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    beta: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        if !(0..=2).contains(&algo) || !(0..=1).contains(&mode) {
            return Err(BAD_PARAM);
        }
        let (yt, dyt, dxt) = (tensor(yd)?, tensor(dyd)?, tensor(dxd)?);
        require_float(&[yt.dtype, dyt.dtype, dxt.dtype])?;
        same_dims(&yt, &dyt)?;
        same_dims(&yt, &dxt)?;
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnSoftmaxBackward";
        let (yv, dyv) = (load(s, &yt, y, what)?, load(s, &dyt, dy, what)?);
        let mut dxv = if b != 0.0 {
            load(s, &dxt, dx, what)?
        } else {
            vec![0.0; count(&dxt)]
        };
        if data_mode(s) {
            let (n, c, vol) = softmax_shape(&yt);
            let r = math::softmax_backward(algo, mode, n, c, vol, &yv, &dyv);
            math::blend(&mut dxv, &r, a, b);
        }
        store(s, &dxt, dx, &dxv, what)?;
        submit(s, h, elementwise_time(s, count(&yt), 3), false)
    })
}

/// C = alpha * A + beta * C, A broadcast along its dimensions of size 1.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnAddTensor(
    h: Handle,
    alpha: *const c_void,
    ad: *const c_void,
    a: *const c_void,
    beta: *const c_void,
    cdesc: *const c_void,
    c: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (at, ct) = (tensor(ad)?, tensor(cdesc)?);
        require_float(&[at.dtype, ct.dtype])?;
        if at.nb != ct.nb || (0..at.nb).any(|i| at.dims[i] != 1 && at.dims[i] != ct.dims[i]) {
            return Err(BAD_PARAM);
        }
        let (al, be) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnAddTensor";
        let av = load(s, &at, a, what)?;
        let mut cv = if be != 0.0 {
            load(s, &ct, c, what)?
        } else {
            vec![0.0; count(&ct)]
        };
        if data_mode(s) {
            let mut bcast = Vec::with_capacity(cv.len());
            let mut idx = [0i64; 8];
            for _ in 0..cv.len() {
                let mut ai = 0i64;
                for (&d, &i) in at.dims[..at.nb].iter().zip(&idx) {
                    ai = ai * d + if d == 1 { 0 } else { i };
                }
                bcast.push(av[ai as usize]);
                for i in (0..ct.nb).rev() {
                    idx[i] += 1;
                    if idx[i] < ct.dims[i] {
                        break;
                    }
                    idx[i] = 0;
                }
            }
            math::blend(&mut cv, &bcast, al, be);
        }
        store(s, &ct, c, &cv, what)?;
        submit(s, h, elementwise_time(s, count(&ct), 3), false)
    })
}

/// Each sub-library checks that its siblings are the same version: ours are built together.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnOpsVersionCheck() -> Status {
    SUCCESS
}
