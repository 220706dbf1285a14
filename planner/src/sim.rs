//! The simulated GPU's libraries: which built file answers to which real soname.

/// (name a program loads, file cargo builds). The unversioned names are for linking (`-lcudart`).
pub const LIBRARIES: &[(&str, &str)] = &[
    ("libcuda.so.1", "libsimgpu_cuda.so"),
    ("libcuda.so", "libsimgpu_cuda.so"),
    ("libcudart.so.12", "libsimgpu_cudart12.so"),
    ("libcudart.so.13", "libsimgpu_cudart13.so"),
    ("libcudart.so", "libsimgpu_cudart13.so"),
    // cuDNN 9 as NVIDIA ships it: a dispatcher and the sub-libraries it opens by soname.
    ("libcudnn.so.9", "libsimgpu_cudnn.so"),
    ("libcudnn.so", "libsimgpu_cudnn.so"),
    ("libcudnn_graph.so.9", "libsimgpu_cudnn_graph.so"),
    ("libcudnn_ops.so.9", "libsimgpu_cudnn_ops.so"),
    ("libcudnn_cnn.so.9", "libsimgpu_cudnn_cnn.so"),
    ("libcublas.so.13", "libsimgpu_cublas.so"),
    ("libcublas.so", "libsimgpu_cublas.so"),
    ("libcublasLt.so.13", "libsimgpu_cublaslt.so"),
    ("libcublasLt.so", "libsimgpu_cublaslt.so"),
    // NVML: TensorFlow initialises it after cuInit, and lists no GPU without it.
    ("libnvidia-ml.so.1", "libsimgpu_nvml.so"),
    // TensorFlow 2.21 is built for CUDA 12 and registers no GPU unless it can open these CUDA 12
    // sonames too; the same libraries answer them (cuBLAS keeps its ABI from 12 to 13).
    ("libcublas.so.12", "libsimgpu_cublas.so"),
    ("libcublasLt.so.12", "libsimgpu_cublaslt.so"),
    ("libcufft.so.11", "libsimgpu_cufft.so"),
    ("libcusolver.so.11", "libsimgpu_cusolver.so"),
    ("libcupti.so.12", "libsimgpu_cupti.so"),
    // Not simulated: they exist so that torch loads, and answer not-supported (simgpu-stubgen).
    ("libcufft.so.12", "libsimgpu_cufft.so"),
    ("libcufile.so.0", "libsimgpu_cufile.so"),
    // torch 2.11 names it in DT_NEEDED and imports nothing from it.
    ("libcurand.so.10", "libsimgpu_curand.so"),
    ("libcupti.so.13", "libsimgpu_cupti.so"),
    ("libcusolver.so.12", "libsimgpu_cusolver.so"),
    ("libcusparse.so.12", "libsimgpu_cusparse.so"),
    ("libcusparseLt.so.0", "libsimgpu_cusparselt.so"),
    ("libnccl.so.2", "libsimgpu_nccl.so"),
    ("libnvrtc.so.13", "libsimgpu_nvrtc.so"),
    ("libnvshmem_host.so.3", "libsimgpu_nvshmem.so"),
];

/// The built files a simulated-GPU directory needs, each once.
pub fn built_files() -> Vec<&'static str> {
    let mut v: Vec<&str> = LIBRARIES.iter().map(|(_, f)| *f).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The profile names built into the simulator.
pub fn profiles() -> Vec<&'static str> {
    simgpu_model::BUILTIN.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_real_soname_is_served() {
        for so in [
            "libcuda.so.1",
            "libcudart.so.12",
            "libcudart.so.13",
            "libcudnn.so.9",
            "libcublas.so.13",
            "libcublasLt.so.13",
            "libcufft.so.12",
            "libnvshmem_host.so.3",
            "libcudnn_graph.so.9",
            "libcudnn_ops.so.9",
            "libcudnn_cnn.so.9",
            "libnvidia-ml.so.1",
            // What TensorFlow 2.21 (CUDA 12) opens before it registers a GPU.
            "libcudart.so.12",
            "libcublas.so.12",
            "libcublasLt.so.12",
            "libcufft.so.11",
            "libcusolver.so.11",
        ] {
            assert!(LIBRARIES.iter().any(|(n, _)| *n == so), "{so}");
        }
        // Every list of names torch imports (simgpu/names) has a library that serves it.
        let names = concat!(env!("CARGO_MANIFEST_DIR"), "/../simgpu/names");
        for e in std::fs::read_dir(names).unwrap().flatten() {
            let file = e.file_name().into_string().unwrap();
            let so = file.strip_suffix(".txt").unwrap();
            assert!(
                LIBRARIES.iter().any(|(n, _)| *n == so),
                "{so} is not served"
            );
        }
        assert_eq!(built_files().len(), 20);
        assert!(profiles().contains(&"h100"));
    }
}
