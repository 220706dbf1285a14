// libnvrtc.so.13 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libnvrtc.so.13.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvrtc.so.13");
    simgpu_stubgen::generate("libnvrtc.so.13", std::path::Path::new("src"));
}
