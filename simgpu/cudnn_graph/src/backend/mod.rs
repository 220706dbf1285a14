//! The cuDNN backend (graph) API as PyTorch's cuDNN frontend and TensorFlow use it for
//! convolutions: tensor and convolution descriptors, the three convolution operations, operation
//! graphs, engine heuristics (INSTANT, A, B, FALLBACK), engines with their knobs and numerical and
//! behaviour notes, engine configurations, execution plans (workspace size, JSON) and variant
//! packs. An engine's global index is the legacy algorithm of the operation's direction, so the
//! backend and the legacy API share one model of time, workspace and support; execution runs
//! through the same code as the legacy calls.
//!
//! Descriptor-valued attributes are read the way the real library reads them: the caller passes
//! descriptors it created, and cuDNN fills them in (a null or foreign element is BAD_PARAM).

mod attrs;
mod engines;
mod fused;
mod ops;

pub use attrs::*;
use simgpu_cudnn_core::*;

#[derive(Debug, Clone)]
pub struct Attr {
    pub ty: c_int,
    pub count: usize,
    pub bytes: Vec<u8>,
}

impl Attr {
    pub fn of_i64(ty: c_int, v: &[i64]) -> Attr {
        let bytes = match elem_bytes(ty) {
            8 => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            1 => v.iter().map(|&x| x as u8).collect(),
            _ => v.iter().flat_map(|&x| (x as i32).to_ne_bytes()).collect(),
        };
        Attr {
            ty,
            count: v.len(),
            bytes,
        }
    }

    pub fn i64s(&self) -> Vec<i64> {
        match elem_bytes(self.ty) {
            8 => self
                .bytes
                .chunks_exact(8)
                .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
                .collect(),
            1 => self.bytes.iter().map(|&b| b as i64).collect(),
            _ => self
                .bytes
                .chunks_exact(4)
                .map(|c| i32::from_ne_bytes(c.try_into().unwrap()) as i64)
                .collect(),
        }
    }

