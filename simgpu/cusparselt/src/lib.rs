//! `libcusparseLt.so.0` of the simulated GPU. cuSPARSELt is not simulated: the library exists so that torch loads,
//! and every function it imports answers with cuSPARSELt's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
