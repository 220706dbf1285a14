// The simulated driver answers to the real driver's soname, and exports every name torch imports
// from it (what src/ does not define answers CUDA_ERROR_NOT_SUPPORTED: simgpu-stubgen).
fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic): the
    // addresses it hands out (cuGetProcAddress, dispatch tables) are its own, never a preloaded
    // interposer's definition of the same name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    simgpu_stubgen::generate("libcuda.so.1", std::path::Path::new("src"));
}
