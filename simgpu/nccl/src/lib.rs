//! `libnccl.so.2` of the simulated GPU. NCCL is not simulated: the library exists so that torch loads,
//! and every function it imports answers with NCCL's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
