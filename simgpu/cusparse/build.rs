// libcusparse.so.12 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libcusparse.so.12.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcusparse.so.12");
    simgpu_stubgen::generate("libcusparse.so.12", std::path::Path::new("src"));
}
