//! `libcurand.so.10` of the simulated GPU. cuRAND is not simulated: the library exists so that
//! torch loads, and every function it imports answers with cuRAND's status for a feature the
//! device lacks (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
