//! Work that a math library of the simulated GPU (cuBLAS, cuBLASLt) runs as its own kernels.

use super::*;

/// Places a `seconds`-long kernel of a math library on `stream`'s compute engine, counted as a
/// kernel launch (a GEMM is a kernel to the device, not a cuDNN call); `sync` makes the host wait.
#[unsafe(no_mangle)]
pub extern "C" fn simgpu_submit_kernel(stream: Handle, seconds: f64, sync: c_int) -> CUresult {
    // The library launches through its own runtime, which binds a context first.
    devices::bind_as_runtime();
    with(|d| {
        if !d.valid_stream(stream as u64) {
            return Err(INVALID_HANDLE);
        }
        d.count_launch()?;
        d.counters.kernels += 1;
        d.counters.library_kernels += 1;
        let cost = d.profile.launch();
        let (_, end) = d.issue(stream as u64, ENGINE_COMPUTE, seconds, cost)?;
        if sync != 0 {
            d.host_wait_until(end);
        }
        Ok(())
    })
}
