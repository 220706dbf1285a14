//! Which allocations a kernel launch touches: each parameter's offset and size come from
//! `cuFuncGetParamInfo` (via `cudaGetFuncBySymbol` for runtime kernels); every 8-byte word of
//! every parameter, structs included, that holds an address inside a known allocation is a touch.
//! Kernels do not say what they read or write, so these touches are `rw`.

use crate::real::{CUDA, CUDART, resolve};
use crate::state;
use planner::trace::{Access, Touch};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

type Layout = Vec<(usize, usize)>;

/// Parameter layouts by (kernel handle, is a runtime handle); None when the driver cannot say.
type Layouts = HashMap<(usize, bool), Option<Layout>>;

static LAYOUTS: Mutex<Option<Layouts>> = Mutex::new(None);

fn real(slot: &AtomicUsize, libs: &[&std::ffi::CStr], name: &std::ffi::CStr) -> usize {
    let mut p = slot.load(Ordering::Acquire);
    if p == 0 {
        p = resolve(libs, name);
        slot.store(p, Ordering::Release);
    }
    p
}

/// (offset, size) of each parameter of a kernel, if the driver can say.
fn layout(func: usize, runtime: bool) -> Option<Layout> {
    if let Some(l) = LAYOUTS
        .lock()
        .ok()?
        .get_or_insert_with(HashMap::new)
        .get(&(func, runtime))
    {
        return l.clone();
    }
    static BY_SYMBOL: AtomicUsize = AtomicUsize::new(0);
    static PARAM_INFO: AtomicUsize = AtomicUsize::new(0);
    let info = real(&PARAM_INFO, CUDA, c"cuFuncGetParamInfo");
    let mut cufunc = func;
    if runtime {
        let by_symbol = real(&BY_SYMBOL, CUDART, c"cudaGetFuncBySymbol");
        if by_symbol == 0 {
            return None;
        }
        // SAFETY: the real cudaGetFuncBySymbol(cudaFunction_t*, const void*).
        let f: unsafe extern "C" fn(*mut usize, usize) -> c_int =
            unsafe { std::mem::transmute(by_symbol) };
        // SAFETY: valid output pointer; func is the caller's kernel handle.
        if unsafe { f(&mut cufunc, func) } != 0 {
            cufunc = 0;
        }
    }
    let result = (info != 0 && cufunc != 0).then(|| {
        // SAFETY: the real cuFuncGetParamInfo(CUfunction, size_t, size_t*, size_t*).
        let f: unsafe extern "C" fn(usize, usize, *mut usize, *mut usize) -> c_int =
            unsafe { std::mem::transmute(info) };
        let mut v = Vec::new();
        for i in 0..512 {
            let (mut off, mut size) = (0usize, 0usize);
            // SAFETY: valid output pointers; an index past the last parameter returns an error.
            if unsafe { f(cufunc, i, &mut off, &mut size) } != 0 {
                break;
            }
            v.push((off, size));
        }
        v
    });
    if let Ok(mut g) = LAYOUTS.lock() {
        g.get_or_insert_with(HashMap::new)
            .insert((func, runtime), result.clone());
    }
    result
}

const BUFFER_POINTER: usize = 1;
const BUFFER_SIZE: usize = 2;

/// Each parameter's value as (address, offset in the packed buffer, size): from kernelParams
/// (one pointer per parameter) or from the packed `extra` buffer.
fn values(
    layout: &[(usize, usize)],
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Vec<(*const u8, usize, usize)> {
    let mut values = Vec::new();
    if !params.is_null() {
        for (i, &(off, size)) in layout.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (the API's contract).
            values.push((unsafe { *params.add(i) } as *const u8, off, size));
        }
    } else if !extra.is_null() {
        let (mut buf, mut len) = (std::ptr::null::<u8>(), 0usize);
        let mut i = 0;
        loop {
            // SAFETY: extra is a NULL-terminated list of (key, value) pairs (the API's contract).
            let key = unsafe { *extra.add(i) } as usize;
            if key == 0 || i > 16 {
                break;
            }
            // SAFETY: as above; a key is followed by its value.
            let val = unsafe { *extra.add(i + 1) };
            match key {
                BUFFER_POINTER => buf = val as *const u8,
                // SAFETY: the BUFFER_SIZE value points to a size_t.
                BUFFER_SIZE if !val.is_null() => len = unsafe { *(val as *const usize) },
                _ => {}
            }
            i += 2;
        }
        for &(off, size) in layout {
            if !buf.is_null() && off + size <= len {
                // SAFETY: off + size is inside the caller's buffer of `len` bytes.
                values.push((unsafe { buf.add(off) }, off, size));
            }
        }
    }
    values
}

/// Lineage: the launch's parameters as one buffer, each at its offset (what
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` takes); pointers in it stay valid while their tensors live
/// (Marmoset's virtual ranges do not move). None when the driver cannot give the layout.
pub fn param_buffer(
    func: usize,
    runtime: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Option<Vec<u8>> {
    let layout = layout(func, runtime)?;
    let vals = values(&layout, params, extra);
    let len = layout.iter().map(|&(o, s)| o + s).max().unwrap_or(0);
    if vals.len() != layout.len() || len > 1 << 16 {
        return None;
    }
    let mut buf = vec![0u8; len];
    for (p, off, size) in vals {
        if p.is_null() {
            return None;
        }
        // SAFETY: p points to the parameter's `size` bytes; off + size <= len.
        let src = unsafe { std::slice::from_raw_parts(p, size) };
        buf[off..off + size].copy_from_slice(src);
    }
    Some(buf)
}

/// The allocations a launch's parameters point into.
pub fn touches(
    func: usize,
    runtime: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Vec<Touch> {
    let Some(layout) = layout(func, runtime) else {
        return Vec::new();
    };
    let values: Vec<(*const u8, usize)> = values(&layout, params, extra)
        .into_iter()
        .map(|(p, _, size)| (p, size))
        .collect();
    let mut out: Vec<Touch> = Vec::new();
    for (p, size) in values {
        if p.is_null() {
            continue;
        }
        for k in (0..size.saturating_sub(7)).step_by(8) {
            // SAFETY: p points to the parameter's `size` bytes; k + 8 <= size.
            let word = unsafe { std::ptr::read_unaligned(p.add(k) as *const u64) };
            if let Some((alloc, offset)) = state::points_into(word)
                && !out.iter().any(|t| t.alloc == alloc && t.offset == offset)
            {
                out.push(Touch {
                    alloc,
                    offset,
                    bytes: 0,
                    access: Access::Rw,
                });
            }
        }
    }
    out
}
