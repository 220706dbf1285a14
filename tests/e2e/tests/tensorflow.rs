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

/// Runs `examples/tf/<script>` with the venv's Python: on the simulated GPU through `marmoset
/// run --sim <marmoset_args>`, or, with `None`, directly on TensorFlow's CPU (no GPU visible).
/// Returns stdout; a failed run fails the test with its output.
fn run_script(marmoset_args: Option<&[&str]>, script: &str, env: &[(&str, &str)]) -> String {
    let py = tf_python();
    let path = root().join("examples/tf").join(script);
    let mut c = match marmoset_args {
        Some(args) => {
            let mut c = Command::new(marmoset());
            c.args(["run", "--sim"]).args(args).arg("--").arg(&py);
            c
        }
        None => {
            let mut c = Command::new(&py);
            c.env("CUDA_VISIBLE_DEVICES", "");
            c
        }
    };
    c.arg(path);
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TF_", "CUDA_"]
            .iter()
            .any(|p| k.starts_with(p))
            && !(marmoset_args.is_none() && k == "CUDA_VISIBLE_DEVICES")
        {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let out = c.output().expect("run the script");
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{script} failed:\n{so}\n{se}");
    so
}

/// The `loss <value>` lines of a run (one per epoch) and its final step count.
fn losses_and_steps(out: &str) -> (Vec<f64>, u64) {
    let losses: Vec<f64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("loss "))
        .map(|v| v.trim().parse().unwrap())
        .collect();
    let steps = out
        .lines()
        .find_map(|l| l.strip_prefix("iterations "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no step count:\n{out}"));
    (losses, steps)
}

/// Three epochs of four steps, TF32 off: the simulated H100 would round the GEMMs' inputs to
/// TF32 as TensorFlow asks of an Ampere or later GPU, which the CPU does not.
const FIT_ENV: &[(&str, &str)] = &[("EPOCHS", "3"), ("STEPS", "4"), ("TF32", "0")];

/// A Keras Dense model's fit (jit_compile=False) in data mode ends with the loss TensorFlow's
/// CPU gives the same seeded model: the GEMMs are the simulated cuBLAS's; everything else
/// (Philox initialisation, bias, ReLU compiled at run time, softmax cross-entropy, the SGD
/// update, the step counter) is TensorFlow's own kernels computed on the host. Both compute in
/// float32 and differ only in summation order and the last bit of exp/log (relative 1e-6
/// here): 1e-4 over 12 steps holds those and fails a wrong kernel (the ReLU left uncomputed
/// moves the first epoch's loss by 1.4e-3, DivNoNan's operands swapped by a factor 7).
fn dense_fit_matches_the_cpu(marmoset_args: &[&str]) {
    let mut env = FIT_ENV.to_vec();
    env.push(("SIMGPU_MODE", "data"));
    let gpu = run_script(Some(marmoset_args), "dense_fit.py", &env);
    assert!(gpu.contains("/device:GPU:0"), "no GPU:\n{gpu}");
    let cpu = run_script(None, "dense_fit.py", FIT_ENV);
    assert!(
        !cpu.contains("/device:GPU:0"),
        "the reference ran on a GPU:\n{cpu}"
    );
    let (g, gs) = losses_and_steps(&gpu);
    let (c, cs) = losses_and_steps(&cpu);
    assert_eq!((gs, cs), (12, 12), "{gpu}\n{cpu}");
    assert_eq!(g.len(), 3, "{gpu}");
    assert_eq!(g.len(), c.len(), "{gpu}\n{cpu}");
    for (a, b) in g.iter().zip(&c) {
        assert!(
            ((a - b) / b).abs() < 1e-4,
            "GPU loss {a} vs CPU {b}:\n{gpu}\n{cpu}"
        );
    }
    // Training moved the loss.
    assert!(g[2] < g[0] - 0.1, "{g:?}");
}

#[test]
fn keras_dense_fit_in_data_mode_matches_the_cpu_without_marmoset() {
    dense_fit_matches_the_cpu(&["--no-shim"]);
}

#[test]
fn keras_dense_fit_in_data_mode_matches_the_cpu_under_marmoset() {
    dense_fit_matches_the_cpu(&["--policy", "none"]);
}

/// In shape mode only small allocations hold bytes; TensorFlow's default allocator takes the
/// whole device in one allocation, so it runs with the driver's memory pools, where every
/// tensor is an allocation of its own. The fit completes, and its step counter (an int64
/// variable TensorFlow adds to on the GPU and Keras reads back) counts every step.
fn dense_fit_completes_in_shape_mode(marmoset_args: &[&str]) {
    let env = [
        ("SIMGPU_MODE", "shape"),
        ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
        ("EPOCHS", "2"),
        ("STEPS", "4"),
    ];
    let out = run_script(Some(marmoset_args), "dense_fit.py", &env);
    let (losses, steps) = losses_and_steps(&out);
    assert_eq!(steps, 8, "{out}");
    assert_eq!(losses.len(), 2, "{out}");
    assert!(losses.iter().all(|l| l.is_finite()), "{out}");
}

#[test]
fn keras_dense_fit_completes_in_shape_mode_without_marmoset() {
    dense_fit_completes_in_shape_mode(&["--no-shim"]);
}

#[test]
fn keras_dense_fit_completes_in_shape_mode_under_marmoset() {
    dense_fit_completes_in_shape_mode(&["--policy", "none"]);
}

/// Element-wise ops on the simulated GPU against TensorFlow's CPU, operand order told apart,
/// same-shape and broadcast (examples/tf/op_check.py). One case is known not to be computed:
/// int64 FloorDiv of rank 2, whose kernel takes four descriptors for two operands.
#[test]
fn elementwise_ops_on_the_gpu_agree_with_the_cpu() {
    let out = run_script(
        Some(&["--no-shim"]),
        "op_check.py",
        &[("SIMGPU_MODE", "data")],
    );
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    let known = "FAIL FloorDiv int64 (3, 4) (3, 1)";
    assert!(
        fails.iter().all(|l| l.starts_with(known)),
        "unexpected failures:\n{out}"
    );
    let passed: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("op_check: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary:\n{out}"));
    assert!(passed >= 190, "{out}");
}

/// TensorFlow's fused convolution graph, `relu(conv + 0 * z + bias)`, whose absent side input
/// `z` comes as NULL in the variant pack (the real cuDNN 9 runs it; a pointwise operand scaled
/// by 0 is not read), gives the convolution + bias + ReLU of the legacy API.
#[test]
fn tensorflows_fused_convolution_graph_runs_with_a_null_side_input() {
    let o = run_sim("h100", &[], "backend_fused", &["side_input"]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["side_input"], "1", "{v:?}");
    let err: f64 = v["max_err"].parse().unwrap();
    assert!(err < 1e-5, "{err}");
    assert!(v["nonzero"].parse::<u32>().unwrap() > 50, "{v:?}");
    assert!(v["zeros"].parse::<u32>().unwrap() > 50, "{v:?}");
}

/// A Keras stack of Conv2D (with bias) + ReLU + max pooling blocks, global average pooling and a
/// Dense head fits five steps in shape mode: TensorFlow's fused convolution graphs forward and
/// its backward convolutions run on the simulated cuDNN backend.
#[test]
fn keras_conv_fit_completes_in_shape_mode() {
    let env = [
        ("SIMGPU_MODE", "shape"),
        ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
        ("BN", "0"),
        ("STEPS", "5"),
    ];
    let out = run_script(Some(&["--no-shim"]), "conv_fit.py", &env);
    let (losses, steps) = losses_and_steps(&out);
    assert_eq!(steps, 5, "{out}");
    assert!(losses.iter().all(|l| l.is_finite()), "{out}");
}

/// The same convolutional stack in data mode ends five steps at TensorFlow's CPU loss (TF32
/// off; within 1e-4 as the Dense fit): cuDNN's convolutions and pooling are the simulated
/// library's, TensorFlow's layout transposes, bias gradients, pooling reductions and CUB's
/// segmented sums computed on the host.
#[test]
fn keras_conv_fit_in_data_mode_matches_the_cpu() {
    let env = [("BN", "0"), ("STEPS", "5"), ("TF32", "0")];
    let mut gpu_env = env.to_vec();
    gpu_env.push(("SIMGPU_MODE", "data"));
    let gpu = run_script(Some(&["--no-shim"]), "conv_fit.py", &gpu_env);
    let cpu = run_script(None, "conv_fit.py", &env);
    let (g, gs) = losses_and_steps(&gpu);
    let (c, cs) = losses_and_steps(&cpu);
    assert_eq!((gs, cs), (5, 5), "{gpu}\n{cpu}");
    assert_eq!((g.len(), c.len()), (1, 1), "{gpu}\n{cpu}");
    assert!(
        ((g[0] - c[0]) / c[0]).abs() < 1e-4,
        "GPU loss {} vs CPU {}",
        g[0],
        c[0]
    );
}

/// `marmoset run --sim <marmoset_args> -- .venv-tf/bin/python examples/tf/<script> <args>` in
/// shape mode with the driver's memory pools (TF_GPU_ALLOCATOR=cuda_malloc_async: one allocation
/// per tensor); `marmoset run` gives TensorFlow setup-tf.sh's libdevice (XLA_FLAGS), which
/// BatchNormalization's run-time compiled kernels need. Checks that every step ran on the GPU
/// with a finite loss; returns stdout and the simulator's report.
fn train_model(
    marmoset_args: &[&str],
    script: &str,
    args: &[&str],
    steps: u64,
    name: &str,
) -> (String, serde_json::Value) {
    let py = tf_python();
    let libdevice = root().join(".venv-tf/cuda-data/nvvm/libdevice/libdevice.10.bc");
    assert!(
        libdevice.is_file(),
        "{} is missing: run scripts/setup-tf.sh",
        libdevice.display()
    );
    let report = temp_path(&format!("tf-{name}-report.json"));
    let _ = std::fs::remove_file(&report);
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim"])
        .args(marmoset_args)
        .arg("--")
        .arg(&py);
    c.arg(root().join("examples/tf").join(script));
    c.args(["--steps", &steps.to_string()]).args(args);
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TF_", "CUDA_", "XLA_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", &report)
        .env("TF_GPU_ALLOCATOR", "cuda_malloc_async");
    let out = c.output().expect("run marmoset");
    let (so, se) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{script} failed:\n{so}\n{se}");
    assert!(so.contains("device: /physical_device:GPU:0"), "{so}\n{se}");
    let losses: Vec<f64> = so
        .lines()
        .filter(|l| l.starts_with("step "))
        .filter_map(|l| {
            l.split("loss ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(losses.len() as u64, steps, "{so}\n{se}");
    assert!(losses.iter().all(|l| l.is_finite()), "{so}");
    let (_, done) = losses_and_steps(&so);
    assert_eq!(done, steps, "{so}");
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no simulator report ({e}):\n{so}\n{se}"));
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(r["sticky_error"].is_null(), "{text}");
    assert!(r["kernels"].as_u64().unwrap_or(0) > 100, "{text}");
    (so, r)
}

fn count(report: &serde_json::Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

/// Under the shim (policy none) with a trace: the trace counts every kernel the simulator ran
/// (TensorFlow's launches through the driver and the runtime, and the GEMM kernels of its
/// cuBLAS calls), every cuDNN call that computes and every allocation, and each launch names
/// the allocations it touches.
fn traced_model(script: &str, args: &[&str], name: &str, needs_cudnn: bool) {
    let trace = temp_path(&format!("tf-{name}.jsonl"));
    let t = trace.to_string_lossy().into_owned();
    let (_, report) = train_model(&["--policy", "none", "--trace", &t], script, args, 2, name);
    let records = take_trace(&trace);
    let ok_calls = |kind: &str| -> Vec<&serde_json::Value> {
        of_kind(&records, kind)
            .into_iter()
            .filter(|r| r["result"].as_i64() == Some(0))
            .collect()
    };
    let launches = ok_calls("launch").len() as u64;
    let gemm_kernels: u64 = ok_calls("cublas")
        .iter()
        .map(|r| r["kernels"].as_u64().expect("kernels"))
        .sum();
    let loaded: u64 = report["fatbin_kernels"]
        .as_object()
        .expect("fatbin_kernels in the report")
        .values()
        .map(|f| f["launches"].as_u64().unwrap())
        .sum();
    assert!(launches > 100, "{launches} launches");
    assert!(gemm_kernels > 0, "no GEMM traced");
    assert_eq!(launches, loaded, "launches vs fatbin_kernels");
    assert_eq!(
        gemm_kernels,
        count(&report, "library_kernels"),
        "GEMMs vs library_kernels"
    );
    assert_eq!(
        launches + gemm_kernels,
        count(&report, "kernels"),
        "kernels"
    );
    let cudnn = ok_calls("cudnn")
        .iter()
        .filter(|r| !r["api"].as_str().unwrap().contains("Get"))
        .count() as u64;
    assert_eq!(cudnn, count(&report, "cudnn_calls"), "cuDNN calls");
    assert_eq!(cudnn > 0, needs_cudnn, "{cudnn} cuDNN calls");
    assert_eq!(
        ok_calls("alloc").len() as u64,
        count(&report, "allocations"),
        "allocations"
    );
    for r in of_kind(&records, "launch") {
        let touches = r["touches"].as_array().map(Vec::len).unwrap_or(0);
        assert!(touches > 0, "a launch that names no allocation: {r}");
    }
    // TensorFlow's MLIR element-wise kernels (loaded with the driver) are read exactly, their
    // result written and their operands read, and each driver launch carries its parameter
    // buffer (the lineage record just before it), so that it can be recomputed.
    let mlir: Vec<u64> = of_kind(&records, "kernel")
        .into_iter()
        .filter(|k| {
            let n = k["name"].as_str().unwrap_or("");
            n.contains("_GPU_DT_") && n.ends_with("_kernel") && !n.starts_with("Select")
        })
        .filter_map(|k| k["func"].as_u64())
        .collect();
    let mlir_launches: Vec<&serde_json::Value> = ok_calls("launch")
        .into_iter()
        .filter(|r| r["func"].as_u64().is_some_and(|f| mlir.contains(&f)))
        .collect();
    assert!(!mlir_launches.is_empty(), "no MLIR element-wise kernel ran");
    for r in &mlir_launches {
        let access = accesses(r);
        assert!(
            access.contains(&"w") || access.contains(&"rw"),
            "an MLIR kernel's result not named: {r}"
        );
        assert!(
            access.iter().filter(|a| **a != "r").count() == 1,
            "an MLIR kernel with other than one result: {r}"
        );
    }
    assert!(
        mlir_launches.iter().any(|r| {
            r["touches"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["access"] == "w" && t["bytes"].as_u64() > Some(0))
        }),
        "no MLIR kernel writes a fresh result"
    );
    // The kernels TensorFlow generates at run time come as PTX text (without ptxas, the
    // driver compiles them), all named main_kernel: read from their PTX, an operand only
    // loaded from is read (the conservative rule would make every operand rw).
    let jit: Vec<u64> = of_kind(&records, "kernel")
        .into_iter()
        .filter(|k| k["name"] == "main_kernel")
        .filter_map(|k| k["func"].as_u64())
        .collect();
    let jit_launches: Vec<&serde_json::Value> = ok_calls("launch")
        .into_iter()
        .filter(|r| r["func"].as_u64().is_some_and(|f| jit.contains(&f)))
        .collect();
    assert!(!jit_launches.is_empty(), "no kernel of a PTX module ran");
    for r in &jit_launches {
        assert!(
            accesses(r).iter().any(|a| *a != "r"),
            "a kernel of a PTX module that writes nothing: {r}"
        );
    }
    assert!(
        jit_launches.iter().any(|r| accesses(r).contains(&"r")),
        "no kernel of a PTX module read as reading"
    );
    // The call record (or lineage) before each launch on its thread; the shim's own records
    // (timings, evictions, recomputations) do not count.
    let calls = [
        "lineage", "launch", "alloc", "free", "copy", "memset", "sync", "cublas", "cudnn",
    ];
    let mut sorted: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| calls.iter().any(|k| r["kind"] == *k))
        .collect();
    sorted.sort_by_key(|r| r["seq"].as_u64());
    let mut before: std::collections::HashMap<u64, &serde_json::Value> = Default::default();
    let mut lineage_before = std::collections::HashSet::new();
    for r in sorted {
        let tid = r["tid"].as_u64().unwrap_or(0);
        if r["kind"] == "launch"
            && before
                .get(&tid)
                .is_some_and(|b| b["kind"] == "lineage" && b["replay"]["call"] == "kernel")
        {
            lineage_before.insert(r["seq"].as_u64());
        }
        before.insert(tid, r);
    }
    let with_lineage = mlir_launches
        .iter()
        .filter(|r| lineage_before.contains(&r["seq"].as_u64()))
        .count();
    assert_eq!(
        with_lineage,
        mlir_launches.len(),
        "driver launches without their parameter buffer"
    );
}

/// ResNet-50 small: 32x32 images, batch 4.
const RESNET: &[&str] = &["--size", "32", "--batch", "4"];
/// The transformer small: two blocks of width 64 over 32 tokens.
const TRANSFORMER: &[&str] = &["--seq", "32", "--dim", "64", "--batch", "8"];

/// Keras ResNet-50 (keras.applications, BatchNormalization included: its Rsqrt compiled at run
/// time against libdevice and interpreted from PTX) trains on the simulated H100.
#[test]
fn keras_resnet50_trains_in_shape_mode_without_marmoset() {
    let (_, r) = train_model(&["--no-shim"], "resnet50.py", RESNET, 2, "r50-plain");
    assert!(count(&r, "cudnn_calls") > 0, "{r}");
}

#[test]
fn keras_resnet50_trace_counts_what_the_simulator_did() {
    traced_model("resnet50.py", RESNET, "r50-traced", true);
}

#[test]
fn keras_transformer_trains_in_shape_mode_without_marmoset() {
    let (_, r) = train_model(&["--no-shim"], "transformer.py", TRANSFORMER, 2, "tr-plain");
    assert!(count(&r, "library_kernels") > 0, "{r}");
}

#[test]
fn keras_transformer_trace_counts_what_the_simulator_did() {
    traced_model("transformer.py", TRANSFORMER, "tr-traced", false);
}

/// The transformer with tensors a policy moves (most above the 1 MiB under which Marmoset pools
/// them): two blocks of width 256 over 256 tokens, batch 16.
const TRANSFORMER_BUDGETED: &[&str] = &["--seq", "256", "--dim", "256"];

/// Within half the peak of its own run without Marmoset, the default policy trains the
/// transformer: no trap, the device's peak within the budget, and a plan of the in-process
/// planner guides (its iteration found: Marmoset gives TensorFlow one inter-op thread, so that
/// the calls of each step come in one order). Twelve steps: under the budget, where TensorFlow
/// frees a tensor read back to the host still varies from step to step (its event thread frees
/// it once the copy has completed), and the tracker may need a few steps to find a repetition.
#[test]
fn keras_transformer_trains_within_half_its_peak_under_the_default_policy() {
    let (_, plain) = train_model(
        &["--no-shim"],
        "transformer.py",
        TRANSFORMER_BUDGETED,
        3,
        "tr-peak",
    );
    let budget = count(&plain, "peak_bytes") / 2;
    let trace = temp_path("tf-tr-budget.jsonl");
    let t = trace.to_string_lossy().into_owned();
    let (so, r) = train_model(
        &["--memory-limit", &budget.to_string(), "--trace", &t],
        "transformer.py",
        TRANSFORMER_BUDGETED,
        12,
        "tr-budget",
    );
    assert!(
        count(&r, "peak_bytes") <= budget,
        "peak {} over the budget {budget}",
        count(&r, "peak_bytes")
    );
    let records = take_trace(&trace);
    let plans = of_kind(&records, "plan");
    assert!(
        plans
            .iter()
            .any(|p| p["feasible"].as_bool() == Some(true) && p["period"].as_u64() > Some(100)),
        "no plan of a step guided:\n{so}"
    );
    // TensorFlow runs the computation it runs without Marmoset: its graph optimizer, told the
    // device's memory rather than the budget, adds no copies of tensors out to the host and
    // back (hundreds of MB a step when it is told the budget). Without Marmoset every copy is
    // the program's own: its steps copy at most as much a step under the budget (with room
    // for what the first step copies once).
    let copied: u64 = of_kind(&records, "copy")
        .iter()
        .filter(|c| c["dir"] == "h2d" || c["dir"] == "d2h")
        .filter_map(|c| c["size"].as_u64())
        .sum();
    let plain_copied = count(&plain, "h2d_bytes") + count(&plain, "d2h_bytes");
    assert!(
        copied <= plain_copied * 12 / 3 * 3 / 2,
        "the program copied {copied} B between host and device in 12 steps under the budget, \
         against {plain_copied} B in 3 without Marmoset"
    );
}
