// The simulated runtime answers to the real runtime's soname and finds libcuda.so.1 beside it.
fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic): the
    // addresses it hands out (cuGetProcAddress, dispatch tables) are its own, never a preloaded
    // interposer's definition of the same name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.12");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
}
