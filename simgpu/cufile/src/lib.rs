//! `libcufile.so.0` of the simulated GPU. cuFile is not simulated: the library exists so that torch loads,
//! and every function it imports answers with cuFile's not-supported status (see simgpu-stubgen).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));
