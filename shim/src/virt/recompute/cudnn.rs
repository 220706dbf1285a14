//! Replays of cuDNN calls, legacy and backend: the legacy call again through Marmoset's own
//! handle, its descriptors rebuilt from the recorded dims and strides and its scalars by value;
//! a backend execution through the program's own execution plan, still alive, with the
//! current addresses in a new variant pack.

use super::{Recipe, reserve_at};
use crate::ffi::cudnn_backend::{destroy, pack, plan_life, replay_execute};
use crate::ffi::{call, call_why, table};
use planner::trace::{Access, Replay, TensorArg};
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

type P = *mut c_void;

/// Marmoset's own cuDNN handle for replays (created once).
static HANDLE: Mutex<usize> = Mutex::new(0);

/// A tensor descriptor built from recorded dims and strides, destroyed when dropped.
struct Desc(usize);

impl Desc {
    fn tensor(dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<Desc, String> {
        let mut d: P = std::ptr::null_mut();
        call_why!(cudnnCreateTensorDescriptor(&mut d))?;
        let d = Desc(d as usize);
        let to32 = |v: &[i64]| -> Result<Vec<c_int>, String> {
            v.iter()
                .map(|&x| c_int::try_from(x).map_err(|_| format!("dimension {x} out of range")))
                .collect()
        };
        let (dims, strides) = (to32(dims)?, to32(strides)?);
        call_why!(cudnnSetTensorNdDescriptor(
            d.0 as P,
            dtype,
            dims.len() as c_int,
            dims.as_ptr(),
            strides.as_ptr()
        ))?;
        Ok(d)
    }
}

/// A filter descriptor from recorded dims and strides (NCHW or NHWC packed), destroyed when
/// dropped.
struct Filter(usize);

impl Filter {
    fn of(dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<Filter, String> {
        let packed = |order: &[usize]| {
            let mut s = vec![0; dims.len()];
            let mut acc = 1;
            for &i in order.iter().rev() {
                s[i] = acc;
                acc *= dims[i];
            }
            s
        };
        let n = dims.len();
        let nchw: Vec<usize> = (0..n).collect();
        let nhwc: Vec<usize> = std::iter::once(0)
            .chain(2..n)
            .chain(std::iter::once(1))
            .collect();
        let format = if strides == packed(&nchw).as_slice() {
            0
        } else if n > 2 && strides == packed(&nhwc).as_slice() {
            1
        } else {
            return Err("the filter's strides are neither NCHW nor NHWC".into());
        };
        let dims: Vec<c_int> = dims
            .iter()
            .map(|&x| c_int::try_from(x).map_err(|_| format!("dimension {x} out of range")))
            .collect::<Result<_, _>>()?;
        let mut d: P = std::ptr::null_mut();
        call_why!(cudnnCreateFilterDescriptor(&mut d))?;
        let f = Filter(d as usize);
        call_why!(cudnnSetFilterNdDescriptor(
            f.0 as P,
            dtype,
            format,
            dims.len() as c_int,
            dims.as_ptr()
        ))?;
        Ok(f)
    }
}

impl Drop for Filter {
    fn drop(&mut self) {
        let _ = call!(cudnnDestroyFilterDescriptor(self.0 as P));
    }
}

/// A convolution descriptor from recorded parameters, destroyed when dropped.
struct Conv(usize);

impl Conv {
    fn of(p: &planner::trace::ConvParams) -> Result<Conv, String> {
        let n = p.pads.len();
        if p.strides.len() != n || p.dilations.len() != n {
            return Err("the convolution's parameters disagree in length".into());
        }
        let mut d: P = std::ptr::null_mut();
        call_why!(cudnnCreateConvolutionDescriptor(&mut d))?;
        let c = Conv(d as usize);
        call_why!(cudnnSetConvolutionNdDescriptor(
            c.0 as P,
            n as c_int,
            p.pads.as_ptr(),
            p.strides.as_ptr(),
            p.dilations.as_ptr(),
            p.mode,
            p.compute
        ))?;
        call_why!(cudnnSetConvolutionGroupCount(c.0 as P, p.groups))?;
        call_why!(cudnnSetConvolutionMathType(c.0 as P, p.math))?;
        Ok(c)
    }
}

impl Drop for Conv {
    fn drop(&mut self) {
        let _ = call!(cudnnDestroyConvolutionDescriptor(self.0 as P));
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        let _ = call!(cudnnDestroyTensorDescriptor(self.0 as P));
    }
}

/// Scaling parameters as cuDNN reads them: double for double tensors, float otherwise.
enum Scalar {
    F32(f32),
    F64(f64),
}

impl Scalar {
    fn of(v: f64, dtype: c_int) -> Scalar {
        if dtype == 1 {
            Scalar::F64(v)
        } else {
            Scalar::F32(v as f32)
        }
    }
    fn ptr(&self) -> P {
        match self {
            Scalar::F32(x) => x as *const f32 as P,
            Scalar::F64(x) => x as *const f64 as P,
        }
    }
}

/// The recipe's legacy cuDNN call (or backend execution) again with its recorded lineage, the
/// current addresses in `tensors`, on `stream`, with the workspace at `ws`. `corrupt`: a
/// deliberately wrong replay, for MARMOSET_VERIFY's test.
pub(super) fn replay(
    r: &Recipe,
    tensors: &[TensorArg],
    stream: u64,
    ws: u64,
    corrupt: bool,
) -> Result<(), String> {
    if let Replay::Backend { plan, life } = r.replay {
        return backend(&r.api, tensors, plan, life, stream, ws, corrupt);
    }
    let Replay::Cudnn {
        alpha: Some(alpha),
        beta: Some(beta),
        dtype: Some(dtype),
        activation,
        softmax,
        conv,
        batchnorm,
    } = &r.replay
    else {
        return Err("no lineage".into());
    };
    let h = handle()?;
    call_why!(cudnnSetStream(h as P, stream as P))?;
    // MARMOSET_TEST_CORRUPT_REPLAY: a deliberately wrong replay, for MARMOSET_VERIFY's test;
    // negated, so that even a reader that needs only the signs (ReLU's backward) sees it.
    let alpha = if corrupt { -alpha } else { *alpha };
    let (a, b) = (Scalar::of(alpha, *dtype), Scalar::of(*beta, *dtype));
    let arg = |role: &str| -> Result<(Desc, P), String> {
        let t = tensors
            .iter()
            .find(|t| t.role == role)
            .ok_or_else(|| format!("no {role} argument"))?;
        Ok((Desc::tensor(*dtype, &t.dims, &t.strides)?, t.ptr as P))
    };
    match r.api.as_str() {
        "cudnnActivationForward" => {
            let p = activation.as_ref().ok_or("no activation parameters")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let mut ad: P = std::ptr::null_mut();
            call_why!(cudnnCreateActivationDescriptor(&mut ad))?;
            let run = || -> Result<(), String> {
                call_why!(cudnnSetActivationDescriptor(ad, p.mode, p.nan, p.coef))?;
                call_why!(cudnnActivationForward(
                    h as P,
                    ad,
                    a.ptr(),
                    xd.0 as P,
                    x,
                    b.ptr(),
                    yd.0 as P,
                    y
                ))
            };
            let done = run();
            let _ = call!(cudnnDestroyActivationDescriptor(ad));
            done
        }
        "cudnnAddTensor" => {
            let ((ad, x), (cd, c)) = (arg("a")?, arg("c")?);
            call_why!(cudnnAddTensor(
                h as P,
                a.ptr(),
                ad.0 as P,
                x,
                b.ptr(),
                cd.0 as P,
                c
            ))
        }
        "cudnnSoftmaxForward" => {
            let (algo, mode) = softmax.ok_or("no softmax settings")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            call_why!(cudnnSoftmaxForward(
                h as P,
                algo,
                mode,
                a.ptr(),
                xd.0 as P,
                x,
                b.ptr(),
                yd.0 as P,
                y
            ))
        }
        "cudnnConvolutionForward" => {
            let p = conv.as_ref().ok_or("no convolution parameters")?;
            let algo = r.algo.ok_or("no algorithm")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let w = tensors
                .iter()
                .find(|t| t.role == "w")
                .ok_or("no w argument")?;
            let wd = Filter::of(*dtype, &w.dims, &w.strides)?;
            let cd = Conv::of(p)?;
            call_why!(cudnnConvolutionForward(
                h as P,
                a.ptr(),
                xd.0 as P,
                x,
                wd.0 as P,
                w.ptr as P,
                cd.0 as P,
                algo,
                ws as P,
                r.workspace as usize,
                b.ptr(),
                yd.0 as P,
                y
            ))
        }
        "cudnnBatchNormalizationForwardTraining" | "cudnnBatchNormalizationForwardTrainingEx" => {
            let p = batchnorm.as_ref().ok_or("no batch-norm parameters")?;
            let ((xd, x), (yd, y)) = (arg("x")?, arg("y")?);
            let scale = tensors
                .iter()
                .find(|t| t.role == "scale")
                .ok_or("no scale argument")?;
            let bias = tensors
                .iter()
                .find(|t| t.role == "bias")
                .ok_or("no bias argument")?;
            // The parameters are float for half and bfloat16 tensors (cuDNN's rule for the
            // derived descriptor), else the tensors' type.
            let ptype = if matches!(*dtype, 2 | 9) { 0 } else { *dtype };
            let pd = Desc::tensor(ptype, &scale.dims, &scale.strides)?;
            let null: P = std::ptr::null_mut();
            // No running statistics (both NULL: not updated) and no saved statistics (both
            // NULL: not saved): the replay rebuilds y and has no other effect. The
            // exponential-average factor is then unused.
            if r.api == "cudnnBatchNormalizationForwardTraining" {
                call_why!(cudnnBatchNormalizationForwardTraining(
                    h as P,
                    p.mode,
                    a.ptr(),
                    b.ptr(),
                    xd.0 as P,
                    x,
                    yd.0 as P,
                    y,
                    pd.0 as P,
                    scale.ptr as P,
                    bias.ptr as P,
                    0.0,
                    null,
                    null,
                    p.epsilon,
                    null,
                    null
                ))
            } else {
                let (res, res_size) = match r.reserve {
                    0 => (null, 0usize),
                    n => ((ws + reserve_at(r.workspace)) as P, n as usize),
                };
                let (wsp, wss) = match r.workspace {
                    0 => (null, 0usize),
                    n => (ws as P, n as usize),
                };
                call_why!(cudnnBatchNormalizationForwardTrainingEx(
                    h as P,
                    p.mode,
                    p.ops,
                    a.ptr(),
                    b.ptr(),
                    xd.0 as P,
                    x,
                    null,
                    null,
                    yd.0 as P,
                    y,
                    pd.0 as P,
                    scale.ptr as P,
                    bias.ptr as P,
                    0.0,
                    null,
                    null,
                    p.epsilon,
                    null,
                    null,
                    null,
                    wsp,
                    wss,
                    res,
                    res_size
                ))
            }
        }
        other => Err(format!("{other} is not replayed")),
    }
}

/// A backend execution again: the program's execution plan (alive, the life recorded), a
/// variant pack of the recorded unique ids and the current addresses, Marmoset's workspace.
/// `corrupt`: the first four bytes of each output set to 0xff afterwards, for MARMOSET_VERIFY's
/// test (a plan has no scaling parameter Marmoset may change, and a moved pointer breaks the
/// alignment the plan was made for).
fn backend(
    api: &str,
    tensors: &[TensorArg],
    plan: u64,
    life: u64,
    stream: u64,
    ws: u64,
    corrupt: bool,
) -> Result<(), String> {
    if plan_life(plan as usize) != Some(life) {
        return Err(format!("the execution plan {plan:#x} was destroyed"));
    }
    let mut ids = Vec::new();
    let mut ptrs = Vec::new();
    for t in tensors {
        ids.push(
            t.uid
                .ok_or_else(|| format!("{} has no unique id", t.role))?,
        );
        ptrs.push(t.ptr as i64);
    }
    let h = handle()?;
    call_why!(cudnnSetStream(h as P, stream as P))?;
    // Under μ-cuDNN the program's execution ran as the micro-batches of Marmoset's
    // configuration, in the workspace that configuration needs (the recorded one): so does
    // its replay. Where the graph is not micro-batched, the plan runs undivided as recorded.
    let micro = MICRO_EXECUTE
        .get()
        .filter(|_| crate::core::state::config().microbatching())
        .map(|execute| {
            let d = pack(&ids, &ptrs, ws as i64)?;
            let r = execute(h as P, plan as usize, d);
            destroy(d);
            r
        });
    match micro.flatten() {
        Some(0) => {}
        Some(r) => {
            return Err(format!(
                "{api} through plan {plan:#x} as micro-batches: {r}"
            ));
        }
        None => replay_execute(h, plan as usize, &ids, &ptrs, ws as i64)
            .map_err(|why| format!("{api} through plan {plan:#x}: {why}"))?,
    }
    if corrupt {
        let set = table::cuMemsetD8Async().ok_or("the driver has no cuMemsetD8Async")?;
        for t in tensors.iter().filter(|t| t.access == Access::W) {
            // SAFETY: four bytes at the start of a live, mapped output.
            unsafe { set(t.ptr, 0xff, 4, stream as P) };
        }
    }
    Ok(())
}

/// μ-cuDNN's execution of a backend plan as micro-batches (`microbatch::backend::execute`:
/// None where the graph is not micro-batched), attached once at start-up by the crate root:
/// the memory virtualisation and μ-cuDNN meet only below them.
pub type MicroExecute = fn(P, usize, usize) -> Option<c_int>;

static MICRO_EXECUTE: std::sync::OnceLock<MicroExecute> = std::sync::OnceLock::new();

/// Attaches [`MicroExecute`] (once, at start-up).
pub fn attach_micro_execute(f: MicroExecute) {
    let _ = MICRO_EXECUTE.set(f);
}

fn handle() -> Result<usize, String> {
    let mut g = HANDLE
        .lock()
        .map_err(|_| "the replay handle's lock is poisoned")?;
    if *g == 0 {
        let mut h: P = std::ptr::null_mut();
        call_why!(cudnnCreate(&mut h))?;
        *g = h as usize;
    }
    Ok(*g)
}
