//! Kernel attributes and occupancy, answered by the driver for the kernel whose host stub (or
//! `cudaKernel_t`, the same address here) the program names.

use crate::*;

/// `cudaFuncAttributes` (CUDA 13.2, driver_types.h; 13.3 names two of the reserved words).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct FuncAttributes {
    pub sharedSizeBytes: usize,
    pub constSizeBytes: usize,
    pub localSizeBytes: usize,
    pub maxThreadsPerBlock: c_int,
    pub numRegs: c_int,
    pub ptxVersion: c_int,
    pub binaryVersion: c_int,
    pub cacheModeCA: c_int,
    pub maxDynamicSharedSizeBytes: c_int,
    pub preferredShmemCarveout: c_int,
    pub clusterDimMustBeSet: c_int,
    pub requiredClusterWidth: c_int,
    pub requiredClusterHeight: c_int,
    pub requiredClusterDepth: c_int,
    pub clusterSchedulingPolicyPreference: c_int,
    pub nonPortableClusterSizeAllowed: c_int,
    pub reserved0: c_int,
    pub reserved: [c_int; 15],
}

/// A driver error about the function handle is an invalid device function to the runtime.
fn func_err(e: Err) -> Err {
    if e == 400 { ret(98) } else { e }
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaFuncGetAttributes(a: *mut FuncAttributes, f: *const c_void) -> Err {
    if a.is_null() {
        return ret(INVALID_VALUE);
    }
    let mut v = FuncAttributes::default();
    let get = |attr: c_int| -> Result<c_int, Err> {
        let mut x = 0;
        match drv!("cuFuncGetAttribute" (*mut c_int, c_int, *const c_void) (&mut x, attr, f)) {
            SUCCESS => Ok(x),
            e => Err(func_err(e)),
        }
    };
    // CUfunction_attribute numbers (cuda.h).
    let r = (|| -> Result<(), Err> {
        v.maxThreadsPerBlock = get(0)?;
        v.sharedSizeBytes = get(1)? as usize;
        v.constSizeBytes = get(2)? as usize;
        v.localSizeBytes = get(3)? as usize;
        v.numRegs = get(4)?;
        v.ptxVersion = get(5)?;
        v.binaryVersion = get(6)?;
        v.cacheModeCA = get(7)?;
        v.maxDynamicSharedSizeBytes = get(8)?;
        v.preferredShmemCarveout = get(9)?;
        v.clusterDimMustBeSet = get(10)?;
        v.requiredClusterWidth = get(11)?;
        v.requiredClusterHeight = get(12)?;
        v.requiredClusterDepth = get(13)?;
        v.nonPortableClusterSizeAllowed = get(14)?;
        v.clusterSchedulingPolicyPreference = get(15)?;
        Ok(())
    })();
    if let Err(e) = r {
        return e;
    }
    // SAFETY: non-null output pointer (API contract).
    unsafe { a.write(v) };
    SUCCESS
}

/// cudaFuncAttribute numbering: MaxDynamicSharedMemorySize 8, PreferredSharedMemoryCarveout 9,
/// then the cluster attributes 10..=13, as in CUfunction_attribute.
#[unsafe(no_mangle)]
pub extern "C" fn cudaFuncSetAttribute(f: *const c_void, attr: c_int, value: c_int) -> Err {
    func_err(drv!("cuFuncSetAttribute" (*const c_void, c_int, c_int) (f, attr, value)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaKernelSetAttributeForDevice(
    k: *const c_void,
    attr: c_int,
    value: c_int,
    dev: c_int,
) -> Err {
    let mut current = 0;
    let r = crate::cudaGetDevice(&mut current);
    if r != SUCCESS {
        return r;
    }
    // Function attributes are the same on every simulated device: set them where the work runs.
    if dev != current {
        return ret(INVALID_DEVICE);
    }
    cudaFuncSetAttribute(k, attr, value)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    n: *mut c_int,
    f: *const c_void,
    block: c_int,
    dyn_shared: usize,
    flags: c_uint,
) -> Err {
    func_err(drv!("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"
        (*mut c_int, *const c_void, c_int, usize, c_uint) (n, f, block, dyn_shared, flags)))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaOccupancyMaxActiveBlocksPerMultiprocessor(
    n: *mut c_int,
    f: *const c_void,
    block: c_int,
    dyn_shared: usize,
) -> Err {
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, f, block, dyn_shared, 0)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaLaunchCooperativeKernel(
    f: *const c_void,
    g: Dim3,
    b: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    s: Handle,
) -> Err {
    let Ok(shared) = c_uint::try_from(shared) else {
        return ret(INVALID_VALUE);
    };
    func_err(drv!("cuLaunchCooperativeKernel"
        (*const c_void, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Handle, *mut *mut c_void)
        (f, g.x, g.y, g.z, b.x, b.y, b.z, shared, s, args)))
}

#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::runtime::sys as rt;
    use std::mem::{offset_of, size_of};

    #[test]
    fn func_attributes_layout() {
        assert_eq!(
            size_of::<FuncAttributes>(),
            size_of::<rt::cudaFuncAttributes>()
        );
        assert_eq!(
            offset_of!(FuncAttributes, maxDynamicSharedSizeBytes),
            offset_of!(rt::cudaFuncAttributes, maxDynamicSharedSizeBytes)
        );
        assert_eq!(
            offset_of!(FuncAttributes, nonPortableClusterSizeAllowed),
            offset_of!(rt::cudaFuncAttributes, nonPortableClusterSizeAllowed)
        );
        assert_eq!(
            rt::cudaFuncAttribute::cudaFuncAttributeMaxDynamicSharedMemorySize as i32,
            8
        );
    }
}
