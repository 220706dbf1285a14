//! Dynamic linking: the `dlsym` interposer (TensorFlow's RTLD_LOCAL trampolines, programs that
//! dlopen CUDA), the driver's `cuGetProcAddress(_v2)` and the runtime's
//! `cudaGetDriverEntryPoint(ByVersion)`: each returns our hook in place of a function we hook,
//! and teaches that hook where its real function is. `_exit` flushes the trace first.

use super::{Entry, driver_variant, find};
use crate::core::state;
use crate::ffi::caller;
use crate::ffi::real::{CUDA, CUDART, dlsym_fn};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

type GetProc =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> c_int;
type EntryPoint = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type EntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_uint, u64, *mut c_int) -> c_int;

pub static TABLE: [Entry; 4] = [
    Entry::new(c"cuGetProcAddress", "cuGetProcAddress", CUDA, {
        fn addr() -> usize {
            cuGetProcAddress as *const () as usize
        }
        addr
    }),
    Entry::new(c"cuGetProcAddress_v2", "cuGetProcAddress", CUDA, {
        fn addr() -> usize {
            cuGetProcAddress_v2 as *const () as usize
        }
        addr
    }),
    Entry::new(c"cudaGetDriverEntryPoint", "", CUDART, {
        fn addr() -> usize {
            cudaGetDriverEntryPoint as *const () as usize
        }
        addr
    }),
    Entry::new(c"cudaGetDriverEntryPointByVersion", "", CUDART, {
        fn addr() -> usize {
            cudaGetDriverEntryPointByVersion as *const () as usize
        }
        addr
    }),
];

/// Replaces a real driver function the caller obtained by our hook of the same ABI variant;
/// anything we do not hook (or an unknown variant) is returned unchanged. Callers inside the
/// CUDA-family libraries keep the real function (see [`crate::ffi::caller`]).
fn swap_driver_pointer(symbol: *const c_char, pfn: *mut *mut c_void, caller: usize) {
    if symbol.is_null() || pfn.is_null() || state::config().disable {
        return;
    }
    // SAFETY: symbol is a NUL-terminated name (API contract).
    if caller::keeps_real(caller, unsafe { CStr::from_ptr(symbol) }.to_bytes()) {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: pfn is the caller's output pointer, written by the real call.
        let real = unsafe { *pfn } as usize;
        if real == 0 {
            return;
        }
        // SAFETY: symbol is a NUL-terminated name (API contract).
        let base = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        if let Some(e) = driver_variant(base, real) {
            e.learn(real);
            // SAFETY: as above.
            unsafe { *pfn = (e.hook)() as *mut c_void };
        }
    }));
}

/// Defines an exported function whose body receives, as one extra last argument, the address
/// its caller returns to: the first free argument register is loaded from the return address
/// (x86-64: the word at the stack pointer on entry; AArch64: the link register), then the body
/// is tail-called, so the stack and every argument stay as the caller left them.
macro_rules! with_caller {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $body:ident, x86 $x86:literal, arm $arm:literal) => {
        $(#[$m])*
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            core::arch::naked_asm!(concat!("mov ", $x86, ", [rsp]"), "jmp {body}", body = sym $body);
            #[cfg(target_arch = "aarch64")]
            core::arch::naked_asm!(concat!("mov ", $arm, ", x30"), "b {body}", body = sym $body);
        }

        $(#[$m])*
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // Elsewhere the caller is unknown (0): every caller is treated as a program's.
            $body($($a,)* 0)
        }
    };
}

with_caller!(
    fn cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64, status: *mut c_int) -> c_int
        = get_proc_v2, x86 "r9", arm "x5"
);

extern "C" fn get_proc_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
    caller: usize,
) -> c_int {
    let p = TABLE[1].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cuGetProcAddress_v2.
    let real: GetProc = unsafe { std::mem::transmute::<usize, GetProc>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn, caller);
    }
    r
}

with_caller!(
    fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) -> c_int
        = get_proc, x86 "r8", arm "x4"
);

extern "C" fn get_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    caller: usize,
) -> c_int {
    let p = TABLE[0].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cuGetProcAddress (CUDA 11.3 signature).
    let real: GetProcV1 = unsafe { std::mem::transmute::<usize, GetProcV1>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn, caller);
    }
    r
}

with_caller!(
    fn cudaGetDriverEntryPoint(symbol: *const c_char, pfn: *mut *mut c_void, flags: u64, status: *mut c_int) -> c_int
        = entry_point, x86 "r8", arm "x4"
);

extern "C" fn entry_point(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: u64,
    status: *mut c_int,
    caller: usize,
) -> c_int {
    let p = TABLE[2].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cudaGetDriverEntryPoint (CUDA 12 signature).
    let real: EntryPoint = unsafe { std::mem::transmute::<usize, EntryPoint>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn, caller);
    }
    r
}

