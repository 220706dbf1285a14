//! `libnvidia-ml.so.1` of the simulated GPU: the part of NVML a framework calls at start-up.
//!
//! TensorFlow opens NVML right after `cuInit` and calls `nvmlInit_v2`; when NVML is missing or
//! fails, its device count silently becomes -1 and no GPU is listed. So this library answers
//! initialisation and shutdown (reference-counted, as NVML's are), error strings, the CUDA driver
//! version, the machine's device count and a device's handle by its PCI bus id. PyTorch looks up
//! a list of NVML functions at once when it first reports an out-of-memory error (the processes
//! using the device) and stops at the first one missing: the others it looks up are exported and
//! answer `NVML_ERROR_NOT_SUPPORTED`; nothing else of NVML is simulated. Return values are
//! `nvmlReturn_t`'s (nvml.h, NVML API version 12).
#![allow(non_snake_case)]
// Exported C entry points: their callers are C programs and the pointer contracts are the API's.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_int, c_uint};
use std::sync::Mutex;

/// `nvmlReturn_t` (nvml.h).
pub type NvmlReturn = c_int;
pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_UNKNOWN: NvmlReturn = 999;

/// `NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH`: the flags `nvmlInitWithFlags` knows.
const INIT_FLAGS: c_uint = 0x1 | 0x2;

/// The CUDA driver version NVML reports: the simulated driver's (`cuDriverGetVersion`, CUDA 13.2).
const CUDA_DRIVER_VERSION: c_int = 13020;

/// The most simulated devices a machine has (simgpu-cuda's `MAX_DEVICES`).
const MAX_DEVICES: u32 = 16;

/// How many `nvmlInit*` calls have not been matched by `nvmlShutdown` yet.
static REFS: Mutex<u32> = Mutex::new(0);

fn refs() -> std::sync::MutexGuard<'static, u32> {
    REFS.lock().unwrap_or_else(|p| p.into_inner())
}

fn initialised() -> bool {
    *refs() > 0
}

/// The machine's device count: `SIMGPU_DEVICES` (1 to 16; 1 when unset), as the simulated driver
/// reads it. NVML counts the machine's devices: `CUDA_VISIBLE_DEVICES` does not filter them.
fn machine_devices(v: Option<&str>) -> Result<u32, String> {
    match v.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(1),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if (1..=MAX_DEVICES).contains(&n) => Ok(n),
            _ => Err(format!(
                "SIMGPU_DEVICES={s:?}: accepted is a device count from 1 to {MAX_DEVICES}"
            )),
        },
    }
}

fn init(flags: c_uint) -> NvmlReturn {
    if flags & !INIT_FLAGS != 0 {
        return ERROR_INVALID_ARGUMENT;
    }
    *refs() += 1;
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    init(0)
}

/// NVML 4.304's `nvmlInit` ("_v1"): the same here, as every simulated device is accessible.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    init(0)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> NvmlReturn {
    init(flags)
}

/// Drops one initialisation; `NVML_ERROR_UNINITIALIZED` when there is none left.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    let mut r = refs();
    if *r == 0 {
        return ERROR_UNINITIALIZED;
    }
    *r -= 1;
    SUCCESS
}

/// A static description of `result` (an unknown value gets "Unknown Error", as NVML's does).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let s: &'static std::ffi::CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        5 => c"Already Initialized",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        8 => c"Insufficient External Power",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        11 => c"Interrupt Request Issue",
        12 => c"NVML Shared Library Not Found",
        13 => c"Function Not Found",
        14 => c"Corrupted infoROM",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        17 => c"The operating system has blocked the request",
        18 => c"RM has detected an NVML/RM version mismatch",
        19 => c"In use by another client",
        20 => c"Insufficient Memory",
        21 => c"No data",
        22 => c"The requested vgpu operation is not available on target device, because ECC is enabled",
        23 => c"Insufficient resources",
        24 => c"Frequency not supported",
        25 => c"Argument version mismatch",
        26 => c"Deprecated",
        27 => c"Not ready",
        28 => c"GPU not found",
        29 => c"Invalid state",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

