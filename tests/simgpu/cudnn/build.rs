// The simulated cuDNN answers to the real soname and finds libcuda.so.1 beside it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudnn.so.9");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
}
