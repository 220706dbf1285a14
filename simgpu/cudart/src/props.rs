//! Device properties as the runtime reports them: `cudaGetDeviceProperties` (the CUDA 13 `cudaDeviceProp`,
//! filled from the driver's attributes as the real runtime does), stream priority range, PCI bus
//! id, peer access (one device: none).

use crate::*;

/// `cudaDeviceProp` of CUDA 13 (driver_types.h; `cudaGetDeviceProperties` is the v2 entry point).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceProp {
    pub name: [c_char; 256],
    pub uuid: [u8; 16],
    pub luid: [c_char; 8],
    pub luidDeviceNodeMask: c_uint,
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: c_int,
    pub warpSize: c_int,
    pub memPitch: usize,
    pub maxThreadsPerBlock: c_int,
    pub maxThreadsDim: [c_int; 3],
    pub maxGridSize: [c_int; 3],
    pub totalConstMem: usize,
    pub major: c_int,
    pub minor: c_int,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    pub multiProcessorCount: c_int,
    pub integrated: c_int,
    pub canMapHostMemory: c_int,
    pub maxTexture1D: c_int,
    pub maxTexture1DMipmap: c_int,
    pub maxTexture2D: [c_int; 2],
    pub maxTexture2DMipmap: [c_int; 2],
    pub maxTexture2DLinear: [c_int; 3],
    pub maxTexture2DGather: [c_int; 2],
    pub maxTexture3D: [c_int; 3],
    pub maxTexture3DAlt: [c_int; 3],
    pub maxTextureCubemap: c_int,
    pub maxTexture1DLayered: [c_int; 2],
    pub maxTexture2DLayered: [c_int; 3],
    pub maxTextureCubemapLayered: [c_int; 2],
    pub maxSurface1D: c_int,
    pub maxSurface2D: [c_int; 2],
    pub maxSurface3D: [c_int; 3],
    pub maxSurface1DLayered: [c_int; 2],
    pub maxSurface2DLayered: [c_int; 3],
    pub maxSurfaceCubemap: c_int,
    pub maxSurfaceCubemapLayered: [c_int; 2],
    pub surfaceAlignment: usize,
    pub concurrentKernels: c_int,
    pub ECCEnabled: c_int,
    pub pciBusID: c_int,
    pub pciDeviceID: c_int,
    pub pciDomainID: c_int,
    pub tccDriver: c_int,
    pub asyncEngineCount: c_int,
    pub unifiedAddressing: c_int,
    pub memoryBusWidth: c_int,
    pub l2CacheSize: c_int,
    pub persistingL2CacheMaxSize: c_int,
    pub maxThreadsPerMultiProcessor: c_int,
    pub streamPrioritiesSupported: c_int,
    pub globalL1CacheSupported: c_int,
    pub localL1CacheSupported: c_int,
    pub sharedMemPerMultiprocessor: usize,
    pub regsPerMultiprocessor: c_int,
    pub managedMemory: c_int,
    pub isMultiGpuBoard: c_int,
    pub multiGpuBoardGroupID: c_int,
    pub hostNativeAtomicSupported: c_int,
    pub pageableMemoryAccess: c_int,
    pub concurrentManagedAccess: c_int,
    pub computePreemptionSupported: c_int,
    pub canUseHostPointerForRegisteredMem: c_int,
    pub cooperativeLaunch: c_int,
    pub sharedMemPerBlockOptin: usize,
    pub pageableMemoryAccessUsesHostPageTables: c_int,
    pub directManagedMemAccessFromHost: c_int,
    pub maxBlocksPerMultiProcessor: c_int,
    pub accessPolicyMaxWindowSize: c_int,
    pub reservedSharedMemPerBlock: usize,
    pub hostRegisterSupported: c_int,
    pub sparseCudaArraySupported: c_int,
    pub hostRegisterReadOnlySupported: c_int,
    pub timelineSemaphoreInteropSupported: c_int,
    pub memoryPoolsSupported: c_int,
    pub gpuDirectRDMASupported: c_int,
    pub gpuDirectRDMAFlushWritesOptions: c_uint,
    pub gpuDirectRDMAWritesOrdering: c_int,
    pub memoryPoolSupportedHandleTypes: c_uint,
    pub deferredMappingCudaArraySupported: c_int,
    pub ipcEventSupported: c_int,
    pub clusterLaunch: c_int,
    pub unifiedFunctionPointers: c_int,
    pub deviceNumaConfig: c_int,
    pub deviceNumaId: c_int,
    pub mpsEnabled: c_int,
    pub hostNumaId: c_int,
    pub gpuPciDeviceID: c_uint,
    pub gpuPciSubsystemID: c_uint,
    pub hostNumaMultinodeIpcSupported: c_int,
    pub reserved: [c_int; 56],
}

