//! Who is calling: whether an address lies in one of the CUDA-family libraries (the CUDA runtime,
//! driver, cuDNN, cuBLAS and their kin, and what they load). Those libraries find their own
//! functions by name: NVIDIA's libcudnn.so.9 forwards every API call to the function
//! `dlsym(sub_library, "exact name")` returns, and libcudnn_graph.so reaches the driver with
//! `dlsym(libcuda, "cuGetProcAddress_v2")`. Handing them our hook would make the hook forward to
//! the very library that called it, without end, so their look-ups get the real function.

use std::ffi::{CStr, c_int, c_void};

/// File-name prefixes of the CUDA-family libraries (NVIDIA's, and the simulated GPU's own files).
const FAMILY: &[&[u8]] = &[
    b"libcuda.so",
    b"libcudart",
    b"libcudnn",
    b"libcublas",
    b"libcufft",
    b"libcufile",
    b"libcurand",
    b"libcusolver",
    b"libcusparse",
    b"libcupti",
    b"libnvrtc",
    b"libnvJitLink",
    b"libnvjitlink",
    b"libnccl",
    b"libnvshmem",
    b"libnvidia-",
    b"libnvperf",
    b"libnvToolsExt",
    b"libsimgpu_",
];

/// Whether a library file (a path or a bare name) is one of the CUDA-family libraries.
pub fn is_family_file(path: &[u8]) -> bool {
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    FAMILY.iter().any(|p| base.starts_with(p))
}

struct Search {
    addr: usize,
    family: Option<bool>,
    /// Whether the object holding `addr` is NCCL's (the real one, or the simulated GPU's).
    nccl: bool,
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the callback, and data is
    // the &mut Search given to it below.
    let (info, s) = unsafe { (&*info, &mut *(data as *mut Search)) };
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr holds dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type != libc::PT_LOAD {
            continue;
        }
        let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
        if s.addr >= lo && s.addr < lo + ph.p_memsz as usize {
            let name = if info.dlpi_name.is_null() {
                &b""[..]
            } else {
                // SAFETY: a NUL-terminated path owned by the loader.
                unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
            };
            s.family = Some(is_family_file(name));
            let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
            s.nccl = base.starts_with(b"libnccl") || base.starts_with(b"libsimgpu_nccl");
            return 1;
        }
    }
    0
}

/// Whether `addr` (a return address, or a function pointer) lies in a CUDA-family library.
/// Unknown addresses (0, or outside every loaded object) are not.
pub fn in_family(addr: usize) -> bool {
    search(addr).family.unwrap_or(false)
}

fn search(addr: usize) -> Search {
    let mut s = Search {
        addr,
        family: None,
        nccl: false,
    };
    if addr != 0 {
        // SAFETY: visit only reads the loader's structures during the walk and writes into `s`.
        unsafe { libc::dl_iterate_phdr(Some(visit), &mut s as *mut Search as *mut c_void) };
    }
    s
}

/// The driver functions NCCL gets Marmoset's wrappers of, though it is a CUDA-family library:
/// the VMM calls it maps its buffers with. They forward to the real function and only count
/// what NCCL maps against the budget (crate::virt::memory::foreign), so they cannot recurse.
const COUNTED_FOR_NCCL: &[&[u8]] = &[b"cuMemCreate", b"cuMemRelease"];

/// Whether a caller at `caller` keeps the real function `name`: a caller inside a CUDA-family
/// library does, except NCCL for the functions Marmoset counts.
pub fn keeps_real(caller: usize, name: &[u8]) -> bool {
    let s = search(caller);
    s.family.unwrap_or(false) && !(s.nccl && COUNTED_FOR_NCCL.contains(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_names() {
        for yes in [
            &b"/usr/lib/x86_64-linux-gnu/libcuda.so.1"[..],
            b"libcudnn_graph.so.9",
            b"/venv/nvidia/cublas/lib/libcublasLt.so.13",
            b"target/release/libsimgpu_cudnn.so",
            b"libnvidia-ptxjitcompiler.so.1",
        ] {
            assert!(is_family_file(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"/venv/torch/lib/libtorch_cuda.so"[..],
            b"/usr/lib/libc.so.6",
            b"libmarmoset.so",
            b"/opt/cuda_tools/libtool.so",
            b"",
        ] {
            assert!(!is_family_file(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn this_test_binary_is_not_in_the_family() {
        assert!(!in_family(family_names as *const () as usize));
        assert!(!in_family(0));
        // libc's own code is found, and is not CUDA.
        assert!(!in_family(libc::malloc as *const () as usize));
    }
}
