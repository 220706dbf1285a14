//! `libcudnn.so.9` of the simulated GPU: the legacy cuDNN 9 API that Caffe-style programs and
//! PyTorch's v7 path use (handles, tensor / filter / convolution / activation / pooling
//! descriptors, the three convolution directions with every algorithm and cuDNN's support rules,
//! the algorithm queries and finders, workspace sizes, activation, pooling, softmax, add-tensor
//! and bias gradient), with the real names, argument layouts and cuDNN 9 status codes.
//!
//! Bytes move through the simulated driver (`simgpu_read` / `simgpu_write`), so an operation that
//! touches an unmapped range traps there; time goes on the handle's stream through
//! `simgpu_submit`, with durations from the performance model in `simgpu_model`.
#![allow(non_snake_case)]
#![allow(clippy::missing_safety_doc)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
#![allow(clippy::too_many_arguments)]

mod backend;
mod math;

use math::{ConvSpec, Pool};
use simgpu_model::Profile;
use simgpu_model::conv::{self, Dir, Geom};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, Mutex, OnceLock};

type Status = c_int;
type Handle = *mut c_void;

// cudnnStatus_t (cuDNN 9).
pub const SUCCESS: Status = 0;
pub const NOT_INITIALIZED: Status = 1001;
pub const BAD_PARAM: Status = 2000;
pub const BAD_PARAM_NULL_POINTER: Status = 2002;
pub const BAD_PARAM_SIZE_INSUFFICIENT: Status = 2006;
pub const NOT_SUPPORTED: Status = 3000;
pub const NOT_SUPPORTED_DATA_TYPE: Status = 3003;
pub const INTERNAL_ERROR: Status = 4000;
pub const DEVICE_ALLOCATION_FAILED: Status = 4004;
pub const EXECUTION_FAILED: Status = 5000;
pub const EXECUTION_FAILED_CUDA_DRIVER: Status = 5001;

/// The version the simulator reports (cuDNN 9.5.1, as measured in framework-facts.md).
pub const VERSION: usize = 90501;

const DATA_FLOAT: c_int = 0;
const TENSOR_NCHW: c_int = 0;
const TENSOR_NHWC: c_int = 1;

// ==================================================================== the driver

type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize, *const c_char) -> c_int;
type WriteFn = unsafe extern "C" fn(u64, *const u8, usize, *const c_char) -> c_int;
type CheckFn = unsafe extern "C" fn(u64, usize, *const c_char) -> c_int;
type SubmitFn = unsafe extern "C" fn(Handle, f64, c_int) -> c_int;
type ModeFn = unsafe extern "C" fn() -> c_int;
type MemInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;

/// The simulated driver's calls cuDNN uses, and the device profile.
struct Sim {
    read: ReadFn,
    write: WriteFn,
    check: CheckFn,
    submit: SubmitFn,
    data_mode: ModeFn,
    mem_info: MemInfoFn,
    profile: Profile,
}

fn sim() -> Option<&'static Sim> {
    static S: OnceLock<Option<Sim>> = OnceLock::new();
    S.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol has the signature given.
        unsafe {
            let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            if h.is_null() {
                eprintln!("simgpu cudnn: cannot open libcuda.so.1");
                return None;
            }
            let sym = |n: &CStr| {
                let p = libc::dlsym(h, n.as_ptr());
                (!p.is_null()).then_some(p)
            };
            let profile_json = std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn() -> *const c_char,
            >(sym(c"simgpu_profile_json")?);
            let pj = profile_json();
            if pj.is_null() {
                return None;
            }
            let profile = Profile::from_json(&CStr::from_ptr(pj).to_string_lossy()).ok()?;
            Some(Sim {
                read: std::mem::transmute::<*mut c_void, ReadFn>(sym(c"simgpu_read")?),
                write: std::mem::transmute::<*mut c_void, WriteFn>(sym(c"simgpu_write")?),
                check: std::mem::transmute::<*mut c_void, CheckFn>(sym(c"simgpu_check")?),
                submit: std::mem::transmute::<*mut c_void, SubmitFn>(sym(c"simgpu_submit")?),
                data_mode: std::mem::transmute::<*mut c_void, ModeFn>(sym(c"simgpuDataMode")?),
                mem_info: std::mem::transmute::<*mut c_void, MemInfoFn>(sym(c"cuMemGetInfo_v2")?),
                profile,
            })
        }
    })
    .as_ref()
}

/// A driver failure seen by cuDNN (a trap or a sticky error) is an execution failure.
fn drv(r: c_int) -> Result<(), Status> {
    if r == 0 {
        Ok(())
    } else {
        Err(EXECUTION_FAILED_CUDA_DRIVER)
    }
}

