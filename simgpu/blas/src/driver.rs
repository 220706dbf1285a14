//! The simulated driver's calls the math libraries use, found with dlsym on libcuda.so.1 (as the
//! simulated cuDNN does), and the device profile it was started with.

use crate::types::*;
use simgpu_model::Profile;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize, *const c_char) -> c_int;
type WriteFn = unsafe extern "C" fn(u64, *const u8, usize, *const c_char) -> c_int;
type CheckFn = unsafe extern "C" fn(u64, usize, *const c_char) -> c_int;
type SubmitFn = unsafe extern "C" fn(*mut c_void, f64, c_int) -> c_int;
type ModeFn = unsafe extern "C" fn() -> c_int;

pub struct Sim {
    read: ReadFn,
    write: WriteFn,
    check: CheckFn,
    submit: SubmitFn,
    data_mode: ModeFn,
    pub profile: Profile,
}

/// The simulated driver, or None when libcuda.so.1 is not the simulated one (or is missing).
pub fn sim() -> Option<&'static Sim> {
    static S: OnceLock<Option<Sim>> = OnceLock::new();
    S.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol has the signature given
        // (the simulated driver's exports).
        unsafe {
            let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
            if h.is_null() {
                eprintln!("simgpu cublas: cannot open libcuda.so.1");
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
                submit: std::mem::transmute::<*mut c_void, SubmitFn>(sym(c"simgpu_submit_kernel")?),
                data_mode: std::mem::transmute::<*mut c_void, ModeFn>(sym(c"simgpuDataMode")?),
                profile,
            })
        }
    })
    .as_ref()
}

/// A driver failure seen by the library (a trap, a sticky error) is an execution failure.
fn drv(r: c_int) -> Result<(), Status> {
    if r == 0 {
        Ok(())
    } else {
        Err(EXECUTION_FAILED)
    }
}

impl Sim {
    /// Whether bytes and arithmetic are real (SIMGPU_MODE=data) rather than shape only.
    pub fn data_mode(&self) -> bool {
        // SAFETY: resolved from the simulated driver with this signature.
        unsafe { (self.data_mode)() != 0 }
    }

    /// Reads device bytes (in shape mode: checks the range only and leaves `out` as it is).
    pub fn read(&self, ptr: u64, out: &mut [u8], what: &CStr) -> Result<(), Status> {
        // SAFETY: out holds out.len() writable bytes.
        drv(unsafe { (self.read)(ptr, out.as_mut_ptr(), out.len(), what.as_ptr()) })
    }

    /// Writes device bytes (in shape mode: checks the range only).
    pub fn write(&self, ptr: u64, data: &[u8], what: &CStr) -> Result<(), Status> {
        // SAFETY: data holds data.len() readable bytes.
        drv(unsafe { (self.write)(ptr, data.as_ptr(), data.len(), what.as_ptr()) })
    }

    /// Checks that a device range is mapped (an unmapped one traps, as a kernel touching it).
    pub fn check(&self, ptr: u64, bytes: usize, what: &CStr) -> Result<(), Status> {
        // SAFETY: resolved from the simulated driver; checks the range only.
        drv(unsafe { (self.check)(ptr, bytes, what.as_ptr()) })
    }

    /// Runs a kernel of `seconds` on `stream` (an invalid stream is an execution failure).
    pub fn submit(&self, stream: *mut c_void, seconds: f64) -> Result<(), Status> {
        // SAFETY: resolved from the simulated driver with this signature.
        drv(unsafe { (self.submit)(stream, seconds, 0) })
    }
}
