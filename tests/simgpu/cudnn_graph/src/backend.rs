//! The cuDNN backend (graph) API, as far as frameworks use it for convolutions: tensor and
//! convolution descriptors, the three convolution operations, an operation graph of one
//! operation, engines (the global index is the legacy algorithm of the operation's direction),
//! engine configurations, execution plans (with their workspace size) and variant packs.
//! `cudnnBackendExecute` runs the convolution for real through the same code as the legacy API.
//! Graphs of several operations (fusions) answer CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN.

use super::*;

// cudnnBackendDescriptorType_t
pub const CONVOLUTION_DESCRIPTOR: c_int = 1;
pub const ENGINE_DESCRIPTOR: c_int = 2;
pub const ENGINECFG_DESCRIPTOR: c_int = 3;
pub const EXECUTION_PLAN_DESCRIPTOR: c_int = 5;
pub const OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: c_int = 10;
pub const OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: c_int = 11;
pub const OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: c_int = 12;
pub const OPERATIONGRAPH_DESCRIPTOR: c_int = 15;
pub const VARIANT_PACK_DESCRIPTOR: c_int = 16;
pub const TENSOR_DESCRIPTOR: c_int = 17;
const LAST_DESCRIPTOR_TYPE: c_int = 33;

// cudnnBackendAttributeType_t
pub const TYPE_HANDLE: c_int = 0;
pub const TYPE_BOOLEAN: c_int = 2;
pub const TYPE_INT64: c_int = 3;
pub const TYPE_FLOAT: c_int = 4;
pub const TYPE_DOUBLE: c_int = 5;
pub const TYPE_VOID_PTR: c_int = 6;
pub const TYPE_BACKEND_DESCRIPTOR: c_int = 15;
pub const TYPE_CHAR: c_int = 24;
const LAST_ATTRIBUTE_TYPE: c_int = 29;

// cudnnBackendAttributeName_t
pub const ATTR_CONVOLUTION_CONV_MODE: c_int = 101;
pub const ATTR_CONVOLUTION_DILATIONS: c_int = 102;
pub const ATTR_CONVOLUTION_FILTER_STRIDES: c_int = 103;
pub const ATTR_CONVOLUTION_POST_PADDINGS: c_int = 104;
pub const ATTR_CONVOLUTION_PRE_PADDINGS: c_int = 105;
pub const ATTR_CONVOLUTION_SPATIAL_DIMS: c_int = 106;
pub const ATTR_ENGINECFG_ENGINE: c_int = 300;
pub const ATTR_EXECUTION_PLAN_HANDLE: c_int = 400;
pub const ATTR_EXECUTION_PLAN_ENGINE_CONFIG: c_int = 401;
pub const ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: c_int = 402;
/// First attribute of each convolution operation: ALPHA, BETA, CONV_DESC, then the tensors in
/// the order the header lists them (forward: W, X, Y; data: W, DX, DY; filter: DW, X, DY).
pub const ATTR_OP_CONV_FWD: c_int = 700;
pub const ATTR_OP_CONV_BWD_DATA: c_int = 706;
pub const ATTR_OP_CONV_BWD_FILTER: c_int = 712;
pub const ATTR_OPERATIONGRAPH_HANDLE: c_int = 800;
pub const ATTR_OPERATIONGRAPH_OPS: c_int = 801;
pub const ATTR_TENSOR_DATA_TYPE: c_int = 901;
pub const ATTR_TENSOR_DIMENSIONS: c_int = 902;
pub const ATTR_TENSOR_STRIDES: c_int = 903;
pub const ATTR_TENSOR_UNIQUE_ID: c_int = 906;
pub const ATTR_VARIANT_PACK_UNIQUE_IDS: c_int = 1000;
pub const ATTR_VARIANT_PACK_DATA_POINTERS: c_int = 1001;
pub const ATTR_VARIANT_PACK_WORKSPACE: c_int = 1003;
pub const ATTR_ENGINE_OPERATION_GRAPH: c_int = 1300;
pub const ATTR_ENGINE_GLOBAL_INDEX: c_int = 1301;

pub const STATUS_BAD_PARAM_NOT_FINALIZED: Status = 2004;
pub const STATUS_NOT_SUPPORTED_GRAPH_PATTERN: Status = 3001;

