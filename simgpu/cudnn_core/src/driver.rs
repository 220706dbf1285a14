//! The simulated GPU's driver calls cuDNN uses, found in libcuda.so.1 with dlsym.

use crate::*;

// ==================================================================== the driver

pub type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize, *const c_char) -> c_int;
pub type WriteFn = unsafe extern "C" fn(u64, *const u8, usize, *const c_char) -> c_int;
pub type CheckFn = unsafe extern "C" fn(u64, usize, *const c_char) -> c_int;
pub type SubmitFn = unsafe extern "C" fn(Handle, f64, c_int) -> c_int;
pub type ModeFn = unsafe extern "C" fn() -> c_int;
pub type MemInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;

/// The simulated driver's calls cuDNN uses, and the device profile.
pub struct Sim {
    pub read: ReadFn,
    pub write: WriteFn,
    pub check: CheckFn,
    pub submit: SubmitFn,
    pub data_mode: ModeFn,
    pub mem_info: MemInfoFn,
    pub profile: Profile,
}

pub fn sim() -> Option<&'static Sim> {
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
pub fn drv(r: c_int) -> Result<(), Status> {
    if r == 0 {
        Ok(())
    } else {
        Err(EXECUTION_FAILED_CUDA_DRIVER)
    }
}

pub fn data_mode(s: &Sim) -> bool {
    // SAFETY: resolved from the simulated driver with this signature.
    unsafe { (s.data_mode)() != 0 }
}