fn data_mode(s: &Sim) -> bool {
    // SAFETY: resolved from the simulated driver with this signature.
    unsafe { (s.data_mode)() != 0 }
}

// ==================================================================== descriptors

#[derive(Debug, Clone, Copy)]
struct Tensor {
    dtype: c_int,
    nb: usize,
    dims: [i64; 8],
    strides: [i64; 8],
}

#[derive(Debug, Clone, Copy)]
struct Filter {
    dtype: c_int,
    format: c_int,
    nb: usize,
    dims: [i64; 8],
}

#[derive(Debug, Clone, Copy)]
struct ConvDesc {
    nb: usize,
    pad: [i64; 3],
    stride: [i64; 3],
    dil: [i64; 3],
    mode: c_int,
    compute: c_int,
    groups: i64,
    math: c_int,
}

#[derive(Debug, Clone, Copy)]
struct Activation {
    mode: c_int,
    coef: f64,
}

#[derive(Debug, Clone, Copy)]
struct PoolDesc {
    mode: c_int,
    nb: usize,
    window: [i64; 3],
    pad: [i64; 3],
    stride: [i64; 3],
}

#[derive(Debug, Clone, Copy)]
enum Obj {
    Handle { stream: usize },
    Tensor(Option<Tensor>),
    Filter(Option<Filter>),
    Conv(ConvDesc),
    Activation(Activation),
    Pool(Option<PoolDesc>),
}

/// Live handles and descriptors, by address: an unknown or destroyed one is CUDNN_STATUS_BAD_PARAM
/// rather than undefined behaviour.
static OBJS: LazyLock<Mutex<HashMap<usize, Obj>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn objs() -> std::sync::MutexGuard<'static, HashMap<usize, Obj>> {
    OBJS.lock().unwrap_or_else(|p| p.into_inner())
}

fn create(out: *mut Handle, o: Obj) -> Status {
    if out.is_null() {
        return BAD_PARAM_NULL_POINTER;
    }
    let addr = Box::into_raw(Box::new(0u64)) as usize;
    objs().insert(addr, o);
    // SAFETY: non-null output pointer.
    unsafe { *out = addr as Handle };
    SUCCESS
}

fn destroy(h: Handle) -> Status {
    match objs().remove(&(h as usize)) {
        Some(_) => {
            // SAFETY: the address came from Box::into_raw in `create` and is removed once.
            drop(unsafe { Box::from_raw(h as *mut u64) });
            SUCCESS
        }
        None => BAD_PARAM,
    }
}

fn get(h: *const c_void) -> Result<Obj, Status> {
    objs().get(&(h as usize)).copied().ok_or(BAD_PARAM)
}

fn set(h: Handle, o: Obj) {
    objs().insert(h as usize, o);
}

fn tensor(h: *const c_void) -> Result<Tensor, Status> {
    match get(h)? {
        Obj::Tensor(Some(t)) => Ok(t),
        _ => Err(BAD_PARAM),
    }
}

fn filter(h: *const c_void) -> Result<Filter, Status> {
    match get(h)? {
        Obj::Filter(Some(f)) => Ok(f),
        _ => Err(BAD_PARAM),
    }
}

fn conv_desc(h: *const c_void) -> Result<ConvDesc, Status> {
    match get(h)? {
        Obj::Conv(c) => Ok(c),
        _ => Err(BAD_PARAM),
    }
}

fn handle_stream(h: Handle) -> Result<Handle, Status> {
    match get(h)? {
        Obj::Handle { stream } => Ok(stream as Handle),
        _ => Err(BAD_PARAM),
    }
}

/// Runs a cuDNN call body: panics become CUDNN_STATUS_INTERNAL_ERROR with a message.
fn run(f: impl FnOnce() -> Result<(), Status>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("simgpu cudnn: internal error (panic)");
            INTERNAL_ERROR
        }
    }
}

fn slice<'a, T>(p: *const T, n: usize) -> Result<&'a [T], Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: non-null pointer to `n` elements (the API's array arguments).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn put<T>(p: *mut T, v: T) -> Result<(), Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: non-null output pointer.
    unsafe { p.write(v) };
    Ok(())
}

fn scalar(p: *const c_void) -> Result<f32, Status> {
    if p.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    // SAFETY: alpha/beta of float tensors point to a float (cuDNN's scaling parameter rule).
    Ok(unsafe { *(p as *const f32) })
}