    pub fn scalar(&self) -> Option<f32> {
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
pub struct Desc {
    pub ty: c_int,
    pub attrs: HashMap<c_int, Attr>,
    pub finalized: bool,
}

static DESCS: LazyLock<Mutex<HashMap<usize, Desc>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn descs() -> std::sync::MutexGuard<'static, HashMap<usize, Desc>> {
    DESCS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The convolution each finalized plan runs, captured at finalization.
static PLANS: LazyLock<Mutex<HashMap<usize, ops::ConvOp>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn plans() -> std::sync::MutexGuard<'static, HashMap<usize, ops::ConvOp>> {
    PLANS.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn desc(d: usize) -> Result<Desc, Status> {
    descs().get(&d).cloned().ok_or(BAD_PARAM)
}

/// Registers a descriptor cuDNN makes itself (heuristic results, their engines and knobs). They
/// live as long as the process: configurations copied out of them refer to them.
pub fn internal(d: Desc) -> usize {
    let addr = Box::into_raw(Box::new(0u64)) as usize;
    descs().insert(addr, d);
    addr
}

pub fn attr(d: &Desc, name: c_int) -> Result<&Attr, Status> {
    d.attrs.get(&name).ok_or(BAD_PARAM)
}

pub fn one(d: &Desc, name: c_int) -> Result<i64, Status> {
    attr(d, name)?.i64s().first().copied().ok_or(BAD_PARAM)
}

/// A finalized descriptor of type `ty` referenced by attribute `name` of `d`.
pub fn child(d: &Desc, name: c_int, ty: c_int) -> Result<(usize, Desc), Status> {
    let h = one(d, name)? as usize;
    let c = desc(h)?;
    if c.ty != ty {
        return Err(BAD_PARAM);
    }
    if !c.finalized {
        return Err(BAD_PARAM_NOT_FINALIZED);
    }
    Ok((h, c))
}

/// At SIMGPU_LOG=debug, names a backend call that failed, with the descriptor type and
/// attribute it was about.
fn logged(call: &str, d: usize, name: c_int, st: Status) -> Status {
    if st != SUCCESS && debug() {
        let ty = descs().get(&d).map_or(-1, |x| x.ty);
        eprintln!(
            "simgpu cudnn: {call}(descriptor type {ty}, attribute {name}) -> {}",
            status_name(st).to_string_lossy()
        );
    }
    st
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
        let addr = internal(Desc {
            ty,
            attrs: HashMap::new(),
            finalized: false,
        });
        put(out, addr as Handle)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendDestroyDescriptor(d: Handle) -> Status {
    run(|| {
        descs().remove(&(d as usize)).ok_or(BAD_PARAM)?;
        plans().remove(&(d as usize));
        // SAFETY: the address came from Box::into_raw in `internal`, freed once.
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
    let st = run(|| {
        if !(0..=LAST_ATTRIBUTE_TYPE).contains(&ty) || count < 0 {
            return Err(BAD_PARAM);
        }
        let desc_ty = desc(d as usize)?.ty;
        check_set(desc_ty, name, ty, count)?;
        let n = count as usize * elem_bytes(ty);
        let mut bytes = if n == 0 {
            Vec::new()
        } else {
            slice(values as *const u8, n)?.to_vec()
        };
        let mut all = descs();
        if ty == TYPE_BACKEND_DESCRIPTOR && simulated(desc_ty) {
            // cuDNN copies a finalized descriptor it is given: the caller may destroy its own
            // (cuDNN's frontend drops tensors once the operation is built, and operations once
            // the graph is). Copies live as long as the process, a few hundred bytes each.
            for chunk in bytes.chunks_exact_mut(8) {
                let h = usize::from_ne_bytes(chunk.try_into().unwrap());
                if let Some(src) = all.get(&h).filter(|s| s.finalized).cloned() {
                    let copy = Box::into_raw(Box::new(0u64)) as usize;
                    all.insert(copy, src);
                    chunk.copy_from_slice(&copy.to_ne_bytes());
                }
            }
        }
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
    });
    logged("cudnnBackendSetAttribute", d as usize, name, st)
}

/// Whether an attribute cannot be read back: a variant pack's unique ids and data pointers, which
/// the real cuDNN does not give back (its workspace pointer it does; the real status is not
/// known, NOT_SUPPORTED here; docs/real-gpu/2026-12-01-h200.md).
fn unreadable_pack(desc: &Desc, name: c_int) -> bool {
    desc.ty == VARIANT_PACK_DESCRIPTOR
        && matches!(
            name,
            ATTR_VARIANT_PACK_UNIQUE_IDS | ATTR_VARIANT_PACK_DATA_POINTERS
        )
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
    let st = run(|| {
        let desc = desc(d as usize)?;
        if !desc.finalized {
            return Err(BAD_PARAM_NOT_FINALIZED);
        }
        let a = attr(&desc, name)?;
        if a.ty != ty || requested < 0 {
            return Err(BAD_PARAM);
        }
        if unreadable_pack(&desc, name) {
            return Err(NOT_SUPPORTED);
        }
        if count.is_null() && values.is_null() {
            return Err(BAD_PARAM_NULL_POINTER);
        }
        let n = (requested as usize).min(a.count);
        if !count.is_null() {
            // A count query (no array, or none requested) learns how many there are; a read
            // learns how many it got, never more than it asked for (cudnn-frontend resizes its
            // list of heuristic results to this number).
            let told = if values.is_null() || requested == 0 {
                a.count
            } else {
                n
            };
            put(count, told as i64)?;
        }
        if n == 0 || values.is_null() {
            // A count query (values NULL), as cudnn-frontend makes before sizing its buffers.
            return Ok(());
        }
        if ty == TYPE_BACKEND_DESCRIPTOR {
            // The caller's elements are descriptors it created: fill each with ours.
            let targets = slice(values as *const usize, n)?;
            let mut all = descs();
            for (src, &dst) in a.i64s().into_iter().zip(targets) {
                let src = all.get(&(src as usize)).cloned().ok_or(BAD_PARAM)?;
                let dst = all.get_mut(&dst).ok_or(BAD_PARAM)?;
                if dst.ty != src.ty {
                    return Err(BAD_PARAM);
                }
                *dst = src;
            }
            return Ok(());
        }
        // SAFETY: values holds `requested` elements of the attribute type (API contract).
        unsafe {
            std::ptr::copy_nonoverlapping(a.bytes.as_ptr(), values as *mut u8, n * elem_bytes(ty))
        };
        Ok(())
    });
    logged("cudnnBackendGetAttribute", d as usize, name, st)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendFinalize(d: Handle) -> Status {
    let st = run(|| {
        let mut desc = desc(d as usize)?;
        if desc.finalized {
            return Err(BAD_PARAM);
        }
        if !simulated(desc.ty) {
            return Err(NOT_SUPPORTED);
        }
        // What finalizing computes (results, notes, workspace sizes) becomes readable attributes.
        let computed = match desc.ty {
            TENSOR_DESCRIPTOR => {
                ops::tensor_of(&desc)?;
                vec![]
            }
            CONVOLUTION_DESCRIPTOR => {
                ops::conv_desc_of(&desc)?;
                vec![]
            }
            OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
            | OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR => {
                ops::conv_op(&desc)?;
                vec![]
            }
            POINTWISE_DESCRIPTOR | OPERATION_POINTWISE_DESCRIPTOR => {
                ops::check_pointwise(&desc)?;
                vec![]
            }
            OPERATIONGRAPH_DESCRIPTOR => ops::finalize_graph(&desc)?,
            ENGINEHEUR_DESCRIPTOR => engines::finalize_heuristics(&desc)?,
            ENGINE_DESCRIPTOR => engines::finalize_engine(&desc)?,
            ENGINECFG_DESCRIPTOR => engines::finalize_config(&desc)?,
            KNOB_CHOICE_DESCRIPTOR => {
                one(&desc, ATTR_KNOB_CHOICE_KNOB_TYPE)?;
                one(&desc, ATTR_KNOB_CHOICE_KNOB_VALUE)?;
                vec![]
            }
            EXECUTION_PLAN_DESCRIPTOR => {
                let (attrs, op) = engines::finalize_plan(&desc)?;
                plans().insert(d as usize, op);
                attrs
            }
            VARIANT_PACK_DESCRIPTOR => {
                let ids = attr(&desc, ATTR_VARIANT_PACK_UNIQUE_IDS)?;
                let ptrs = attr(&desc, ATTR_VARIANT_PACK_DATA_POINTERS)?;
                if ids.count != ptrs.count {
                    return Err(BAD_PARAM);
                }
                vec![]
            }
            // KNOB_INFO descriptors are only filled in by cuDNN.
            _ => return Err(BAD_PARAM),
        };
        for (name, a) in computed {
            desc.attrs.insert(name, a);
        }
        desc.finalized = true;
        descs().insert(d as usize, desc);
        Ok(())
    });
    logged("cudnnBackendFinalize", d as usize, -1, st)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnBackendExecute(h: Handle, plan: Handle, pack: Handle) -> Status {
    let st = run(|| {
        let s = sim().ok_or(NOT_INITIALIZED)?;
        handle_stream(h)?;
        let (p, v) = (desc(plan as usize)?, desc(pack as usize)?);
        if p.ty != EXECUTION_PLAN_DESCRIPTOR || v.ty != VARIANT_PACK_DESCRIPTOR {
            return Err(BAD_PARAM);
        }
        if !p.finalized || !v.finalized {
            return Err(BAD_PARAM_NOT_FINALIZED);
        }
        let op = plans().get(&(plan as usize)).cloned().ok_or(BAD_PARAM)?;
        let ids = attr(&v, ATTR_VARIANT_PACK_UNIQUE_IDS)?.i64s();
        let ptrs = attr(&v, ATTR_VARIANT_PACK_DATA_POINTERS)?.i64s();
        // A pointer less aligned than its tensor promised is refused, as the real engines do.
        let by_uid = |uid: i64, align: usize| -> Result<*const c_void, Status> {
            let p = ids
                .iter()
                .position(|&u| u == uid)
                .map(|k| ptrs[k] as usize)
                .ok_or(BAD_PARAM)?;
            if p == 0 || p % align != 0 {
                return Err(BAD_PARAM);
            }
            Ok(p as *const c_void)
        };
        let ws = v
            .attrs
            .get(&ATTR_VARIANT_PACK_WORKSPACE)
            .and_then(|a| a.i64s().first().copied())
            .unwrap_or(0);
        if !op.pointwise.is_empty() {
            let ws = (ws as usize as *mut c_void, op.workspace);
            let is_null = |uid: i64| {
                ids.iter()
                    .position(|&u| u == uid)
                    .is_some_and(|k| ptrs[k] == 0)
            };
            return fused::execute(s, h, &op, ws, by_uid, is_null);
        }
        let ptr = |i: usize| by_uid(op.uids[i], op.aligns[i]);
        let bufs = [ptr(0)?, ptr(1)?, ptr(2)?];
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
    });
    logged("cudnnBackendExecute", plan as usize, -1, st)
}
