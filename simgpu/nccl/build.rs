// libnccl.so.2 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libnccl.so.2.txt) that src/ does not define.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    // Like NVIDIA's libraries, it binds its own functions internally.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    simgpu_stubgen::generate("libnccl.so.2", std::path::Path::new("src"));
}
