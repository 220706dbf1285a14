//! `libcudnn_cnn.so.9` of the simulated GPU: the legacy convolution API that Caffe-style
//! programs and PyTorch's v7 path use: convolution descriptors, the three directions with every
//! algorithm and cuDNN's support rules, the bias gradient, the algorithm queries and finders,
//! and workspace sizes. NVIDIA's `libcudnn.so.9` forwards these calls here by name.
#![allow(non_snake_case)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

use simgpu_cudnn_core::*;

// ==================================================================== convolution descriptors

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreateConvolutionDescriptor(d: *mut Handle) -> Status {
    create(
        d,
        Obj::Conv(ConvDesc {
            nb: 0,
            pad: [0; 3],
            stride: [1; 3],
            dil: [1; 3],
            mode: 1,
            compute: 0,
            groups: 1,
            math: 0,
        }),
    )
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroyConvolutionDescriptor(d: Handle) -> Status {
    match get(d) {
        Ok(Obj::Conv(_)) => destroy(d),
        _ => BAD_PARAM,
    }
}

fn set_conv(
    d: Handle,
    pad: &[i64],
    stride: &[i64],
    dil: &[i64],
    mode: c_int,
    compute: c_int,
) -> Result<(), Status> {
    let mut c = conv_desc(d)?;
    let nb = pad.len();
    if !(1..=3).contains(&nb)
        || pad.iter().any(|&p| p < 0)
        || stride.iter().any(|&s| s <= 0)
        || dil.iter().any(|&v| v <= 0)
    {
        return Err(BAD_PARAM);
    }
    if !(0..=1).contains(&mode) {
        return Err(BAD_PARAM);
    }
    c.nb = nb;
    c.pad = [0; 3];
    c.stride = [1; 3];
    c.dil = [1; 3];
    // Right-align: the last spatial dimension is width.
    c.pad[3 - nb..].copy_from_slice(pad);
    c.stride[3 - nb..].copy_from_slice(stride);
    c.dil[3 - nb..].copy_from_slice(dil);
    c.mode = mode;
    c.compute = compute;
    set(d, Obj::Conv(c));
    Ok(())
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetConvolution2dDescriptor(
    d: Handle,
    pad_h: c_int,
    pad_w: c_int,
    u: c_int,
    v: c_int,
    dil_h: c_int,
    dil_w: c_int,
    mode: c_int,
    compute: c_int,
) -> Status {
    run(|| {
        set_conv(
            d,
            &[pad_h as i64, pad_w as i64],
            &[u as i64, v as i64],
            &[dil_h as i64, dil_w as i64],
            mode,
            compute,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetConvolutionNdDescriptor(
    d: Handle,
    len: c_int,
    pad: *const c_int,
    stride: *const c_int,
    dil: *const c_int,
    mode: c_int,
    compute: c_int,
) -> Status {
    run(|| {
        if !(1..=3).contains(&len) {
            return Err(NOT_SUPPORTED);
        }
        let v = |p: *const c_int| -> Result<Vec<i64>, Status> {
            Ok(slice(p, len as usize)?.iter().map(|&x| x as i64).collect())
        };
        set_conv(d, &v(pad)?, &v(stride)?, &v(dil)?, mode, compute)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolution2dDescriptor(
    d: *const c_void,
    pad_h: *mut c_int,
    pad_w: *mut c_int,
    u: *mut c_int,
    v: *mut c_int,
    dil_h: *mut c_int,
    dil_w: *mut c_int,
    mode: *mut c_int,
    compute: *mut c_int,
) -> Status {
    run(|| {
        let c = conv_desc(d)?;
        if c.nb != 2 {
            return Err(BAD_PARAM);
        }
        put(pad_h, c.pad[1] as c_int)?;
        put(pad_w, c.pad[2] as c_int)?;
        put(u, c.stride[1] as c_int)?;
        put(v, c.stride[2] as c_int)?;
        put(dil_h, c.dil[1] as c_int)?;
        put(dil_w, c.dil[2] as c_int)?;
        put(mode, c.mode)?;
        put(compute, c.compute)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionNdDescriptor(
    d: *const c_void,
    requested: c_int,
    len: *mut c_int,
    pad: *mut c_int,
    stride: *mut c_int,
    dil: *mut c_int,
    mode: *mut c_int,
    compute: *mut c_int,
) -> Status {
    run(|| {
        let c = conv_desc(d)?;
        put(len, c.nb as c_int)?;
        for i in 0..(requested.max(0) as usize).min(c.nb) {
            let j = 3 - c.nb + i;
            // SAFETY: the arrays hold `requested` entries (API contract).
            unsafe {
                put(pad.add(i), c.pad[j] as c_int)?;
                put(stride.add(i), c.stride[j] as c_int)?;
                put(dil.add(i), c.dil[j] as c_int)?;
            }
        }
        put(mode, c.mode)?;
        put(compute, c.compute)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetConvolutionGroupCount(d: Handle, groups: c_int) -> Status {
    run(|| {
        let mut c = conv_desc(d)?;
        if groups < 1 {
            return Err(BAD_PARAM);
        }
        c.groups = groups as i64;
        set(d, Obj::Conv(c));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionGroupCount(d: *const c_void, groups: *mut c_int) -> Status {
    run(|| put(groups, conv_desc(d)?.groups as c_int))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetConvolutionMathType(d: Handle, math: c_int) -> Status {
    run(|| {
        let mut c = conv_desc(d)?;
        if !(0..=3).contains(&math) {
            return Err(BAD_PARAM);
        }
        c.math = math;
        set(d, Obj::Conv(c));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionMathType(d: *const c_void, math: *mut c_int) -> Status {
    run(|| put(math, conv_desc(d)?.math))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolution2dForwardOutputDim(
    conv: *const c_void,
    x: *const c_void,
    w: *const c_void,
    n: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    wo: *mut c_int,
) -> Status {
    run(|| {
        let d = output_dims(conv, x, w)?;
        if d.len() != 4 {
            return Err(BAD_PARAM);
        }
        for (p, v) in [(n, d[0]), (c, d[1]), (h, d[2]), (wo, d[3])] {
            put(p, v as c_int)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionNdForwardOutputDim(
    conv: *const c_void,
    x: *const c_void,
    w: *const c_void,
    nb: c_int,
    out: *mut c_int,
) -> Status {
    run(|| {
        let d = output_dims(conv, x, w)?;
        if nb as usize != d.len() {
            return Err(BAD_PARAM);
        }
        for (i, v) in d.iter().enumerate() {
            // SAFETY: out holds nb entries (API contract).
            unsafe { put(out.add(i), *v as c_int)? };
        }
        Ok(())
    })
}
#[unsafe(no_mangle)]
pub extern "C" fn cudnnConvolutionForward(
    h: Handle,
    alpha: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    wd: *const c_void,
    w: *const c_void,
    cd: *const c_void,
    algo: c_int,
    ws: *mut c_void,
    ws_size: usize,
    beta: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
) -> Status {
    run(|| {
        let call = conv_call(xd, wd, cd, yd)?;
        execute_conv(
            h,
            Dir::Fwd,
            &call,
            algo,
            (ws, ws_size),
            (alpha, beta),
            [x, w, y as *const c_void],
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnConvolutionBackwardData(
    h: Handle,
    alpha: *const c_void,
    wd: *const c_void,
    w: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    cd: *const c_void,
    algo: c_int,
    ws: *mut c_void,
    ws_size: usize,
    beta: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
) -> Status {
    run(|| {
        let call = conv_call(dxd, wd, cd, dyd)?;
        execute_conv(
            h,
            Dir::BwdData,
            &call,
            algo,
            (ws, ws_size),
            (alpha, beta),
            [dx as *const c_void, w, dy],
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnConvolutionBackwardFilter(
    h: Handle,
    alpha: *const c_void,
    xd: *const c_void,
    x: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    cd: *const c_void,
    algo: c_int,
    ws: *mut c_void,
    ws_size: usize,
    beta: *const c_void,
    dwd: *const c_void,
    dw: *mut c_void,
) -> Status {
    run(|| {
        let call = conv_call(xd, dwd, cd, dyd)?;
        execute_conv(
            h,
            Dir::BwdFilter,
            &call,
            algo,
            (ws, ws_size),
            (alpha, beta),
            [x, dw as *const c_void, dy],
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnConvolutionBackwardBias(
    h: Handle,
    alpha: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    beta: *const c_void,
    dbd: *const c_void,
    db: *mut c_void,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (dyt, dbt) = (tensor(dyd)?, tensor(dbd)?);
        require_float(&[dyt.dtype, dbt.dtype])?;
        let k = dyt.dims[1];
        if dbt.nb != dyt.nb || dbt.dims[1] != k || (0..dbt.nb).any(|i| i != 1 && dbt.dims[i] != 1) {
            return Err(BAD_PARAM);
        }
        let (a, b) = (scalar(alpha)?, scalar(beta)?);
        let what = c"cudnnConvolutionBackwardBias";
        let dyv = load(s, &dyt, dy, what)?;
        let mut dbv = if b != 0.0 {
            load(s, &dbt, db, what)?
        } else {
            vec![0.0; k as usize]
        };
        if data_mode(s) {
            math::conv_backward_bias(&dyv, dyt.dims[0] as usize, k as usize, &mut dbv, a, b);
        }
        store(s, &dbt, db, &dbv, what)?;
        let bytes = 4.0 * count(&dyt) as f64;
        submit(
            s,
            h,
            s.profile.kernel_time(bytes / 4.0, bytes, 1.0, false),
            false,
        )
    })
}
// ==================================================================== algorithm queries

fn fill(
    perf: &[AlgoPerf],
    requested: c_int,
    returned: *mut c_int,
    out: *mut AlgoPerf,
) -> Result<(), Status> {
    if requested <= 0 || out.is_null() {
        return Err(BAD_PARAM);
    }
    let n = (requested as usize).min(perf.len());
    for (i, p) in perf.iter().take(n).enumerate() {
        // SAFETY: out holds `requested` perf structs (API contract); i < requested.
        unsafe { out.add(i).write(*p) };
    }
    put(returned, n as c_int)
}

/// Benchmarking runs every supported algorithm once on the device, synchronously.
fn benchmark(s: &Sim, h: Handle, perf: &[AlgoPerf]) -> Result<(), Status> {
    let total: f64 = perf
        .iter()
        .filter(|p| p.status == SUCCESS)
        .map(|p| p.time as f64 * 1e-3)
        .sum();
    submit(s, h, total, true)
}

fn free_device_memory(s: &Sim) -> usize {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: resolved from the simulated driver with this signature.
    unsafe { (s.mem_info)(&mut f, &mut t) };
    f
}

fn get_v7(
    dir: Dir,
    h: Handle,
    a: *const c_void,
    b: *const c_void,
    c: *const c_void,
    d: *const c_void,
    req: c_int,
    ret: *mut c_int,
    out: *mut AlgoPerf,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let call = match dir {
            Dir::Fwd => conv_call(a, b, c, d)?,
            Dir::BwdData => conv_call(d, a, c, b)?,
            Dir::BwdFilter => conv_call(a, d, c, b)?,
        };
        fill(&rank(s, dir, &call, None), req, ret, out)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionForwardAlgorithm_v7(
    h: Handle,
    xd: *const c_void,
    wd: *const c_void,
    cd: *const c_void,
    yd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    get_v7(Dir::Fwd, h, xd, wd, cd, yd, req, ret, perf)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardDataAlgorithm_v7(
    h: Handle,
    wd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dxd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    get_v7(Dir::BwdData, h, wd, dyd, cd, dxd, req, ret, perf)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    h: Handle,
    xd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dwd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    get_v7(Dir::BwdFilter, h, xd, dyd, cd, dwd, req, ret, perf)
}

fn find(
    dir: Dir,
    h: Handle,
    call: Result<ConvCall, Status>,
    req: c_int,
    ret: *mut c_int,
    out: *mut AlgoPerf,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let call = call?;
        // cudnnFind* allocates the workspace itself: what does not fit in free memory fails.
        let perf = rank(
            s,
            dir,
            &call,
            Some((free_device_memory(s), DEVICE_ALLOCATION_FAILED)),
        );
        benchmark(s, h, &perf)?;
        fill(&perf, req, ret, out)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionForwardAlgorithm(
    h: Handle,
    xd: *const c_void,
    wd: *const c_void,
    cd: *const c_void,
    yd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    find(Dir::Fwd, h, conv_call(xd, wd, cd, yd), req, ret, perf)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionBackwardDataAlgorithm(
    h: Handle,
    wd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dxd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    find(Dir::BwdData, h, conv_call(dxd, wd, cd, dyd), req, ret, perf)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionBackwardFilterAlgorithm(
    h: Handle,
    xd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dwd: *const c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
) -> Status {
    find(
        Dir::BwdFilter,
        h,
        conv_call(xd, dwd, cd, dyd),
        req,
        ret,
        perf,
    )
}

/// cudnnFind*Ex: benchmarks on the caller's buffers and workspace. Buffers are checked (they
/// must be device memory the call may touch); the output may be overwritten, as cuDNN says.
fn find_ex(
    dir: Dir,
    h: Handle,
    call: Result<ConvCall, Status>,
    bufs: [(*const c_void, usize); 3],
    req: c_int,
    ret: *mut c_int,
    out: *mut AlgoPerf,
    ws: *mut c_void,
    ws_size: usize,
) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let call = call?;
        for (p, elems) in bufs {
            if p.is_null() {
                return Err(BAD_PARAM_NULL_POINTER);
            }
            // SAFETY: resolved from the simulated driver; a range check only.
            drv(unsafe { (s.check)(p as u64, elems * 4, c"cudnnFind*AlgorithmEx".as_ptr()) })?;
        }
        if ws_size > 0 {
            if ws.is_null() {
                return Err(BAD_PARAM_NULL_POINTER);
            }
            // SAFETY: as above.
            drv(unsafe { (s.check)(ws as u64, ws_size, c"cudnnFind*AlgorithmEx".as_ptr()) })?;
        }
        let perf = rank(s, dir, &call, Some((ws_size, BAD_PARAM_SIZE_INSUFFICIENT)));
        benchmark(s, h, &perf)?;
        fill(&perf, req, ret, out)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionForwardAlgorithmEx(
    h: Handle,
    xd: *const c_void,
    x: *const c_void,
    wd: *const c_void,
    w: *const c_void,
    cd: *const c_void,
    yd: *const c_void,
    y: *mut c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
    ws: *mut c_void,
    ws_size: usize,
) -> Status {
    let call = conv_call(xd, wd, cd, yd);
    let bufs = match &call {
        Ok(c) => [
            (x, extent(&c.x)),
            (w, extent(&c.w)),
            (y as *const c_void, extent(&c.y)),
        ],
        Err(_) => [(x, 0); 3],
    };
    find_ex(Dir::Fwd, h, call, bufs, req, ret, perf, ws, ws_size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionBackwardDataAlgorithmEx(
    h: Handle,
    wd: *const c_void,
    w: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    cd: *const c_void,
    dxd: *const c_void,
    dx: *mut c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
    ws: *mut c_void,
    ws_size: usize,
) -> Status {
    let call = conv_call(dxd, wd, cd, dyd);
    let bufs = match &call {
        Ok(c) => [
            (w, extent(&c.w)),
            (dy, extent(&c.y)),
            (dx as *const c_void, extent(&c.x)),
        ],
        Err(_) => [(w, 0); 3],
    };
    find_ex(Dir::BwdData, h, call, bufs, req, ret, perf, ws, ws_size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnFindConvolutionBackwardFilterAlgorithmEx(
    h: Handle,
    xd: *const c_void,
    x: *const c_void,
    dyd: *const c_void,
    dy: *const c_void,
    cd: *const c_void,
    dwd: *const c_void,
    dw: *mut c_void,
    req: c_int,
    ret: *mut c_int,
    perf: *mut AlgoPerf,
    ws: *mut c_void,
    ws_size: usize,
) -> Status {
    let call = conv_call(xd, dwd, cd, dyd);
    let bufs = match &call {
        Ok(c) => [
            (x, extent(&c.x)),
            (dy, extent(&c.y)),
            (dw as *const c_void, extent(&c.w)),
        ],
        Err(_) => [(x, 0); 3],
    };
    find_ex(Dir::BwdFilter, h, call, bufs, req, ret, perf, ws, ws_size)
}

fn ws_size(
    dir: Dir,
    h: Handle,
    call: Result<ConvCall, Status>,
    algo: c_int,
    size: *mut usize,
) -> Status {
    run(|| {
        handle_stream(h)?;
        let call = call?;
        if algo < 0 || algo as usize >= dir.algo_count() {
            return Err(BAD_PARAM);
        }
        conv::support(dir, algo as usize, &call.geom).map_err(|_| NOT_SUPPORTED)?;
        put(
            size,
            conv::workspace(dir, algo as usize, &call.geom) as usize,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionForwardWorkspaceSize(
    h: Handle,
    xd: *const c_void,
    wd: *const c_void,
    cd: *const c_void,
    yd: *const c_void,
    algo: c_int,
    size: *mut usize,
) -> Status {
    ws_size(Dir::Fwd, h, conv_call(xd, wd, cd, yd), algo, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardDataWorkspaceSize(
    h: Handle,
    wd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dxd: *const c_void,
    algo: c_int,
    size: *mut usize,
) -> Status {
    ws_size(Dir::BwdData, h, conv_call(dxd, wd, cd, dyd), algo, size)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardFilterWorkspaceSize(
    h: Handle,
    xd: *const c_void,
    dyd: *const c_void,
    cd: *const c_void,
    dwd: *const c_void,
    algo: c_int,
    size: *mut usize,
) -> Status {
    ws_size(Dir::BwdFilter, h, conv_call(xd, dwd, cd, dyd), algo, size)
}

fn max_count(h: Handle, n: usize, out: *mut c_int) -> Status {
    run(|| {
        handle_stream(h)?;
        put(out, n as c_int)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionForwardAlgorithmMaxCount(h: Handle, n: *mut c_int) -> Status {
    max_count(h, conv::FWD_ALGOS, n)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardDataAlgorithmMaxCount(
    h: Handle,
    n: *mut c_int,
) -> Status {
    max_count(h, conv::BWD_DATA_ALGOS, n)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(
    h: Handle,
    n: *mut c_int,
) -> Status {
    max_count(h, conv::BWD_FILTER_ALGOS, n)
}

/// Each sub-library checks that its siblings are the same version: ours are built together.
#[unsafe(no_mangle)]
pub extern "C" fn cudnnCnnVersionCheck() -> Status {
    SUCCESS
}