/// (attribute, field setter): the fields that are one `CUdevice_attribute` each.
macro_rules! attrs {
    ($p:ident, $get:ident; $( $attr:literal => $field:ident ),* $(,)?) => {
        $( $p.$field = $get($attr)? as _; )*
    };
}

fn fill(p: &mut DeviceProp, dev: c_int) -> Result<(), Err> {
    let get = |a: c_int| -> Result<c_int, Err> {
        let mut v = 0;
        match cudaDeviceGetAttribute(&mut v, a, dev) {
            SUCCESS => Ok(v),
            e => Err(e),
        }
    };
    let r = drv!("cuDeviceGetName" (*mut c_char, c_int, c_int) (p.name.as_mut_ptr(), 256, dev));
    if r != SUCCESS {
        return Err(r);
    }
    let r = drv!("cuDeviceTotalMem" (*mut usize, c_int) (&mut p.totalGlobalMem, dev));
    if r != SUCCESS {
        return Err(r);
    }
    let r = drv!("cuDeviceGetUuid" (*mut [u8; 16], c_int) (&mut p.uuid, dev));
    if r != SUCCESS {
        return Err(r);
    }
    attrs!(p, get;
        8 => sharedMemPerBlock, 12 => regsPerBlock, 10 => warpSize, 11 => memPitch,
        1 => maxThreadsPerBlock, 9 => totalConstMem, 75 => major, 76 => minor,
        14 => textureAlignment, 51 => texturePitchAlignment, 16 => multiProcessorCount,
        18 => integrated, 19 => canMapHostMemory, 21 => maxTexture1D, 52 => maxTextureCubemap,
        55 => maxSurface1D, 66 => maxSurfaceCubemap, 30 => surfaceAlignment,
        31 => concurrentKernels, 32 => ECCEnabled, 33 => pciBusID, 34 => pciDeviceID,
        50 => pciDomainID, 35 => tccDriver, 40 => asyncEngineCount, 41 => unifiedAddressing,
        37 => memoryBusWidth, 38 => l2CacheSize, 108 => persistingL2CacheMaxSize,
        39 => maxThreadsPerMultiProcessor, 78 => streamPrioritiesSupported,
        79 => globalL1CacheSupported, 80 => localL1CacheSupported,
        81 => sharedMemPerMultiprocessor, 82 => regsPerMultiprocessor, 83 => managedMemory,
        84 => isMultiGpuBoard, 85 => multiGpuBoardGroupID, 86 => hostNativeAtomicSupported,
        88 => pageableMemoryAccess, 89 => concurrentManagedAccess,
        90 => computePreemptionSupported, 91 => canUseHostPointerForRegisteredMem,
        95 => cooperativeLaunch, 97 => sharedMemPerBlockOptin,
        100 => pageableMemoryAccessUsesHostPageTables, 101 => directManagedMemAccessFromHost,
        106 => maxBlocksPerMultiProcessor, 109 => accessPolicyMaxWindowSize,
        111 => reservedSharedMemPerBlock, 99 => hostRegisterSupported,
        112 => sparseCudaArraySupported, 113 => hostRegisterReadOnlySupported,
        114 => timelineSemaphoreInteropSupported, 115 => memoryPoolsSupported,
        116 => gpuDirectRDMASupported, 117 => gpuDirectRDMAFlushWritesOptions,
        118 => gpuDirectRDMAWritesOrdering, 119 => memoryPoolSupportedHandleTypes,
        121 => deferredMappingCudaArraySupported, 125 => ipcEventSupported,
        120 => clusterLaunch, 129 => unifiedFunctionPointers, 130 => deviceNumaConfig,
        131 => deviceNumaId, 133 => mpsEnabled, 134 => hostNumaId,
        139 => gpuPciDeviceID, 140 => gpuPciSubsystemID,
    );
    p.maxThreadsDim = [get(2)?, get(3)?, get(4)?];
    p.maxGridSize = [get(5)?, get(6)?, get(7)?];
    p.maxTexture2D = [get(22)?, get(23)?];
    p.maxTexture3D = [get(24)?, get(25)?, get(26)?];
    Ok(())
}

