//! Graphs of a forward convolution followed by pointwise operations (bias add, activation, ...),
//! as TensorFlow builds for fused convolution + bias + activation and PyTorch for conv + add +
//! ReLU. The convolution's output and the intermediate results may be virtual (never in device
//! memory); each engine of the convolution runs the whole chain, costing its convolution plus
//! one memory-bound pass per pointwise operation.

use super::ops::tensor_of;
use super::*;

// cudnnPointwiseMode_t
const ADD: i64 = 0;
const MUL: i64 = 1;
const MIN: i64 = 2;
const MAX: i64 = 3;
const SUB: i64 = 9;
const IDENTITY: i64 = 21;
const RELU_FWD: i64 = 100;
const TANH_FWD: i64 = 101;
const SIGMOID_FWD: i64 = 102;

/// One pointwise operation of a chain: `y = mode(alpha1 * x, alpha2 * b)` (unary modes ignore b).
#[derive(Clone, Debug)]
pub struct Pointwise {
    pub mode: i64,
    pub alpha: (f32, f32),
    pub relu_lower: f32,
    /// The second operand (broadcast over the output), if the mode takes one.
    pub b: Option<(Tensor, i64, usize)>,
    pub y: (Tensor, i64, usize),
    pub y_virtual: bool,
}

pub fn is_virtual(t: &Desc) -> bool {
    t.attrs
        .get(&ATTR_TENSOR_IS_VIRTUAL)
        .and_then(|a| a.i64s().first().copied())
        .is_some_and(|v| v != 0)
}

fn binary(mode: i64) -> Option<bool> {
    match mode {
        ADD | MUL | MIN | MAX | SUB => Some(true),
        IDENTITY | RELU_FWD | TANH_FWD | SIGMOID_FWD => Some(false),
        _ => None,
    }
}

/// Whether `b` broadcasts to `y` (each dimension equal or 1).
fn broadcasts(b: &Tensor, y: &Tensor) -> bool {
    b.nb == y.nb && (0..y.nb).all(|i| b.dims[i] == y.dims[i] || b.dims[i] == 1)
}

/// The pointwise operations in the order data flows from the convolution's output; each must
/// read the previous result as its x and produce a tensor of the same shape.
pub fn chain(conv: &ops::ConvOp, pws: &[&Desc]) -> Result<Vec<Pointwise>, Status> {
    let mut left: Vec<&Desc> = pws.to_vec();
    let (mut cur_uid, cur_t) = (conv.uids[2], conv.call.y);
    let mut out = Vec::new();
    while !left.is_empty() {
        let mut found = None;
        for (i, d) in left.iter().enumerate() {
            let (_, xd) = child(d, ATTR_OP_POINTWISE_XDESC, TENSOR_DESCRIPTOR)?;
            if tensor_of(&xd)?.1 == cur_uid {
                found = Some(i);
                break;
            }
        }
        let d = left.remove(found.ok_or(NOT_SUPPORTED_GRAPH_PATTERN)?);
        let (_, pd) = child(d, ATTR_OP_POINTWISE_PW_DESCRIPTOR, POINTWISE_DESCRIPTOR)?;
        let mode = one(&pd, ATTR_POINTWISE_MODE)?;
        let takes_b = binary(mode).ok_or(NOT_SUPPORTED_GRAPH_PATTERN)?;
        let (_, yd) = child(d, ATTR_OP_POINTWISE_YDESC, TENSOR_DESCRIPTOR)?;
        let y = tensor_of(&yd)?;
        same_dims(&y.0, &cur_t)?;
        let b = if takes_b {
            let (_, bd) = child(d, ATTR_OP_POINTWISE_BDESC, TENSOR_DESCRIPTOR)?;
            if is_virtual(&bd) {
                return Err(NOT_SUPPORTED_GRAPH_PATTERN);
            }
            let b = tensor_of(&bd)?;
            if !broadcasts(&b.0, &cur_t) {
                return Err(BAD_PARAM);
            }
            Some(b)
        } else {
            None
        };
        require_float(&[y.0.dtype])?;
        let scale = |name: c_int| d.attrs.get(&name).and_then(Attr::scalar).unwrap_or(1.0);
        let relu_lower = pd
            .attrs
            .get(&ATTR_POINTWISE_RELU_LOWER_CLIP)
            .and_then(Attr::scalar)
            .unwrap_or(0.0);
        cur_uid = y.1;
        out.push(Pointwise {
            mode,
            alpha: (
                scale(ATTR_OP_POINTWISE_ALPHA1),
                scale(ATTR_OP_POINTWISE_ALPHA2),
            ),
            relu_lower,
            b,
            y,
            y_virtual: is_virtual(&yd),
        });
    }
    if out.last().is_some_and(|p| p.y_virtual) {
        return Err(BAD_PARAM);
    }
    Ok(out)
}

