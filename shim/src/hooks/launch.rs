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
    // Each parameter as (address of its value, size).
    let mut values: Vec<(*const u8, usize)> = Vec::new();
    if !params.is_null() {
        for (i, &(_, size)) in layout.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (the API's contract).
            values.push((unsafe { *params.add(i) } as *const u8, size));
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
        for &(off, size) in &layout {
            if !buf.is_null() && off + size <= len {
                // SAFETY: off + size is inside the caller's buffer of `len` bytes.
                values.push((unsafe { buf.add(off) }, size));
            }
        }
    }
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
