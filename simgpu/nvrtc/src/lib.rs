//! `libnvrtc.so.13` of the simulated GPU. NVRTC is not simulated: the library exists so that torch loads,
//! and every function it imports answers with NVRTC's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
