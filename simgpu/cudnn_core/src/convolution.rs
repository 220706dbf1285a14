//! Convolutions shared by the legacy API (libcudnn_cnn) and the backend API (libcudnn_graph):
//! geometry, checked calls, workspace rules, execution, and the ranking of algorithms.

use crate::*;

// ==================================================================== convolutions

/// Everything a convolution call needs, checked.
#[derive(Clone)]
pub struct ConvCall {
    pub geom: Geom,
    pub flip: bool,
    pub tensor_op: bool,
    pub x: Tensor,
    pub w: Tensor,
    pub y: Tensor,
}

pub fn conv_call(
    x: *const c_void,
    w: *const c_void,
    c: *const c_void,
    y: *const c_void,
) -> Result<ConvCall, Status> {
    let (xt, wf, cd, yt) = (tensor(x)?, filter(w)?, conv_desc(c)?, tensor(y)?);
    require_float(&[xt.dtype, wf.dtype, yt.dtype])?;
    let geom = geometry(&xt, &wf, &cd)?;
    let expect = output_dims(c, x, w)?;
    if yt.nb != expect.len() || yt.dims[..yt.nb] != expect[..] {
        return Err(BAD_PARAM);
    }
    Ok(ConvCall {
        geom,
        flip: cd.mode == 0,
        tensor_op: matches!(cd.math, 1 | 2),
        x: xt,
        w: filter_tensor(&wf),
        y: yt,
    })
}

/// Checks the algorithm and the workspace, then scribbles over the workspace: cuDNN owns its
/// contents during the call, so nothing may rely on them surviving.
pub fn check_workspace(
    s: &Sim,
    dir: Dir,
    algo: c_int,
    g: &Geom,
    ws: *mut c_void,
    ws_size: usize,
) -> Result<(), Status> {
    if algo < 0 || algo as usize >= dir.algo_count() {
        return Err(BAD_PARAM);
    }
    conv::support(dir, algo as usize, g).map_err(|_| NOT_SUPPORTED)?;
    let need = conv::workspace(dir, algo as usize, g) as usize;
    if need == 0 {
        return Ok(());
    }
    if ws_size < need {
        return Err(BAD_PARAM);
    }
    if ws.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: resolved from the simulated driver; a range check only.
    drv(unsafe { (s.check)(ws as u64, need, c"a cuDNN workspace".as_ptr()) })?;
    if data_mode(s) {
        let junk = vec![0xffu8; need.min(4096)];
        // SAFETY: junk holds junk.len() readable bytes, within the checked workspace.
        drv(unsafe {
            (s.write)(
                ws as u64,
                junk.as_ptr(),
                junk.len(),
                c"a cuDNN workspace".as_ptr(),
            )
        })?;
    }
    Ok(())
}

pub fn conv_time(s: &Sim, dir: Dir, algo: usize, call: &ConvCall) -> f64 {
    conv::time(&s.profile, dir, algo, &call.geom, call.tensor_op).unwrap_or(0.0)
}

/// Runs one convolution of direction `dir` on the buffers (x, w, y) of `call`: forward reads x
/// and w and writes y; backward-data reads y (dy) and w and writes x (dx); backward-filter reads
/// x and y (dy) and writes w (dw). Used by the legacy calls and by cudnnBackendExecute.
pub fn execute_conv(
    h: Handle,
    dir: Dir,
    call: &ConvCall,
    algo: c_int,
    (ws, ws_size): (*mut c_void, usize),
    (alpha, beta): (*const c_void, *const c_void),
    [x, w, y]: [*const c_void; 3],
) -> Result<(), Status> {
    let s = sim().ok_or(NOT_INITIALIZED)?;
    handle_stream(h)?;
    let (a, b) = (scalar(alpha)?, scalar(beta)?);
    execute_conv_scaled(s, h, dir, call, algo, (ws, ws_size), (a, b), [x, w, y])
}

