// libnvidia-ml.so.1 of the simulated GPU: NVML's real soname; like NVIDIA's libraries it binds its
// own functions internally (-Bsymbolic).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