/// `cudaGetDeviceProperties` (exported as `cudaGetDeviceProperties_v2` too, its CUDA 12 name): the
/// CUDA 13 layout from `libcudart.so.13`, CUDA 12's from `libcudart.so.12` (`props12`).
#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDeviceProperties(p: *mut DeviceProp, dev: c_int) -> Err {
    if p.is_null() {
        return ret(INVALID_VALUE);
    }
    // SAFETY: DeviceProp is plain integers and arrays: all-zero is a valid value.
    let mut prop: DeviceProp = unsafe { std::mem::zeroed() };
    if let Err(e) = fill(&mut prop, dev) {
        return ret(e);
    }
    if runtime_major() == 12 {
        // libcudart.so.12: its callers were built against CUDA 12's layout.
        match crate::props12::from13(&prop, dev) {
            // SAFETY: non-null output pointer to a CUDA 12 cudaDeviceProp (API contract).
            Ok(p12) => unsafe { (p as *mut crate::props12::DeviceProp12).write(p12) },
            Err(e) => return ret(e),
        }
        return SUCCESS;
    }
    // SAFETY: non-null output pointer to a cudaDeviceProp (API contract).
    unsafe { p.write(prop) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaGetDeviceProperties_v2(p: *mut DeviceProp, dev: c_int) -> Err {
    cudaGetDeviceProperties(p, dev)
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> Err {
    drv!("cuCtxGetStreamPriorityRange" (*mut c_int, *mut c_int) (least, greatest))
}

#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceGetPCIBusId(buf: *mut c_char, len: c_int, dev: c_int) -> Err {
    drv!("cuDeviceGetPCIBusId" (*mut c_char, c_int, c_int) (buf, len, dev))
}

/// The simulated devices have no peer access: each process models only its own device.
#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceCanAccessPeer(can: *mut c_int, dev: c_int, peer: c_int) -> Err {
    if can.is_null() {
        return ret(INVALID_VALUE);
    }
    let mut n = 0;
    let r = crate::cudaGetDeviceCount(&mut n);
    if r != SUCCESS {
        return r;
    }
    if !(0..n).contains(&dev) || !(0..n).contains(&peer) {
        return ret(INVALID_DEVICE);
    }
    // SAFETY: non-null output pointer.
    unsafe { *can = 0 };
    SUCCESS
}

/// Enabling access to oneself, or to a device that does not exist, is an invalid device; to
/// another device, not supported (see cudaDeviceCanAccessPeer).
#[unsafe(no_mangle)]
pub extern "C" fn cudaDeviceEnablePeerAccess(peer: c_int, flags: c_uint) -> Err {
    if flags != 0 {
        return ret(INVALID_VALUE);
    }
    let (mut n, mut current) = (0, 0);
    let r = crate::cudaGetDeviceCount(&mut n);
    if r != SUCCESS {
        return r;
    }
    let r = crate::cudaGetDevice(&mut current);
    if r != SUCCESS {
        return r;
    }
    if peer == current || !(0..n).contains(&peer) {
        return ret(INVALID_DEVICE);
    }
    ret(PEER_ACCESS_UNSUPPORTED)
}

#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::runtime::sys as rt;
    use std::mem::{offset_of, size_of};

    #[test]
    fn device_prop_layout() {
        assert_eq!(size_of::<DeviceProp>(), size_of::<rt::cudaDeviceProp>());
        macro_rules! same {
            ($($f:ident),*) => {
                $( assert_eq!(offset_of!(DeviceProp, $f), offset_of!(rt::cudaDeviceProp, $f), stringify!($f)); )*
            };
        }
        same!(
            name,
            uuid,
            totalGlobalMem,
            sharedMemPerBlock,
            warpSize,
            maxThreadsPerBlock,
            maxThreadsDim,
            maxGridSize,
            major,
            minor,
            multiProcessorCount,
            maxTexture2D,
            surfaceAlignment,
            pciBusID,
            l2CacheSize,
            maxThreadsPerMultiProcessor,
            sharedMemPerMultiprocessor,
            regsPerMultiprocessor,
            sharedMemPerBlockOptin,
            reservedSharedMemPerBlock,
            memoryPoolSupportedHandleTypes,
            gpuPciDeviceID,
            hostNumaMultinodeIpcSupported,
            reserved
        );
    }
}