/// Bytes of one element of an attribute type.
fn elem_bytes(ty: c_int) -> usize {
    match ty {
        TYPE_HANDLE | TYPE_INT64 | TYPE_DOUBLE | TYPE_VOID_PTR | TYPE_BACKEND_DESCRIPTOR => 8,
        TYPE_BOOLEAN | TYPE_CHAR => 1,
        _ => 4,
    }
}

#[derive(Debug, Clone)]
struct Attr {
    ty: c_int,
    count: usize,
    bytes: Vec<u8>,
}

impl Attr {
    fn i64s(&self) -> Vec<i64> {
        match self.ty {
            TYPE_INT64 | TYPE_HANDLE | TYPE_VOID_PTR | TYPE_BACKEND_DESCRIPTOR => self
                .bytes
                .chunks_exact(8)
                .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
                .collect(),
            TYPE_BOOLEAN | TYPE_CHAR => self.bytes.iter().map(|&b| b as i64).collect(),
            _ => self
                .bytes
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes(c.try_into().unwrap()) as i64)
                .collect(),
        }
    }

    fn scalar(&self) -> Option<f32> {
        match self.ty {
            TYPE_FLOAT => self
                .bytes
                .get(..4)
                .map(|b| f32::from_ne_bytes(b.try_into().unwrap())),
            TYPE_DOUBLE => self
                .bytes
                .get(..8)
                .map(|b| f64::from_ne_bytes(b.try_into().unwrap()) as f32),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Desc {
    ty: c_int,
    attrs: HashMap<c_int, Attr>,
    finalized: bool,
}

static DESCS: LazyLock<Mutex<HashMap<usize, Desc>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn descs() -> std::sync::MutexGuard<'static, HashMap<usize, Desc>> {
    DESCS.lock().unwrap_or_else(|p| p.into_inner())
}

fn desc(d: usize) -> Result<Desc, Status> {
    descs().get(&d).cloned().ok_or(BAD_PARAM)
}

fn attr(d: &Desc, name: c_int) -> Result<&Attr, Status> {
    d.attrs.get(&name).ok_or(BAD_PARAM)
}

fn one(d: &Desc, name: c_int) -> Result<i64, Status> {
    attr(d, name)?.i64s().first().copied().ok_or(BAD_PARAM)
}

/// A finalized descriptor of type `ty` referenced by attribute `name` of `d`.
fn child(d: &Desc, name: c_int, ty: c_int) -> Result<(usize, Desc), Status> {
    let h = one(d, name)? as usize;
    let c = desc(h)?;
    if c.ty != ty {
        return Err(BAD_PARAM);
    }
    if !c.finalized {
        return Err(STATUS_BAD_PARAM_NOT_FINALIZED);
    }
    Ok((h, c))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendCreateDescriptor(ty: c_int, out: *mut Handle) -> Status {
    run(|| {
        if !(0..=LAST_DESCRIPTOR_TYPE).contains(&ty) {
            return Err(BAD_PARAM);
        }
        if out.is_null() {
            return Err(BAD_PARAM_NULL_POINTER);
        }
        let addr = Box::into_raw(Box::new(0u64)) as usize;
        descs().insert(
            addr,
            Desc {
                ty,
                attrs: HashMap::new(),
                finalized: false,
            },
        );
        put(out, addr as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendDestroyDescriptor(d: Handle) -> Status {
    run(|| {
        descs().remove(&(d as usize)).ok_or(BAD_PARAM)?;
        // SAFETY: the address came from Box::into_raw in cudnnBackendCreateDescriptor, freed once.
        drop(unsafe { Box::from_raw(d as *mut u64) });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendSetAttribute(
    d: Handle,
    name: c_int,
    ty: c_int,
    count: i64,
    values: *const c_void,
) -> Status {
    run(|| {
        if !(0..=LAST_ATTRIBUTE_TYPE).contains(&ty) || count < 0 {
            return Err(BAD_PARAM);
        }
        let n = count as usize * elem_bytes(ty);
        let bytes = if n == 0 {
            Vec::new()
        } else {
            slice(values as *const u8, n)?.to_vec()
        };
        let mut all = descs();
        let desc = all.get_mut(&(d as usize)).ok_or(BAD_PARAM)?;
        if desc.finalized {
            return Err(BAD_PARAM);
        }
        desc.attrs.insert(
            name,
            Attr {
                ty,
                count: count as usize,
                bytes,
            },
        );
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendGetAttribute(
    d: *const c_void,
    name: c_int,
    ty: c_int,
    requested: i64,
    count: *mut i64,
    values: *mut c_void,
) -> Status {
    run(|| {
        let desc = desc(d as usize)?;
        if !desc.finalized {
            return Err(STATUS_BAD_PARAM_NOT_FINALIZED);
        }
        let computed;
        let a =
            if desc.ty == EXECUTION_PLAN_DESCRIPTOR && name == ATTR_EXECUTION_PLAN_WORKSPACE_SIZE {
                let ws = plan_op(&desc).map(|op| op.workspace)?;
                computed = Attr {
                    ty: TYPE_INT64,
                    count: 1,
                    bytes: (ws as i64).to_ne_bytes().to_vec(),
                };
                &computed
            } else {
                attr(&desc, name)?
            };
        if a.ty != ty || requested < 0 {
            return Err(BAD_PARAM);
        }
        put(count, a.count as i64)?;
        let n = (requested as usize).min(a.count) * elem_bytes(ty);
        if n > 0 {
            if values.is_null() {
                return Err(BAD_PARAM_NULL_POINTER);
            }
            // SAFETY: values holds `requested` elements of the attribute type (API contract).
            unsafe { std::ptr::copy_nonoverlapping(a.bytes.as_ptr(), values as *mut u8, n) };
        }
        Ok(())
    })
}

/// The tensor of a finalized backend tensor descriptor (float only), and its unique id.
fn tensor_of(d: &Desc) -> Result<(Tensor, i64), Status> {
    let dims = attr(d, ATTR_TENSOR_DIMENSIONS)?.i64s();
    let strides = attr(d, ATTR_TENSOR_STRIDES)?.i64s();
    if dims.len() != strides.len() || !(3..=8).contains(&dims.len()) {
        return Err(BAD_PARAM);
    }
    let mut t = Tensor {
        dtype: one(d, ATTR_TENSOR_DATA_TYPE)? as c_int,
        nb: dims.len(),
        dims: [1; 8],
        strides: [1; 8],
    };
    t.dims[..dims.len()].copy_from_slice(&dims);
    t.strides[..dims.len()].copy_from_slice(&strides);
    Ok((t, one(d, ATTR_TENSOR_UNIQUE_ID)?))
}

/// A convolution operation, resolved: direction, the call, alpha/beta, the unique ids of
/// (x, w, y) and the algorithm's workspace (once an engine is known).
struct ConvOp {
    dir: Dir,
    call: ConvCall,
    scale: (f32, f32),
    uids: [i64; 3],
    algo: c_int,
    workspace: usize,
}

fn conv_op(op: &Desc) -> Result<ConvOp, Status> {
    let (dir, base) = match op.ty {
        OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR => (Dir::Fwd, ATTR_OP_CONV_FWD),
        OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR => (Dir::BwdData, ATTR_OP_CONV_BWD_DATA),
        OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR => {
            (Dir::BwdFilter, ATTR_OP_CONV_BWD_FILTER)
        }
        _ => return Err(STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
    };
    // Each operation lists alpha, beta, conv, then its tensors in the roles (w, x, y):
    // forward W, X, Y; backward-data W, DX, DY; backward-filter DW, X, DY.
    let (a_w, a_x, a_y) = (base + 3, base + 4, base + 5);
    let (_, wd) = child(op, a_w, TENSOR_DESCRIPTOR)?;
    let (_, xd) = child(op, a_x, TENSOR_DESCRIPTOR)?;
    let (_, yd) = child(op, a_y, TENSOR_DESCRIPTOR)?;
    let (_, cd) = child(op, base + 2, CONVOLUTION_DESCRIPTOR)?;
    let (x, xu) = tensor_of(&xd)?;
    let (w, wu) = tensor_of(&wd)?;
    let (y, yu) = tensor_of(&yd)?;
    require_float(&[x.dtype, w.dtype, y.dtype])?;
    let sd = one(&cd, ATTR_CONVOLUTION_SPATIAL_DIMS)? as usize;
    let pre = attr(&cd, ATTR_CONVOLUTION_PRE_PADDINGS)?.i64s();
    let post = attr(&cd, ATTR_CONVOLUTION_POST_PADDINGS)?.i64s();
    let stride = attr(&cd, ATTR_CONVOLUTION_FILTER_STRIDES)?.i64s();
    let dil = attr(&cd, ATTR_CONVOLUTION_DILATIONS)?.i64s();
    if pre != post {
        return Err(NOT_SUPPORTED);
    }
    if [pre.len(), stride.len(), dil.len()]
        .iter()
        .any(|&l| l != sd)
        || w.nb != x.nb
    {
        return Err(BAD_PARAM);
    }
    let mode = one(&cd, ATTR_CONVOLUTION_CONV_MODE)? as c_int;
    let groups = x.dims[1] / w.dims[1].max(1);
    let mut conv = ConvDesc {
        nb: 0,
        pad: [0; 3],
        stride: [1; 3],
        dil: [1; 3],
        mode,
        compute: 0,
        groups,
        math: 0,
    };
    conv.nb = sd;
    conv.pad[3 - sd..].copy_from_slice(&pre);
    conv.stride[3 - sd..].copy_from_slice(&stride);
    conv.dil[3 - sd..].copy_from_slice(&dil);
    let mut f = Filter {
        dtype: w.dtype,
        format: TENSOR_NCHW,
        nb: w.nb,
        dims: [1; 8],
    };
    f.dims[..w.nb].copy_from_slice(&w.dims[..w.nb]);
    let geom = geometry(&x, &f, &conv)?;
    let out = geom.output().ok_or(BAD_PARAM)?;
    let want: Vec<i64> = [geom.n as i64, geom.k as i64]
        .into_iter()
        .chain(out[3 - sd..].iter().map(|&v| v as i64))
        .collect();
    if y.dims[..y.nb] != want[..] {
        return Err(BAD_PARAM);
    }
    let scale = |name: c_int, default: f32| {
        op.attrs
            .get(&name)
            .and_then(Attr::scalar)
            .unwrap_or(default)
    };
    Ok(ConvOp {
        dir,
        call: ConvCall {
            geom,
            flip: mode == 0,
            tensor_op: false,
            x,
            w,
            y,
        },
        scale: (scale(base, 1.0), scale(base + 1, 0.0)),
        uids: [xu, wu, yu],
        algo: 0,
        workspace: 0,
    })
}

/// The single operation of a graph.
fn graph_op(g: &Desc) -> Result<ConvOp, Status> {
    let ops = attr(g, ATTR_OPERATIONGRAPH_OPS)?.i64s();
    if ops.len() != 1 {
        return Err(STATUS_NOT_SUPPORTED_GRAPH_PATTERN);
    }
    let op = desc(ops[0] as usize)?;
    if !op.finalized {
        return Err(STATUS_BAD_PARAM_NOT_FINALIZED);
    }
    conv_op(&op)
}

fn engine_op(e: &Desc) -> Result<ConvOp, Status> {
    let (_, g) = child(e, ATTR_ENGINE_OPERATION_GRAPH, OPERATIONGRAPH_DESCRIPTOR)?;
    let mut op = graph_op(&g)?;
    let algo = one(e, ATTR_ENGINE_GLOBAL_INDEX)?;
    if algo < 0 || algo as usize >= op.dir.algo_count() {
        return Err(NOT_SUPPORTED);
    }
    conv::support(op.dir, algo as usize, &op.call.geom).map_err(|_| NOT_SUPPORTED)?;
    op.algo = algo as c_int;
    op.workspace = conv::workspace(op.dir, algo as usize, &op.call.geom) as usize;
    Ok(op)
}

fn plan_op(p: &Desc) -> Result<ConvOp, Status> {
    let (_, cfg) = child(p, ATTR_EXECUTION_PLAN_ENGINE_CONFIG, ENGINECFG_DESCRIPTOR)?;
    let (_, e) = child(&cfg, ATTR_ENGINECFG_ENGINE, ENGINE_DESCRIPTOR)?;
    engine_op(&e)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendFinalize(d: Handle) -> Status {
    run(|| {
        let desc = desc(d as usize)?;
        if desc.finalized {
            return Err(BAD_PARAM);
        }
        match desc.ty {
            TENSOR_DESCRIPTOR => {
                tensor_of(&desc)?;
            }
            CONVOLUTION_DESCRIPTOR => {
                for a in [
                    ATTR_CONVOLUTION_SPATIAL_DIMS,
                    ATTR_CONVOLUTION_CONV_MODE,
                    ATTR_CONVOLUTION_PRE_PADDINGS,
                    ATTR_CONVOLUTION_POST_PADDINGS,
                    ATTR_CONVOLUTION_FILTER_STRIDES,
                    ATTR_CONVOLUTION_DILATIONS,
                ] {
                    attr(&desc, a)?;
                }
            }
            OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR => {
                conv_op(&desc)?;
            }
            OPERATIONGRAPH_DESCRIPTOR => {
                handle_stream(one(&desc, ATTR_OPERATIONGRAPH_HANDLE)? as Handle)?;
                graph_op(&desc)?;
            }
            ENGINE_DESCRIPTOR => {
                engine_op(&desc)?;
            }
            ENGINECFG_DESCRIPTOR => {
                child(&desc, ATTR_ENGINECFG_ENGINE, ENGINE_DESCRIPTOR)?;
            }
            EXECUTION_PLAN_DESCRIPTOR => {
                handle_stream(one(&desc, ATTR_EXECUTION_PLAN_HANDLE)? as Handle)?;
                plan_op(&desc)?;
            }
            VARIANT_PACK_DESCRIPTOR => {
                let ids = attr(&desc, ATTR_VARIANT_PACK_UNIQUE_IDS)?;
                let ptrs = attr(&desc, ATTR_VARIANT_PACK_DATA_POINTERS)?;
                if ids.count != ptrs.count {
                    return Err(BAD_PARAM);
                }
            }
            _ => return Err(NOT_SUPPORTED),
        }
        if let Some(x) = descs().get_mut(&(d as usize)) {
            x.finalized = true;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendExecute(h: Handle, plan: Handle, pack: Handle) -> Status {
    run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (p, v) = (desc(plan as usize)?, desc(pack as usize)?);
        if p.ty != EXECUTION_PLAN_DESCRIPTOR || v.ty != VARIANT_PACK_DESCRIPTOR {
            return Err(BAD_PARAM);
        }
        if !p.finalized || !v.finalized {
            return Err(STATUS_BAD_PARAM_NOT_FINALIZED);
        }
        let op = plan_op(&p)?;
        let ids = attr(&v, ATTR_VARIANT_PACK_UNIQUE_IDS)?.i64s();
        let ptrs = attr(&v, ATTR_VARIANT_PACK_DATA_POINTERS)?.i64s();
        let ptr = |uid: i64| -> Result<*const c_void, Status> {
            ids.iter()
                .position(|&u| u == uid)
                .map(|i| ptrs[i] as usize as *const c_void)
                .ok_or(BAD_PARAM)
        };
        let bufs = [ptr(op.uids[0])?, ptr(op.uids[1])?, ptr(op.uids[2])?];
        let ws = v
            .attrs
            .get(&ATTR_VARIANT_PACK_WORKSPACE)
            .and_then(|a| a.i64s().first().copied())
            .unwrap_or(0);
        execute_conv_scaled(
            s,
            h,
            op.dir,
            &op.call,
            op.algo,
            (ws as usize as *mut c_void, op.workspace),
            op.scale,
            bufs,
        )
    })
}

#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::cudnn::sys as dnn;

    #[test]
    fn backend_enums() {
        use dnn::cudnnBackendAttributeName_t as A;
        use dnn::cudnnBackendAttributeType_t as T;
        use dnn::cudnnBackendDescriptorType_t as D;
        for (ours, theirs) in [
            (
                CONVOLUTION_DESCRIPTOR,
                D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR as c_int,
            ),
            (
                ENGINE_DESCRIPTOR,
                D::CUDNN_BACKEND_ENGINE_DESCRIPTOR as c_int,
            ),
            (
                ENGINECFG_DESCRIPTOR,
                D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR as c_int,
            ),
            (
                EXECUTION_PLAN_DESCRIPTOR,
                D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR as c_int,
            ),
            (
                OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR as c_int,
            ),
            (
                OPERATIONGRAPH_DESCRIPTOR,
                D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR as c_int,
            ),
            (
                VARIANT_PACK_DESCRIPTOR,
                D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR as c_int,
            ),
            (
                TENSOR_DESCRIPTOR,
                D::CUDNN_BACKEND_TENSOR_DESCRIPTOR as c_int,
            ),
            (
                LAST_DESCRIPTOR_TYPE,
                D::CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR as c_int,
            ),
            (TYPE_HANDLE, T::CUDNN_TYPE_HANDLE as c_int),
            (TYPE_BOOLEAN, T::CUDNN_TYPE_BOOLEAN as c_int),
            (TYPE_INT64, T::CUDNN_TYPE_INT64 as c_int),
            (TYPE_FLOAT, T::CUDNN_TYPE_FLOAT as c_int),
            (TYPE_DOUBLE, T::CUDNN_TYPE_DOUBLE as c_int),
            (TYPE_VOID_PTR, T::CUDNN_TYPE_VOID_PTR as c_int),
            (
                TYPE_BACKEND_DESCRIPTOR,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR as c_int,
            ),
            (TYPE_CHAR, T::CUDNN_TYPE_CHAR as c_int),
            (LAST_ATTRIBUTE_TYPE, T::CUDNN_TYPE_RNG_DISTRIBUTION as c_int),
            (
                ATTR_CONVOLUTION_CONV_MODE,
                A::CUDNN_ATTR_CONVOLUTION_CONV_MODE as c_int,
            ),
            (
                ATTR_CONVOLUTION_DILATIONS,
                A::CUDNN_ATTR_CONVOLUTION_DILATIONS as c_int,
            ),
            (
                ATTR_CONVOLUTION_FILTER_STRIDES,
                A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES as c_int,
            ),
            (
                ATTR_CONVOLUTION_POST_PADDINGS,
                A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS as c_int,
            ),
            (
                ATTR_CONVOLUTION_PRE_PADDINGS,
                A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS as c_int,
            ),
            (
                ATTR_CONVOLUTION_SPATIAL_DIMS,
                A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS as c_int,
            ),
            (
                ATTR_ENGINECFG_ENGINE,
                A::CUDNN_ATTR_ENGINECFG_ENGINE as c_int,
            ),
            (
                ATTR_EXECUTION_PLAN_HANDLE,
                A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE as c_int,
            ),
            (
                ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG as c_int,
            ),
            (
                ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE as c_int,
            ),
            (
                ATTR_OP_CONV_FWD,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA as c_int,
            ),
            (
                ATTR_OP_CONV_FWD + 3,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W as c_int,
            ),
            (
                ATTR_OP_CONV_FWD + 4,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X as c_int,
            ),
            (
                ATTR_OP_CONV_FWD + 5,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_DATA,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_DATA + 3,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_DATA + 4,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_DATA + 5,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER + 3,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER + 4,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X as c_int,
            ),
            (
                ATTR_OP_CONV_BWD_FILTER + 5,
                A::CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY as c_int,
            ),
            (
                ATTR_OPERATIONGRAPH_HANDLE,
                A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE as c_int,
            ),
            (
                ATTR_OPERATIONGRAPH_OPS,
                A::CUDNN_ATTR_OPERATIONGRAPH_OPS as c_int,
            ),
            (
                ATTR_TENSOR_DATA_TYPE,
                A::CUDNN_ATTR_TENSOR_DATA_TYPE as c_int,
            ),
            (
                ATTR_TENSOR_DIMENSIONS,
                A::CUDNN_ATTR_TENSOR_DIMENSIONS as c_int,
            ),
            (ATTR_TENSOR_STRIDES, A::CUDNN_ATTR_TENSOR_STRIDES as c_int),
            (
                ATTR_TENSOR_UNIQUE_ID,
                A::CUDNN_ATTR_TENSOR_UNIQUE_ID as c_int,
            ),
            (
                ATTR_VARIANT_PACK_UNIQUE_IDS,
                A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS as c_int,
            ),
            (
                ATTR_VARIANT_PACK_DATA_POINTERS,
                A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS as c_int,
            ),
            (
                ATTR_VARIANT_PACK_WORKSPACE,
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE as c_int,
            ),
            (
                ATTR_ENGINE_OPERATION_GRAPH,
                A::CUDNN_ATTR_ENGINE_OPERATION_GRAPH as c_int,
            ),
            (
                ATTR_ENGINE_GLOBAL_INDEX,
                A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX as c_int,
            ),
            (
                STATUS_BAD_PARAM_NOT_FINALIZED,
                dnn::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED as c_int,
            ),
            (
                STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                dnn::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN as c_int,
            ),
        ] {
            assert_eq!(ours, theirs);
        }
    }
}
