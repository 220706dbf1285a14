//! `libnvshmem_host.so.3` of the simulated GPU. NVSHMEM is not simulated: the library exists so that torch loads,
//! and every function it imports answers with NVSHMEM's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