pub fn execute_conv_scaled(
    s: &Sim,
    h: Handle,
    dir: Dir,
    call: &ConvCall,
    algo: c_int,
    (ws, ws_size): (*mut c_void, usize),
    (a, b): (f32, f32),
    [x, w, y]: [*const c_void; 3],
) -> Result<(), Status> {
    check_workspace(s, dir, algo, &call.geom, ws, ws_size)?;
    let what: &CStr = match dir {
        Dir::Fwd => c"cudnnConvolutionForward",
        Dir::BwdData => c"cudnnConvolutionBackwardData",
        Dir::BwdFilter => c"cudnnConvolutionBackwardFilter",
    };
    let spec = ConvSpec {
        geom: call.geom,
        flip: call.flip,
    };
    // The output, read only when beta is not 0.
    let (out_t, out_p) = match dir {
        Dir::Fwd => (&call.y, y),
        Dir::BwdData => (&call.x, x),
        Dir::BwdFilter => (&call.w, w),
    };
    let load_out = |t: &Tensor, p: *const c_void| -> Result<Vec<f32>, Status> {
        if b != 0.0 {
            load(s, t, p, what)
        } else {
            Ok(vec![0.0; count(t)])
        }
    };
    let out = match dir {
        Dir::Fwd => {
            let (xv, wv) = (load(s, &call.x, x, what)?, load(s, &call.w, w, what)?);
            let mut yv = load_out(out_t, out_p)?;
            if data_mode(s) {
                math::conv_forward(&spec, &xv, &wv, &mut yv, a, b);
            }
            yv
        }
        Dir::BwdData => {
            let (dyv, wv) = (load(s, &call.y, y, what)?, load(s, &call.w, w, what)?);
            let mut dxv = load_out(out_t, out_p)?;
            if data_mode(s) {
                math::conv_backward_data(&spec, &dyv, &wv, &mut dxv, a, b);
            }
            dxv
        }
        Dir::BwdFilter => {
            let (xv, dyv) = (load(s, &call.x, x, what)?, load(s, &call.y, y, what)?);
            let mut dwv = load_out(out_t, out_p)?;
            if data_mode(s) {
                math::conv_backward_filter(&spec, &xv, &dyv, &mut dwv, a, b);
            }
            dwv
        }
    };
    store(s, out_t, out_p as *mut c_void, &out, what)?;
    submit(s, h, conv_time(s, dir, algo as usize, call), false)
}

/// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (all three share this layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AlgoPerf {
    pub algo: c_int,
    pub status: Status,
    pub time: f32,
    pub memory: usize,
    pub determinism: c_int,
    pub math_type: c_int,
    pub reserved: [c_int; 3],
}

/// Every algorithm of `dir` for the call: supported ones first, by modelled time.
/// `limit` marks as failed those whose workspace exceeds it (with status `over`).
pub fn rank(s: &Sim, dir: Dir, call: &ConvCall, limit: Option<(usize, Status)>) -> Vec<AlgoPerf> {
    let cd_math = if call.tensor_op { 1 } else { 0 };
    let mut v: Vec<AlgoPerf> = (0..dir.algo_count())
        .map(|a| {
            let supported = conv::support(dir, a, &call.geom).is_ok();
            let memory = conv::workspace(dir, a, &call.geom) as usize;
            let mut status = if supported { SUCCESS } else { NOT_SUPPORTED };
            if let Some((lim, over)) = limit
                && supported
                && memory > lim
            {
                status = over;
            }
            let time = if status == SUCCESS {
                (conv_time(s, dir, a, call) * 1e3) as f32
            } else {
                -1.0
            };
            AlgoPerf {
                algo: a as c_int,
                status,
                time,
                memory: if supported { memory } else { 0 },
                determinism: conv::deterministic(dir, a) as c_int,
                math_type: cd_math,
                reserved: [0; 3],
            }
        })
        .collect();
    v.sort_by(|a, b| {
        (a.status != SUCCESS)
            .cmp(&(b.status != SUCCESS))
            .then(a.time.total_cmp(&b.time))
            .then(a.algo.cmp(&b.algo))
    });
    v
}

/// The convolution's geometry from its descriptors, checked for consistency with cuDNN's rules.
pub fn geometry(x: &Tensor, w: &Filter, c: &ConvDesc) -> Result<Geom, Status> {
    if x.nb != w.nb || x.nb < 3 || x.nb > 5 || c.nb != x.nb - 2 {
        return Err(BAD_PARAM);
    }
    let sd = x.nb - 2;
    let mut input = [1u64; 3];
    let mut filt = [1u64; 3];
    for i in 0..sd {
        input[3 - sd + i] = x.dims[2 + i] as u64;
        filt[3 - sd + i] = w.dims[2 + i] as u64;
    }
    let groups = c.groups as u64;
    let (n, ch, k) = (x.dims[0] as u64, x.dims[1] as u64, w.dims[0] as u64);
    if ch % groups != 0 || k % groups != 0 || w.dims[1] as u64 * groups != ch {
        return Err(BAD_PARAM);
    }
    let g = Geom {
        n,
        c: ch,
        k,
        groups,
        spatial_dims: sd,
        input,
        filter: filt,
        pad: c.pad.map(|v| v as u64),
        stride: c.stride.map(|v| v as u64),
        dilation: c.dil.map(|v| v as u64),
    };
    g.output().ok_or(BAD_PARAM)?;
    Ok(g)
}

pub fn output_dims(
    conv: *const c_void,
    x: *const c_void,
    w: *const c_void,
) -> Result<Vec<i64>, Status> {
    let (x, w, c) = (tensor(x)?, filter(w)?, conv_desc(conv)?);
    let g = geometry(&x, &w, &c)?;
    let o = g.output().ok_or(BAD_PARAM)?;
    let mut dims = vec![g.n as i64, g.k as i64];
    dims.extend(o[3 - g.spatial_dims..].iter().map(|&v| v as i64));
    Ok(dims)
}
