//! What nvcc's host code calls before `main` and around each `<<<...>>>`: fatbin, function and
//! variable registration, and the pushed call configuration. Registration goes to the simulated
//! driver's registry of fatbin kernels (`simgpuRegisterFatbinary` / `simgpuRegisterFunction` /
//! `simgpuUnregisterFatbinary`, found with dlsym on libcuda.so.1); afterwards a host stub's
//! address is its kernel's handle (`__cudaGetKernel`, `cuLaunchKernel`, `cuFuncGetParamInfo`).

use crate::*;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

type RegFatbin = unsafe extern "C" fn(*const c_void) -> *mut c_void;
type RegFunction = unsafe extern "C" fn(*mut c_void, *const c_void, *const c_char) -> c_int;
type UnregFatbin = unsafe extern "C" fn(*mut c_void);
type ModuleAlloc = unsafe extern "C" fn(usize, *mut u64) -> c_int;
type ModuleFree = unsafe extern "C" fn(u64) -> c_int;

struct Registry {
    fatbin: Option<RegFatbin>,
    function: Option<RegFunction>,
    unregister: Option<UnregFatbin>,
    alloc: Option<ModuleAlloc>,
    free: Option<ModuleFree>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        // SAFETY: each symbol, when the driver has it, is the simulator's function of that type.
        unsafe {
            let f = |n: &CStr| simgpu_sym(n);
            Registry {
                fatbin: f(c"simgpuRegisterFatbinary").map(|p| std::mem::transmute(p)),
                function: f(c"simgpuRegisterFunction").map(|p| std::mem::transmute(p)),
                unregister: f(c"simgpuUnregisterFatbinary").map(|p| std::mem::transmute(p)),
                alloc: f(c"simgpuAllocModuleData").map(|p| std::mem::transmute(p)),
                free: f(c"simgpuFreeModuleData").map(|p| std::mem::transmute(p)),
            }
        }
    })
}

/// A module-scope `__device__` / `__constant__` variable: its device copy and size.
#[derive(Clone, Copy)]
struct Var {
    module: usize,
    dptr: u64,
    size: usize,
}

/// Host shadow address -> variable.
static VARS: Mutex<Option<HashMap<usize, Var>>> = Mutex::new(None);

/// Handle given to programs when the driver has no registry: registration then does nothing and
/// launches of the program's kernels fail with cudaErrorInvalidDeviceFunction.
const NO_REGISTRY: usize = 0x5e00_0010;

#[unsafe(no_mangle)]
pub extern "C" fn __cudaRegisterFatBinary(wrapper: *mut c_void) -> *mut *mut c_void {
    let h = match registry().fatbin {
        // SAFETY: the program's fatbin wrapper, passed through as the driver's registry expects.
        Some(f) => unsafe { f(wrapper) },
        None => std::ptr::null_mut(),
    };
    // The program keeps the handle and passes it back; it never dereferences it.
    if h.is_null() {
        NO_REGISTRY as *mut *mut c_void
    } else {
        h as *mut *mut c_void
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) {
    let r = registry();
    let mut vars = VARS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = vars.as_mut() {
        m.retain(|_, v| {
            if v.module != handle as usize {
                return true;
            }
            if let Some(free) = r.free {
                // SAFETY: the address simgpuAllocModuleData gave for this variable.
                unsafe { free(v.dptr) };
            }
            false
        });
    }
    drop(vars);
    if let (Some(f), false) = (r.unregister, handle as usize == NO_REGISTRY) {
        // SAFETY: a handle the driver's registry returned.
        unsafe { f(handle as *mut c_void) };
    }
}

#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _block: *mut Dim3,
    _grid: *mut Dim3,
    _wsize: *mut c_int,
) {
    if handle as usize == NO_REGISTRY {
        return;
    }
    if let Some(f) = registry().function {
        // SAFETY: the module handle from the registry, the host stub and its mangled name.
        let r = unsafe {
            f(
                handle as *mut c_void,
                host_fun as *const c_void,
                device_name,
            )
        };
        if r != 0 {
            eprintln!("simgpu cudart: __cudaRegisterFunction failed ({r})");
        }
    }
}

/// Gives the variable a device allocation of its size (module data: it takes device memory but
/// is not one of the program's allocations).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    _device_name: *const c_char,
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    let Some(alloc) = registry().alloc else {
        return;
    };
    let mut dptr = 0u64;
    // SAFETY: an output pointer to a local.
    if size == 0 || unsafe { alloc(size, &mut dptr) } != 0 {
        return;
    }
    VARS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(
            host_var as usize,
            Var {
                module: handle as usize,
                dptr,
                size,
            },
        );
}

fn var(symbol: *const c_void) -> Option<Var> {
    VARS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()?
        .get(&(symbol as usize))
        .copied()
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetSymbolAddress(p: *mut *mut c_void, symbol: *const c_void) -> Err {
    if p.is_null() {
        return ret(INVALID_VALUE);
    }
    let Some(v) = var(symbol) else {
        return ret(INVALID_SYMBOL);
    };
    // SAFETY: non-null output pointer.
    unsafe { *p = v.dptr as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetSymbolSize(size: *mut usize, symbol: *const c_void) -> Err {
    if size.is_null() {
        return ret(INVALID_VALUE);
    }
    let Some(v) = var(symbol) else {
        return ret(INVALID_SYMBOL);
    };
    // SAFETY: non-null output pointer.
    unsafe { *size = v.size };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaMemcpyToSymbol(
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: c_int,
) -> Err {
    let Some(v) = var(symbol) else {
        return ret(INVALID_SYMBOL);
    };
    if offset.checked_add(count).is_none_or(|e| e > v.size) {
        return ret(INVALID_VALUE);
    }
    // cudaMemcpyHostToDevice 1, DeviceToDevice 3, Default 4.
    if !matches!(kind, 1 | 3 | 4) {
        return ret(INVALID_MEMCPY_DIRECTION);
    }
    cudaMemcpy((v.dptr + offset as u64) as *mut c_void, src, count, kind)
}

// ==================================================================== call configuration

#[derive(Clone, Copy)]
struct CallConfig {
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: Handle,
}

thread_local! {
    /// `<<<...>>>` pushes, the host stub pops: nested launches from a stub's arguments are
    /// possible, so a stack.
    static CONFIGS: std::cell::RefCell<Vec<CallConfig>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaPushCallConfiguration(
    grid: Dim3,
    block: Dim3,
    shared: usize,
    stream: Handle,
) -> c_uint {
    CONFIGS.with(|c| {
        c.borrow_mut().push(CallConfig {
            grid,
            block,
            shared,
            stream,
        })
    });
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn __cudaPopCallConfiguration(
    grid: *mut Dim3,
    block: *mut Dim3,
    shared: *mut usize,
    stream: *mut Handle,
) -> Err {
    let Some(c) = CONFIGS.with(|c| c.borrow_mut().pop()) else {
        return ret(INVALID_CONFIGURATION);
    };
    if grid.is_null() || block.is_null() || shared.is_null() || stream.is_null() {
        return ret(INVALID_VALUE);
    }
    // SAFETY: non-null output pointers from the host stub.
    unsafe {
        *grid = c.grid;
        *block = c.block;
        *shared = c.shared;
        *stream = c.stream;
    }
    SUCCESS
}
