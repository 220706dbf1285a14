//! The simulated driver's calls NCCL uses, found in libcuda.so.1 with dlsym.

use simgpu_model::Profile;
use simgpu_model::nccl::NcclModel;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

pub type Handle = *mut c_void;
type ReadFn = unsafe extern "C" fn(u64, *mut u8, usize, *const c_char) -> c_int;
type WriteFn = unsafe extern "C" fn(u64, *const u8, usize, *const c_char) -> c_int;
type CheckFn = unsafe extern "C" fn(u64, usize, *const c_char) -> c_int;
type ModeFn = unsafe extern "C" fn() -> c_int;
type HoldsFn = unsafe extern "C" fn(u64, usize) -> c_int;
type StreamTimeFn = unsafe extern "C" fn(Handle, *mut f64) -> c_int;
type SubmitLinkFn = unsafe extern "C" fn(Handle, f64, f64, c_int) -> c_int;
type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type PciBusIdFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type MemAllocFn = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type MemFreeFn = unsafe extern "C" fn(u64) -> c_int;
type MemCreateFn = unsafe extern "C" fn(*mut u64, usize, *const MemAllocationProp, u64) -> c_int;
type MemReleaseFn = unsafe extern "C" fn(u64) -> c_int;

/// CUmemAllocationProp (cuda.h): type, requested handle types, location {type, id}, win32
/// metadata pointer, allocation flags.
#[repr(C)]
struct MemAllocationProp {
    type_: c_uint,
    requested_handle_types: c_uint,
    location_type: c_uint,
    location_id: c_int,
    win32_metadata: *mut c_void,
    alloc_flags: [u8; 8],
}

/// The simulated driver's calls, and the device profile's NCCL figures.
pub struct Sim {
    read: ReadFn,
    write: WriteFn,
    check: CheckFn,
    data_mode: ModeFn,
    holds_bytes: HoldsFn,
    stream_time: StreamTimeFn,
    submit_link: SubmitLinkFn,
    ctx_get_device: CtxGetDeviceFn,
    pci_bus_id: PciBusIdFn,
    mem_alloc: MemAllocFn,
    mem_free: MemFreeFn,
    mem_create: MemCreateFn,
    mem_release: MemReleaseFn,
    pub model: NcclModel,
}

/// The driver, or why it cannot be reached (named once by the caller).
pub fn sim() -> Result<&'static Sim, &'static str> {
    static S: OnceLock<Result<Sim, &'static str>> = OnceLock::new();
    S.get_or_init(load).as_ref().map_err(|e| *e)
}

fn load() -> Result<Sim, &'static str> {
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is the simulated driver's
    // function with the signature given to it here (simgpu/cuda/src/lib.rs, context.rs).
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
        if h.is_null() {
            return Err("cannot open libcuda.so.1 (the simulated driver)");
        }
        let sym = |n: &CStr| {
            let p = libc::dlsym(h, n.as_ptr());
            if p.is_null() {
                Err("libcuda.so.1 is not the simulated driver (a simgpu_ call is missing)")
            } else {
                Ok(p)
            }
        };
        let profile_json = std::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn() -> *const c_char,
        >(sym(c"simgpu_profile_json")?);
        let pj = profile_json();
        if pj.is_null() {
            return Err("the simulated driver has no device profile (SIMGPU_PROFILE)");
        }
        let profile = Profile::from_json(&CStr::from_ptr(pj).to_string_lossy())
            .map_err(|_| "the simulated driver's profile does not parse")?;
        let model = default_model(&profile);
        model
            .validate()
            .map_err(|_| "the profile's nccl block is not valid (figures must be positive)")?;
        Ok(Sim {
            read: std::mem::transmute::<*mut c_void, ReadFn>(sym(c"simgpu_read")?),
            write: std::mem::transmute::<*mut c_void, WriteFn>(sym(c"simgpu_write")?),
            check: std::mem::transmute::<*mut c_void, CheckFn>(sym(c"simgpu_check")?),
            data_mode: std::mem::transmute::<*mut c_void, ModeFn>(sym(c"simgpuDataMode")?),
            holds_bytes: std::mem::transmute::<*mut c_void, HoldsFn>(sym(c"simgpuHoldsBytes")?),
            stream_time: std::mem::transmute::<*mut c_void, StreamTimeFn>(sym(
                c"simgpu_stream_time",
            )?),
            submit_link: std::mem::transmute::<*mut c_void, SubmitLinkFn>(sym(
                c"simgpu_submit_link",
            )?),
            ctx_get_device: std::mem::transmute::<*mut c_void, CtxGetDeviceFn>(sym(
                c"cuCtxGetDevice",
            )?),
            pci_bus_id: std::mem::transmute::<*mut c_void, PciBusIdFn>(sym(
                c"cuDeviceGetPCIBusId",
            )?),
            mem_alloc: std::mem::transmute::<*mut c_void, MemAllocFn>(sym(c"cuMemAlloc_v2")?),
            mem_free: std::mem::transmute::<*mut c_void, MemFreeFn>(sym(c"cuMemFree_v2")?),
            mem_create: std::mem::transmute::<*mut c_void, MemCreateFn>(sym(c"cuMemCreate")?),
            mem_release: std::mem::transmute::<*mut c_void, MemReleaseFn>(sym(c"cuMemRelease")?),
            model,
        })
    }
}