with_caller!(
    fn cudaGetDriverEntryPointByVersion(symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: u64, status: *mut c_int) -> c_int
        = entry_point_by_version, x86 "r9", arm "x5"
);

extern "C" fn entry_point_by_version(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: u64,
    status: *mut c_int,
    caller: usize,
) -> c_int {
    let p = TABLE[3].real();
    if p == 0 {
        return 3;
    }
    // SAFETY: p is the real cudaGetDriverEntryPointByVersion.
    let real: EntryPointByVersion = unsafe { std::mem::transmute::<usize, EntryPointByVersion>(p) };
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, version, flags, status) };
    if r == 0 {
        swap_driver_pointer(symbol, pfn, caller);
    }
    r
}

/// The `dlsym` interposer. `dlsym(RTLD_NEXT, name)` means "the next definition after the
/// *caller*", which glibc works out from its own return address: that look-up jumps straight
/// into glibc's `dlsym` with the caller's return address still in place, and its answer is
/// never replaced (a preload tool stacked after us gets the function after itself, not our
/// hook, and cannot loop through us). Every other look-up goes to [`dlsym_from`] with the
/// caller's address.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1", // RTLD_NEXT
        "jne 2f",
        // Keep the arguments and a 16-byte aligned stack across the look-up of glibc's dlsym.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {glibc}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "ret", // rax = 0: NULL, as dlsym answers a failed look-up
        "2:",
        "mov rdx, [rsp]",
        "jmp {from}",
        glibc = sym glibc_dlsym,
        from = sym dlsym_from,
    )
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmn x0, #1", // RTLD_NEXT
        "b.ne 2f",
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {glibc}",
        "mov x16, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x16, 3f",
        "br x16",
        "3:",
        "mov x0, #0",
        "ret",
        "2:",
        "mov x2, x30",
        "b {from}",
        glibc = sym glibc_dlsym,
        from = sym dlsym_from,
    )
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // Elsewhere the caller is unknown: every caller is treated as a program's.
    dlsym_from(handle, symbol, 0)
}

/// glibc's `dlsym` (0 when it cannot be found).
extern "C" fn glibc_dlsym() -> usize {
    dlsym_fn().map_or(0, |f| f as usize)
}

/// A look-up by handle (or RTLD_DEFAULT). The real `dlsym` answers first, and a NULL answer is
/// returned as it is. Our hook replaces the answer only for exact names we hook, only when the
/// real function lies in a CUDA-family library, and never for a caller inside one.
extern "C" fn dlsym_from(handle: *mut c_void, symbol: *const c_char, caller: usize) -> *mut c_void {
    let Some(real) = dlsym_fn() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding the caller's arguments to glibc's dlsym; for a handle (not RTLD_NEXT)
    // the answer does not depend on who asks.
    let p = unsafe { real(handle, symbol) };
    if p.is_null() || symbol.is_null() || state::config().disable {
        return p;
    }
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: symbol is a NUL-terminated name (dlsym's contract).
        let name = unsafe { CStr::from_ptr(symbol) };
        let Some(e) = find(name) else { return p };
        if p as usize == (e.hook)() {
            return p;
        }
        if caller::keeps_real(caller, name.to_bytes()) || !caller::in_family(p as usize) {
            return p;
        }
        e.learn(p as usize);
        (e.hook)() as *mut c_void
    }))
    .unwrap_or(p)
}

type ExitFn = unsafe extern "C" fn(c_int) -> !;

fn exit_via(name: &CStr, code: c_int) -> ! {
    crate::sinks::timing::drain(false);
    crate::sinks::trace::flush();
    let f = dlsym_fn()
        // SAFETY: the real dlsym with RTLD_NEXT finds libc's function of that name.
        .map(|d| unsafe { d(libc::RTLD_NEXT, name.as_ptr()) })
        .filter(|p| !p.is_null());
    match f {
        // SAFETY: libc's _exit / _Exit, which never return.
        Some(p) => unsafe { std::mem::transmute::<*mut c_void, ExitFn>(p)(code) },
        // SAFETY: the raw exit_group system call ends the process.
        None => unsafe {
            libc::syscall(libc::SYS_exit_group, code);
            libc::abort()
        },
    }
}

/// `_exit` skips atexit handlers: flush the trace first.
#[unsafe(no_mangle)]
pub extern "C" fn _exit(code: c_int) -> ! {
    exit_via(c"_exit", code)
}

#[unsafe(no_mangle)]
pub extern "C" fn _Exit(code: c_int) -> ! {
    exit_via(c"_Exit", code)
}
