//! What the runtime tells about an address (device, pinned host, or pageable host memory) and the
//! copies beyond the plain ones: 2D and peer copies.

use crate::*;

/// `cudaPointerAttributes` (CUDA 13.0-13.3: with 8 reserved longs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PointerAttributes {
    pub type_: c_int,
    pub device: c_int,
    pub devicePointer: *mut c_void,
    pub hostPointer: *mut c_void,
    pub reserved: [std::ffi::c_long; 8],
}

// cudaMemoryType.
const UNREGISTERED: c_int = 0;
const HOST: c_int = 1;
const DEVICE: c_int = 2;

/// Since CUDA 11, memory the runtime does not know is `cudaMemoryTypeUnregistered` (with
/// success), not an error.
#[unsafe(no_mangle)]
pub extern "C" fn cudaPointerGetAttributes(a: *mut PointerAttributes, p: *const c_void) -> Err {
    if a.is_null() {
        return ret(INVALID_VALUE);
    }
    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2, DEVICE_ORDINAL 9.
    let attrs: [c_int; 2] = [2, 9];
    let (mut ty, mut ord): (c_uint, c_int) = (0, -2);
    let mut data: [*mut c_void; 2] = [
        &mut ty as *mut c_uint as *mut c_void,
        &mut ord as *mut c_int as *mut c_void,
    ];
    let r = drv!("cuPointerGetAttributes" (c_uint, *const c_int, *mut *mut c_void, *const c_void)
        (2, attrs.as_ptr(), data.as_mut_ptr(), p));
    if r != SUCCESS {
        return r;
    }
    // CUmemorytype: HOST 1, DEVICE 2.
    let (type_, device, dptr, hptr) = match ty {
        2 => (DEVICE, ord, p as *mut c_void, std::ptr::null_mut()),
        1 => (HOST, ord, p as *mut c_void, p as *mut c_void),
        _ => (UNREGISTERED, -2, std::ptr::null_mut(), p as *mut c_void),
    };
    let v = PointerAttributes {
        type_,
        device,
        devicePointer: dptr,
        hostPointer: hptr,
        reserved: [0; 8],
    };
    // SAFETY: non-null output pointer (API contract).
    unsafe { a.write(v) };
    SUCCESS
}

/// CUDA_MEMCPY2D (cuda.h): the driver's description of a 2D copy.
#[repr(C)]
struct Memcpy2D {
    src_x: usize,
    src_y: usize,
    src_type: c_uint,
    src_host: *const c_void,
    src_device: u64,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x: usize,
    dst_y: usize,
    dst_type: c_uint,
    dst_host: *mut c_void,
    dst_device: u64,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width: usize,
    height: usize,
}

#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub extern "C" fn cudaMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: c_int,
    s: Handle,
) -> Err {
    if !(0..=4).contains(&kind) {
        return ret(INVALID_MEMCPY_DIRECTION);
    }
    if width > dpitch || width > spitch {
        return ret(INVALID_PITCH_VALUE);
    }
    // With unified addressing both sides are CU_MEMORYTYPE_UNIFIED (4): the driver tells.
    let c = Memcpy2D {
        src_x: 0,
        src_y: 0,
        src_type: 4,
        src_host: src,
        src_device: src as u64,
        src_array: std::ptr::null_mut(),
        src_pitch: spitch,
        dst_x: 0,
        dst_y: 0,
        dst_type: 4,
        dst_host: dst,
        dst_device: dst as u64,
        dst_array: std::ptr::null_mut(),
        dst_pitch: dpitch,
        width,
        height,
    };
    drv!("cuMemcpy2DAsync" (*const Memcpy2D, Handle) (&c, s))
}

/// A peer copy within the process's device is a device copy; between devices, not supported
/// (each process models only its own device).
#[unsafe(no_mangle)]
pub extern "C" fn cudaMemcpyPeerAsync(
    dst: *mut c_void,
    dst_dev: c_int,
    src: *const c_void,
    src_dev: c_int,
    n: usize,
    s: Handle,
) -> Err {
    let mut current = 0;
    let r = crate::cudaGetDevice(&mut current);
    if r != SUCCESS {
        return r;
    }
    if dst_dev != current || src_dev != current {
        return ret(PEER_ACCESS_UNSUPPORTED);
    }
    cudaMemcpyAsync(dst, src, n, 3, s)
}

#[cfg(test)]
mod abi_crosscheck {
    use super::*;
    use cudarc::runtime::sys as rt;
    use std::mem::{offset_of, size_of};

    #[test]
    fn pointer_attributes_layout() {
        assert_eq!(
            size_of::<PointerAttributes>(),
            size_of::<rt::cudaPointerAttributes>()
        );
        assert_eq!(
            offset_of!(PointerAttributes, hostPointer),
            offset_of!(rt::cudaPointerAttributes, hostPointer)
        );
        assert_eq!(
            rt::cudaMemoryType::cudaMemoryTypeUnregistered as i32,
            UNREGISTERED
        );
        assert_eq!(rt::cudaMemoryType::cudaMemoryTypeHost as i32, HOST);
        assert_eq!(rt::cudaMemoryType::cudaMemoryTypeDevice as i32, DEVICE);
    }

    #[test]
    fn memcpy2d_layout() {
        use cudarc::driver::sys as drv;
        assert_eq!(size_of::<Memcpy2D>(), size_of::<drv::CUDA_MEMCPY2D>());
        assert_eq!(
            offset_of!(Memcpy2D, dst_pitch),
            offset_of!(drv::CUDA_MEMCPY2D, dstPitch)
        );
        assert_eq!(
            offset_of!(Memcpy2D, height),
            offset_of!(drv::CUDA_MEMCPY2D, Height)
        );
    }
}
