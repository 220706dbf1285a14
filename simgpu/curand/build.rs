// libcurand.so.10 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libcurand.so.10.txt; none for torch 2.11, which only links it).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcurand.so.10");
    simgpu_stubgen::generate("libcurand.so.10", std::path::Path::new("src"));
}