// ==================================================================== handles and versions

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetVersion() -> usize {
    VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetErrorString(s: Status) -> *const c_char {
    let m: &CStr = match s {
        SUCCESS => c"CUDNN_STATUS_SUCCESS",
        NOT_INITIALIZED => c"CUDNN_STATUS_NOT_INITIALIZED",
        BAD_PARAM => c"CUDNN_STATUS_BAD_PARAM",
        BAD_PARAM_NULL_POINTER => c"CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
        BAD_PARAM_SIZE_INSUFFICIENT => c"CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
        NOT_SUPPORTED => c"CUDNN_STATUS_NOT_SUPPORTED",
        NOT_SUPPORTED_DATA_TYPE => c"CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
        INTERNAL_ERROR => c"CUDNN_STATUS_INTERNAL_ERROR",
        DEVICE_ALLOCATION_FAILED => c"CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
        EXECUTION_FAILED => c"CUDNN_STATUS_EXECUTION_FAILED",
        EXECUTION_FAILED_CUDA_DRIVER => c"CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
        _ => c"CUDNN_STATUS_UNKNOWN",
    };
    m.as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnCreate(h: *mut Handle) -> Status {
    if sim().is_none() {
        return NOT_INITIALIZED;
    }
    create(h, Obj::Handle { stream: 0 })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnDestroy(h: Handle) -> Status {
    match get(h) {
        Ok(Obj::Handle { .. }) => destroy(h),
        _ => BAD_PARAM,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnSetStream(h: Handle, s: Handle) -> Status {
    run(|| {
        handle_stream(h)?;
        set(h, Obj::Handle { stream: s as usize });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cudnnGetStream(h: Handle, s: *mut Handle) -> Status {
    run(|| put(s, handle_stream(h)?))
}

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

fn set_tensor(d: Handle, dtype: c_int, dims: &[i64], strides: &[i64]) -> Result<(), Status> {
    if !matches!(get(d)?, Obj::Tensor(_)) {
        return Err(BAD_PARAM);
    }
    if !(3..=8).contains(&dims.len())
        || dims.iter().any(|&v| v <= 0)
        || strides.iter().any(|&v| v <= 0)
    {
        return Err(BAD_PARAM);
    }
    if !(0..=14).contains(&dtype) {
        return Err(BAD_PARAM);
    }
    let mut t = Tensor {
        dtype,
        nb: dims.len(),
        dims: [1; 8],
        strides: [1; 8],
    };
    t.dims[..dims.len()].copy_from_slice(dims);
    t.strides[..dims.len()].copy_from_slice(strides);
    set(d, Obj::Tensor(Some(t)));
    Ok(())
}

/// Packed strides for `dims` in NCHW (row-major) or NHWC (channels last) order.
fn packed_strides(dims: &[i64], format: c_int) -> Vec<i64> {
    let n = dims.len();
    let mut order: Vec<usize> = (0..n).collect();
    if format == TENSOR_NHWC {
        order = std::iter::once(0)
            .chain(2..n)
            .chain(std::iter::once(1))
            .collect();
    }
    let mut strides = vec![0; n];
    let mut acc = 1;
    for &i in order.iter().rev() {
        strides[i] = acc;
        acc *= dims[i];
    }
    strides
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

fn elem_size(dtype: c_int) -> usize {
    match dtype {
        1 | 10 => 8,
        2 | 9 => 2,
        3 | 6 | 11 | 12 | 13 => 1,
        _ => 4,
    }
}

/// Elements from the first to one past the last addressed by the descriptor.
fn extent(t: &Tensor) -> usize {
    1 + (0..t.nb)
        .map(|i| ((t.dims[i] - 1) * t.strides[i]) as usize)
        .sum::<usize>()
}

fn count(t: &Tensor) -> usize {
    t.dims[..t.nb].iter().product::<i64>() as usize
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

/// The convolution's geometry from its descriptors, checked for consistency with cuDNN's rules.
fn geometry(x: &Tensor, w: &Filter, c: &ConvDesc) -> Result<Geom, Status> {
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

fn output_dims(
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

// ==================================================================== moving tensors

/// Reads a float tensor into a dense logical-order vector.
fn load(s: &Sim, t: &Tensor, ptr: *const c_void, what: &CStr) -> Result<Vec<f32>, Status> {
    let ext = extent(t);
    if ptr.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    if !data_mode(s) {
        // SAFETY: resolved from the simulated driver; checks the range only.
        drv(unsafe { (s.check)(ptr as u64, ext * 4, what.as_ptr()) })?;
        return Ok(Vec::new());
    }
    let mut raw = vec![0f32; ext];
    // SAFETY: raw holds ext * 4 writable bytes.
    drv(unsafe {
        (s.read)(
            ptr as u64,
            raw.as_mut_ptr() as *mut u8,
            ext * 4,
            what.as_ptr(),
        )
    })?;
    let mut dense = Vec::with_capacity(count(t));
    walk(t, |off| dense.push(raw[off]));
    Ok(dense)
}

/// Writes a dense logical-order vector into a float tensor (strided gaps keep their bytes).
fn store(s: &Sim, t: &Tensor, ptr: *mut c_void, dense: &[f32], what: &CStr) -> Result<(), Status> {
    let ext = extent(t);
    if ptr.is_null() {
        return Err(BAD_PARAM_NULL_POINTER);
    }
    if !data_mode(s) {
        // SAFETY: resolved from the simulated driver; checks the range only.
        return drv(unsafe { (s.check)(ptr as u64, ext * 4, what.as_ptr()) });
    }
    let mut raw = vec![0f32; ext];
    if count(t) != ext {
        // SAFETY: raw holds ext * 4 writable bytes.
        drv(unsafe {
            (s.read)(
                ptr as u64,
                raw.as_mut_ptr() as *mut u8,
                ext * 4,
                what.as_ptr(),
            )
        })?;
    }
    let mut i = 0;
    walk(t, |off| {
        raw[off] = dense[i];
        i += 1;
    });
    // SAFETY: raw holds ext * 4 readable bytes.
    drv(unsafe {
        (s.write)(
            ptr as u64,
            raw.as_ptr() as *const u8,
            ext * 4,
            what.as_ptr(),
        )
    })
}

/// Calls `f(offset)` for each element in logical (row-major over dims) order.
fn walk(t: &Tensor, mut f: impl FnMut(usize)) {
    let nb = t.nb;
    let mut idx = [0i64; 8];
    let total = count(t);
    for _ in 0..total {
        let off: i64 = (0..nb).map(|i| idx[i] * t.strides[i]).sum();
        f(off as usize);
        for i in (0..nb).rev() {
            idx[i] += 1;
            if idx[i] < t.dims[i] {
                break;
            }
            idx[i] = 0;
        }
    }
}

/// The filter as a tensor: KCRS packed, or KRSC packed for the NHWC filter format.
fn filter_tensor(f: &Filter) -> Tensor {
    let dims = &f.dims[..f.nb];
    let strides = packed_strides(
        dims,
        if f.format == TENSOR_NHWC {
            TENSOR_NHWC
        } else {
            TENSOR_NCHW
        },
    );
    let mut t = Tensor {
        dtype: f.dtype,
        nb: f.nb,
        dims: [1; 8],
        strides: [1; 8],
    };
    t.dims[..f.nb].copy_from_slice(dims);
    t.strides[..f.nb].copy_from_slice(&strides);
    t
}

fn require_float(ts: &[c_int]) -> Result<(), Status> {
    if ts.iter().all(|&t| t == DATA_FLOAT) {
        Ok(())
    } else {
        Err(NOT_SUPPORTED_DATA_TYPE)
    }
}

fn same_dims(a: &Tensor, b: &Tensor) -> Result<(), Status> {
    if a.nb == b.nb && a.dims[..a.nb] == b.dims[..b.nb] {
        Ok(())
    } else {
        Err(BAD_PARAM)
    }
}

fn submit(s: &Sim, h: Handle, seconds: f64, sync: bool) -> Result<(), Status> {
    let stream = handle_stream(h)?;
    // SAFETY: resolved from the simulated driver with this signature.
    drv(unsafe { (s.submit)(stream, seconds, sync as c_int) })
}

// ==================================================================== convolutions

/// Everything a convolution call needs, checked.
struct ConvCall {
    geom: Geom,
    flip: bool,
    tensor_op: bool,
    x: Tensor,
    w: Tensor,
    y: Tensor,
}

fn conv_call(
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
fn check_workspace(
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

fn conv_time(s: &Sim, dir: Dir, algo: usize, call: &ConvCall) -> f64 {
    conv::time(&s.profile, dir, algo, &call.geom, call.tensor_op).unwrap_or(0.0)
}

/// Runs one convolution of direction `dir` on the buffers (x, w, y) of `call`: forward reads x
/// and w and writes y; backward-data reads y (dy) and w and writes x (dx); backward-filter reads
/// x and y (dy) and writes w (dw). Used by the legacy calls and by cudnnBackendExecute.
fn execute_conv(
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

fn execute_conv_scaled(
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
fn rank(s: &Sim, dir: Dir, call: &ConvCall, limit: Option<(usize, Status)>) -> Vec<AlgoPerf> {
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

/// Time of an elementwise pass over `elems` floats reading `reads` and writing one tensor.
fn elementwise_time(s: &Sim, elems: usize, tensors: usize) -> f64 {
    let bytes = (4 * elems * tensors) as f64;
    s.profile.kernel_time(4.0 * elems as f64, bytes, 1.0, false)
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

/// Our hand-written ABI against cudarc's bindings, generated from NVIDIA's cuDNN 9 headers.
#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::cudnn::sys as dnn;
    use std::mem::{offset_of, size_of};

    #[test]
    fn status_codes() {
        use dnn::cudnnStatus_t as S;
        for (ours, theirs) in [
            (SUCCESS, S::CUDNN_STATUS_SUCCESS),
            (NOT_INITIALIZED, S::CUDNN_STATUS_NOT_INITIALIZED),
            (BAD_PARAM, S::CUDNN_STATUS_BAD_PARAM),
            (
                BAD_PARAM_NULL_POINTER,
                S::CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
            ),
            (
                BAD_PARAM_SIZE_INSUFFICIENT,
                S::CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
            ),
            (NOT_SUPPORTED, S::CUDNN_STATUS_NOT_SUPPORTED),
            (
                NOT_SUPPORTED_DATA_TYPE,
                S::CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
            ),
            (INTERNAL_ERROR, S::CUDNN_STATUS_INTERNAL_ERROR),
            (
                DEVICE_ALLOCATION_FAILED,
                S::CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
            ),
            (EXECUTION_FAILED, S::CUDNN_STATUS_EXECUTION_FAILED),
            (
                EXECUTION_FAILED_CUDA_DRIVER,
                S::CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
            ),
        ] {
            assert_eq!(ours, theirs as i32, "{theirs:?}");
            assert_eq!(
                // SAFETY: cudnnGetErrorString returns a static NUL-terminated string.
                unsafe { CStr::from_ptr(cudnnGetErrorString(ours)) }
                    .to_str()
                    .unwrap(),
                format!("{theirs:?}")
            );
        }
    }

    #[test]
    fn enums() {
        assert_eq!(
            conv::FWD_ALGOS,
            dnn::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_COUNT as usize
        );
        assert_eq!(
            conv::BWD_DATA_ALGOS,
            dnn::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT as usize
        );
        assert_eq!(
            conv::BWD_FILTER_ALGOS,
            dnn::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT as usize
        );
        use dnn::cudnnConvolutionBwdFilterAlgo_t as F;
        assert_eq!(F::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING as usize, 6);
        assert_eq!(
            conv::method(conv::Dir::BwdFilter, 6),
            Some(conv::Method::FftTiling)
        );
        assert_eq!(
            conv::method(conv::Dir::BwdFilter, 3),
            Some(conv::Method::ReductionGemm)
        );
        assert_eq!(DATA_FLOAT, dnn::cudnnDataType_t::CUDNN_DATA_FLOAT as i32);
        assert_eq!(
            TENSOR_NHWC,
            dnn::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC as i32
        );
        assert_eq!(0, dnn::cudnnConvolutionMode_t::CUDNN_CONVOLUTION as i32);
        assert_eq!(1, dnn::cudnnMathType_t::CUDNN_TENSOR_OP_MATH as i32);
        assert_eq!(
            math::act::SWISH,
            dnn::cudnnActivationMode_t::CUDNN_ACTIVATION_SWISH as i32
        );
        assert_eq!(
            math::POOL_AVG_EXCLUDE_PAD,
            dnn::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING as i32
        );
        assert_eq!(
            math::SOFTMAX_LOG,
            dnn::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_LOG as i32
        );
        assert_eq!(
            math::SOFTMAX_MODE_CHANNEL,
            dnn::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_CHANNEL as i32
        );
    }

    #[test]
    fn perf_struct_layout() {
        type P = dnn::cudnnConvolutionFwdAlgoPerf_t;
        assert_eq!(size_of::<AlgoPerf>(), size_of::<P>());
        assert_eq!(offset_of!(AlgoPerf, time), offset_of!(P, time));
        assert_eq!(offset_of!(AlgoPerf, memory), offset_of!(P, memory));
        assert_eq!(offset_of!(AlgoPerf, math_type), offset_of!(P, mathType));
        assert_eq!(
            size_of::<AlgoPerf>(),
            size_of::<dnn::cudnnConvolutionBwdFilterAlgoPerf_t>()
        );
    }
}