fn apply(p: &Pointwise, x: &[f32], b: &[f32]) -> Vec<f32> {
    let (a1, a2) = p.alpha;
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let v = a1 * v;
            let bv = b.get(i).map_or(0.0, |&w| a2 * w);
            match p.mode {
                ADD => v + bv,
                MUL => v * bv,
                MIN => v.min(bv),
                MAX => v.max(bv),
                SUB => v - bv,
                RELU_FWD => v.max(p.relu_lower),
                TANH_FWD => v.tanh(),
                SIGMOID_FWD => 1.0 / (1.0 + (-v).exp()),
                _ => v,
            }
        })
        .collect()
}

/// `b` (dense, logical order) repeated over the dimensions where it has extent 1.
fn broadcast(b: &[f32], bt: &Tensor, y: &Tensor) -> Vec<f32> {
    let n = count(y);
    let mut out = Vec::with_capacity(n);
    let mut idx = [0i64; 8];
    for _ in 0..n {
        let k = (0..y.nb).fold(0i64, |k, d| {
            k * bt.dims[d] + if bt.dims[d] == 1 { 0 } else { idx[d] }
        });
        out.push(b[k as usize]);
        for d in (0..y.nb).rev() {
            idx[d] += 1;
            if idx[d] < y.dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Runs a convolution + pointwise chain; `ptr(uid, align)` finds a tensor's device pointer,
/// `is_null(uid)` whether the variant pack gives it NULL. A second operand scaled by 0 may be
/// NULL: it is not read (TensorFlow's fused convolution `act(conv + 0 * z + bias)` passes its
/// absent side input `z` so, and runs on the real cuDNN 9).
pub fn execute(
    s: &Sim,
    h: Handle,
    op: &ops::ConvOp,
    ws: (*mut c_void, usize),
    ptr: impl Fn(i64, usize) -> Result<*const c_void, Status>,
    is_null: impl Fn(i64) -> bool,
) -> Result<(), Status> {
    let what = c"cudnnBackendExecute";
    let call = &op.call;
    check_workspace(s, Dir::Fwd, op.algo, &call.geom, ws.0, ws.1)?;
    let (a, beta) = op.scale;
    if op.y_virtual && beta != 0.0 {
        return Err(BAD_PARAM);
    }
    let xv = load(s, &call.x, ptr(op.uids[0], op.aligns[0])?, what)?;
    let wv = load(s, &call.w, ptr(op.uids[1], op.aligns[1])?, what)?;
    let data = data_mode(s);
    let mut cur = vec![0f32; if data { count(&call.y) } else { 0 }];
    if !op.y_virtual {
        let yp = ptr(op.uids[2], op.aligns[2])?;
        if beta != 0.0 {
            cur = load(s, &call.y, yp, what)?;
        }
    }
    if data {
        let spec = ConvSpec {
            geom: call.geom,
            flip: call.flip,
        };
        math::conv_forward(&spec, &xv, &wv, &mut cur, a, beta);
    }
    if !op.y_virtual {
        store(
            s,
            &call.y,
            ptr(op.uids[2], op.aligns[2])? as *mut c_void,
            &cur,
            what,
        )?;
    }
    let mut seconds = conv_time(s, Dir::Fwd, op.algo as usize, call);
    for p in &op.pointwise {
        let bv = match &p.b {
            Some((_, uid, _)) if p.alpha.1 == 0.0 && is_null(*uid) => {
                if data {
                    vec![0.0; count(&call.y)]
                } else {
                    Vec::new()
                }
            }
            Some((bt, uid, align)) => {
                let b = load(s, bt, ptr(*uid, *align)?, what)?;
                if data { broadcast(&b, bt, &call.y) } else { b }
            }
            None => Vec::new(),
        };
        if data {
            cur = apply(p, &cur, &bv);
        }
        if !p.y_virtual {
            store(s, &p.y.0, ptr(p.y.1, p.y.2)? as *mut c_void, &cur, what)?;
        }
        seconds += elementwise_time(s, count(&call.y), if p.b.is_some() { 3 } else { 2 });
    }
    submit(s, h, seconds, false)
}
