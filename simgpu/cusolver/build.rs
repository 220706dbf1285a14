// libcusolver.so.12 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libcusolver.so.12.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcusolver.so.12");
    simgpu_stubgen::generate("libcusolver.so.12", std::path::Path::new("src"));
}
