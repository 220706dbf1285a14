// libcublasLt.so.13 of the simulated GPU: its real soname, libcuda.so.1 found beside it, and a
// not-supported stub for every name torch imports that it does not simulate
// (simgpu/names/libcublasLt.so.13.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublasLt.so.13");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    simgpu_stubgen::generate("libcublasLt.so.13", std::path::Path::new("src"));
}
