// libcublas.so.13 of the simulated GPU: its real soname, libcublasLt.so.13 found beside it (as the
// real cuBLAS needs cuBLASLt), and a not-supported stub for every name torch imports that it does
// not simulate (simgpu/names/libcublas.so.13.txt).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublas.so.13");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    simgpu_stubgen::generate("libcublas.so.13", std::path::Path::new("src"));
}
