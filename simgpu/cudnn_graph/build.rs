// The simulated cuDNN's graph library answers to the real soname and finds its siblings and
// libcuda.so.1 beside it.
fn main() {
    // Like NVIDIA's libraries, it binds its own functions internally (-Bsymbolic).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudnn_graph.so.9");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
}
