// libcusparseLt.so.0 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libcusparseLt.so.0.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcusparseLt.so.0");
    simgpu_stubgen::generate("libcusparseLt.so.0", std::path::Path::new("src"));
}
