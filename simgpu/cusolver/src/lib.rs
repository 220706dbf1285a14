//! `libcusolver.so.12` of the simulated GPU. cuSOLVER is not simulated: the library exists so that torch loads,
//! and every function it imports answers with cuSOLVER's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