fn cuda_driver_version(v: *mut c_int) -> NvmlReturn {
    if v.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: a non-null output pointer for an int (the API's contract).
    unsafe { v.write(CUDA_DRIVER_VERSION) };
    SUCCESS
}

/// The CUDA version the driver supports (13020: CUDA 13.2). Needs no initialisation, as NVML's.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> NvmlReturn {
    cuda_driver_version(v)
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> NvmlReturn {
    cuda_driver_version(v)
}

/// The machine's simulated devices (`SIMGPU_DEVICES`); a value that does not parse is named and
/// answered `NVML_ERROR_UNKNOWN`, as the driver refuses to guess.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(n: *mut c_uint) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    if n.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    match machine_devices(std::env::var("SIMGPU_DEVICES").ok().as_deref()) {
        Ok(c) => {
            // SAFETY: a non-null output pointer for an unsigned int (the API's contract).
            unsafe { n.write(c) };
            SUCCESS
        }
        Err(e) => {
            eprintln!("simgpu: nvmlDeviceGetCount_v2: {e}");
            ERROR_UNKNOWN
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount(n: *mut c_uint) -> NvmlReturn {
    nvmlDeviceGetCount_v2(n)
}

/// The PCI bus of the first simulated device (domain 0, device 0); device `i` sits on bus
/// `PCI_BUS + i`, as the simulated driver reports them (simgpu-cuda's `props::PCI_BUS`).
const PCI_BUS: u32 = 0x1b;

/// The devices' handles: the address of each one's byte.
static HANDLES: [u8; MAX_DEVICES as usize] = [0; MAX_DEVICES as usize];

/// (domain, bus, device) of a PCI bus id `[domain:]bus:device.function`, in hex.
fn parse_bus_id(id: &str) -> Option<(u32, u32, u32)> {
    let (rest, _function) = id.trim().rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    match parts[..] {
        [domain, bus, device] => Some((hex(domain)?, hex(bus)?, hex(device)?)),
        [bus, device] => Some((0, hex(bus)?, hex(device)?)),
        _ => None,
    }
}

/// The handle of the simulated device on PCI bus id `id`; `NVML_ERROR_NOT_FOUND` (6) for an id
/// no simulated device has.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    id: *const c_char,
    device: *mut *const u8,
) -> NvmlReturn {
    if !initialised() {
        return ERROR_UNINITIALIZED;
    }
    if id.is_null() || device.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: a NUL-terminated string (the API's contract), checked non-null.
    let id = unsafe { std::ffi::CStr::from_ptr(id) }.to_string_lossy();
    let Some((domain, bus, dev)) = parse_bus_id(&id) else {
        return ERROR_INVALID_ARGUMENT;
    };
    let count = machine_devices(std::env::var("SIMGPU_DEVICES").ok().as_deref()).unwrap_or(1);
    if domain != 0 || dev != 0 || bus < PCI_BUS || bus >= PCI_BUS + count {
        return ERROR_NOT_FOUND;
    }
    // SAFETY: a non-null output pointer for a device handle (the API's contract).
    unsafe { device.write(&HANDLES[(bus - PCI_BUS) as usize]) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId(
    id: *const c_char,
    device: *mut *const u8,
) -> NvmlReturn {
    nvmlDeviceGetHandleByPciBusId_v2(id, device)
}

/// Not simulated (the processes using a device, its NVLink peers, its fabric).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses() -> NvmlReturn {
    ERROR_NOT_SUPPORTED
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType() -> NvmlReturn {
    ERROR_NOT_SUPPORTED
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2() -> NvmlReturn {
    ERROR_NOT_SUPPORTED
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuFabricInfoV() -> NvmlReturn {
    ERROR_NOT_SUPPORTED
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// The reference count is the process's: the tests that change it take turns.
    fn turn() -> std::sync::MutexGuard<'static, ()> {
        static T: Mutex<()> = Mutex::new(());
        T.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn init_and_shutdown_are_counted() {
        let _t = turn();
        while nvmlShutdown() == SUCCESS {}
        assert_eq!(nvmlShutdown(), ERROR_UNINITIALIZED);
        let mut n = 0;
        assert_eq!(nvmlDeviceGetCount_v2(&mut n), ERROR_UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), SUCCESS);
        assert_eq!(nvmlInit(), SUCCESS);
        assert_eq!(nvmlInitWithFlags(1), SUCCESS);
        assert_eq!(nvmlInitWithFlags(4), ERROR_INVALID_ARGUMENT);
        assert_eq!(
            nvmlDeviceGetCount_v2(std::ptr::null_mut()),
            ERROR_INVALID_ARGUMENT
        );
        for _ in 0..3 {
            assert_eq!(nvmlShutdown(), SUCCESS);
        }
        assert_eq!(nvmlShutdown(), ERROR_UNINITIALIZED);
    }

    #[test]
    fn device_count_follows_simgpu_devices() {
        assert_eq!(machine_devices(None), Ok(1));
        assert_eq!(machine_devices(Some(" ")), Ok(1));
        assert_eq!(machine_devices(Some("4")), Ok(4));
        assert!(machine_devices(Some("0")).is_err());
        assert!(machine_devices(Some("17")).is_err());
        assert!(machine_devices(Some("two")).is_err());
        let _t = turn();
        assert_eq!(nvmlInit_v2(), SUCCESS);
        let mut n = 0;
        let want = machine_devices(std::env::var("SIMGPU_DEVICES").ok().as_deref()).unwrap_or(0);
        if want > 0 {
            assert_eq!(nvmlDeviceGetCount_v2(&mut n), SUCCESS);
            assert_eq!(n, want);
        }
        assert_eq!(nvmlShutdown(), SUCCESS);
    }

    #[test]
    fn error_strings() {
        // SAFETY: nvmlErrorString returns static NUL-terminated strings.
        let s = |r| {
            unsafe { CStr::from_ptr(nvmlErrorString(r)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(s(SUCCESS), "Success");
        assert_eq!(s(ERROR_UNINITIALIZED), "Uninitialized");
        assert_eq!(s(ERROR_INVALID_ARGUMENT), "Invalid Argument");
        assert_eq!(s(ERROR_NOT_SUPPORTED), "Not Supported");
        assert_eq!(s(ERROR_UNKNOWN), "Unknown Error");
        assert_eq!(s(12345), "Unknown Error");
    }

    #[test]
    fn cuda_driver_version_is_the_simulated_drivers() {
        let mut v = 0;
        assert_eq!(nvmlSystemGetCudaDriverVersion_v2(&mut v), SUCCESS);
        assert_eq!(v, 13020);
        assert_eq!(
            nvmlSystemGetCudaDriverVersion(std::ptr::null_mut()),
            ERROR_INVALID_ARGUMENT
        );
    }

    #[test]
    fn a_device_is_found_by_its_pci_bus_id() {
        let _t = turn();
        assert_eq!(nvmlInit_v2(), SUCCESS);
        let mut d: *const u8 = std::ptr::null();
        // PyTorch's format (NVML_DEVICE_PCI_BUS_ID_FMT) for the first simulated device.
        let first = c"00000000:1B:00.0";
        assert_eq!(
            nvmlDeviceGetHandleByPciBusId_v2(first.as_ptr(), &mut d),
            SUCCESS
        );
        assert!(!d.is_null());
        let mut again: *const u8 = std::ptr::null();
        assert_eq!(
            nvmlDeviceGetHandleByPciBusId(c"1b:00.0".as_ptr(), &mut again),
            SUCCESS
        );
        assert_eq!(d, again, "the same device, the same handle");
        for other in [
            c"00000000:1C:00.0",
            c"00000001:1B:00.0",
            c"00000000:1B:01.0",
        ] {
            assert_eq!(
                nvmlDeviceGetHandleByPciBusId_v2(other.as_ptr(), &mut d),
                ERROR_NOT_FOUND,
                "{other:?}"
            );
        }
        assert_eq!(
            nvmlDeviceGetHandleByPciBusId_v2(c"bus one".as_ptr(), &mut d),
            ERROR_INVALID_ARGUMENT
        );
        assert_eq!(nvmlShutdown(), SUCCESS);
        assert_eq!(
            nvmlDeviceGetHandleByPciBusId_v2(first.as_ptr(), &mut d),
            ERROR_UNINITIALIZED
        );
    }
}
