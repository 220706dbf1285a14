// libcufile.so.0 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libcufile.so.0.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcufile.so.0");
    simgpu_stubgen::generate("libcufile.so.0", std::path::Path::new("src"));
}
