// The simulated driver answers to the real driver's soname.
fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic): the
    // addresses it hands out (cuGetProcAddress, dispatch tables) are its own, never a preloaded
    // interposer's definition of the same name.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
