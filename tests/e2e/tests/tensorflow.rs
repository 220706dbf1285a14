//! Unmodified TensorFlow (the wheel scripts/setup-tf.sh installs into `.venv-tf`) on the
//! simulated GPU: it opens the simulated libraries by soname (libcuda.so.1, libnvidia-ml.so.1,
//! libcudart.so.12, cuBLAS 12, cuDNN 9, ...), lists the simulated H100, and runs an element-wise
//! add on it: Eigen kernels registered through the runtime and an MLIR-generated kernel loaded
//! with cuModuleLoadData from an LZ4 fatbin, launched with cuLaunchKernel. Without Marmoset
//! (`--no-shim`) and under it (`--policy none`).

use marmoset_e2e::*;
use std::path::PathBuf;
use std::process::Command;

/// The Python of `.venv-tf/`. A missing venv fails the test with the command that makes it:
/// TensorFlow tests never skip.
fn tf_python() -> PathBuf {
    let py = root().join(".venv-tf/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup-tf.sh",
        py.display()
    );
    py
}

const SCRIPT: &str = "import tensorflow as tf; print(tf.config.list_physical_devices('GPU')); \
                      x = tf.ones((4,4)); print((x + 1).shape)";

fn run_add(marmoset_args: &[&str], name: &str) {
    let py = tf_python();
    let report = temp_path(&format!("tf-{name}-report.json"));
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim"]).args(marmoset_args).arg("--");
    c.arg(py).args(["-c", SCRIPT]);
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TF_", "CUDA_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", &report)
        .env("SIMGPU_LOG", "debug");
    let out = c.output().expect("run marmoset");
    ok(&out);
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(
        so.contains("PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')"),
        "TensorFlow lists no GPU:\n{so}\n{se}"
    );
    assert!(
        se.contains("NVIDIA H100 80GB HBM3 (simulated)"),
        "TensorFlow did not create its device on the simulated H100:\n{se}"
    );
    assert!(so.contains("(4, 4)"), "{so}\n{se}");
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no simulator report ({e}):\n{so}\n{se}"));
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let kernels = r["kernels"].as_u64().unwrap_or(0);
    assert!(
        kernels >= 1,
        "the add ran no kernel on the simulated GPU:\n{text}"
    );
    assert!(r["sticky_error"].is_null(), "{text}");
    // The add itself is TensorFlow's MLIR-generated kernel, loaded with cuModuleLoadData from
    // an LZ4 fatbin and launched with cuLaunchKernel (named at SIMGPU_LOG=debug).
    assert!(
        se.contains("simgpu: kernel AddV2_GPU_DT_FLOAT_DT_FLOAT_kernel grid"),
        "the add was not TensorFlow's loaded kernel:\n{se}"
    );
}

#[test]
fn tensorflow_lists_the_simulated_gpu_and_adds_on_it_without_marmoset() {
    run_add(&["--no-shim"], "noshim");
}

#[test]
fn tensorflow_adds_on_the_simulated_gpu_under_marmoset() {
    run_add(&["--policy", "none"], "shim");
}