/// The profile's NCCL figures; a profile file without an `nccl` block gets the built-in h100
/// profile's, so collectives are still timed.
fn default_model(p: &Profile) -> NcclModel {
    p.nccl.clone().unwrap_or_else(|| {
        Profile::load("h100")
            .ok()
            .and_then(|(h, _)| h.nccl)
            .unwrap_or(NcclModel {
                busbw_gbs: 480.0,
                latency_us: 10.0,
                ring_busbw_gbs: Some(370.0),
                channels: Some(16),
            })
    })
}

/// A driver call's status: 0 is success.
pub type Cu = c_int;

impl Sim {
    pub fn data_mode(&self) -> bool {
        // SAFETY: resolved from the simulated driver with this signature.
        unsafe { (self.data_mode)() != 0 }
    }

    /// Whether [ptr, ptr + bytes) holds its bytes: always in data mode; in shape mode, a small
    /// allocation's (the driver's rule), whose bytes a collective then moves too.
    pub fn holds_bytes(&self, ptr: u64, bytes: usize) -> bool {
        // SAFETY: resolved from the simulated driver with this signature; any values are valid.
        unsafe { (self.holds_bytes)(ptr, bytes) != 0 }
    }

    pub fn read(&self, ptr: u64, dst: &mut [u8], what: &CStr) -> Cu {
        // SAFETY: dst holds dst.len() writable bytes; what is NUL-terminated.
        unsafe { (self.read)(ptr, dst.as_mut_ptr(), dst.len(), what.as_ptr()) }
    }

    pub fn write(&self, ptr: u64, src: &[u8], what: &CStr) -> Cu {
        // SAFETY: src holds src.len() readable bytes; what is NUL-terminated.
        unsafe { (self.write)(ptr, src.as_ptr(), src.len(), what.as_ptr()) }
    }

    pub fn check(&self, ptr: u64, bytes: usize, what: &CStr) -> Cu {
        // SAFETY: what is NUL-terminated; the call only checks the range.
        unsafe { (self.check)(ptr, bytes, what.as_ptr()) }
    }

    pub fn stream_time(&self, stream: Handle) -> Result<f64, Cu> {
        let mut t = 0.0;
        // SAFETY: t is a valid out-pointer; the stream handle is checked by the driver.
        let r = unsafe { (self.stream_time)(stream, &mut t) };
        if r == 0 { Ok(t) } else { Err(r) }
    }

    pub fn submit_link(&self, stream: Handle, not_before: f64, seconds: f64) -> Cu {
        // SAFETY: plain values; the stream handle is checked by the driver.
        unsafe { (self.submit_link)(stream, not_before, seconds, 0) }
    }

    pub fn device(&self) -> Result<c_int, Cu> {
        let mut d = 0;
        // SAFETY: d is a valid out-pointer.
        let r = unsafe { (self.ctx_get_device)(&mut d) };
        if r == 0 { Ok(d) } else { Err(r) }
    }

    pub fn pci_bus_id(&self, dev: c_int) -> Result<String, Cu> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf has 64 writable bytes, as passed.
        let r = unsafe { (self.pci_bus_id)(buf.as_mut_ptr(), 64, dev) };
        if r != 0 {
            return Err(r);
        }
        // SAFETY: the driver NUL-terminates within the buffer.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Physical memory of `size` bytes on device `dev` (cuMemCreate, as NCCL maps its buffers):
    /// its handle.
    pub fn mem_create(&self, size: usize, dev: c_int) -> Result<u64, Cu> {
        let prop = MemAllocationProp {
            type_: 1,                  // CU_MEM_ALLOCATION_TYPE_PINNED
            requested_handle_types: 0, // CU_MEM_HANDLE_TYPE_NONE
            location_type: 1,          // CU_MEM_LOCATION_TYPE_DEVICE
            location_id: dev,
            win32_metadata: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        };
        let mut h = 0u64;
        // SAFETY: valid out-pointer and properties for the call's duration.
        let r = unsafe { (self.mem_create)(&mut h, size, &prop, 0) };
        if r == 0 { Ok(h) } else { Err(r) }
    }

    pub fn mem_release(&self, handle: u64) -> Cu {
        // SAFETY: a handle cuMemCreate gave.
        unsafe { (self.mem_release)(handle) }
    }

    pub fn mem_alloc(&self, size: usize) -> Result<u64, Cu> {
        let mut p = 0u64;
        // SAFETY: p is a valid out-pointer.
        let r = unsafe { (self.mem_alloc)(&mut p, size) };
        if r == 0 { Ok(p) } else { Err(r) }
    }

    pub fn mem_free(&self, p: u64) -> Cu {
        // SAFETY: a plain value; the driver checks it.
        unsafe { (self.mem_free)(p) }
    }
}
