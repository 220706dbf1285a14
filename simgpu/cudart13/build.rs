// The simulated runtime answers to the real runtime's soname and finds libcuda.so.1 beside it.
// Every name torch imports from it is exported: what the runtime (simgpu-cudart) does not define
// answers cudaErrorNotSupported (simgpu-stubgen).
fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic): the
    // addresses it hands out (cuGetProcAddress, dispatch tables) are its own, never a preloaded
    // interposer's definition of the same name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    simgpu_stubgen::generate("libcudart.so.13", std::path::Path::new("../cudart/src"));
}
