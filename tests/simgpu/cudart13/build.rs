// The simulated runtime answers to the real runtime's soname and finds libcuda.so.1 beside it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudart.so.13");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
}
