// libnvshmem_host.so.3 of the simulated GPU: its real soname, and a not-supported stub for every name torch
// imports from it (simgpu/names/libnvshmem_host.so.3.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvshmem_host.so.3");
    simgpu_stubgen::generate("libnvshmem_host.so.3", std::path::Path::new("src"));
}
