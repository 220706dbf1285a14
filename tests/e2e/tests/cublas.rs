//! The simulated cuBLAS and cuBLASLt, through the C ABI, by the gemm_check workload: torch's call
//! sequences on random shapes against a double-precision reference, the statuses of bad calls,
//! and GEMM times from the profiles' throughputs.

use marmoset_e2e::*;

#[test]
fn gemms_and_lt_epilogues_match_the_reference() {
    for (profile, seed) in [("h100", "1"), ("h100", "2"), ("p100", "3")] {
        let o = run_sim(profile, &[], "gemm_check", &[seed, "5"]);
        ok(&o);
        let out = stdout(&o);
        // 5 cuBLAS cases, 5 x 8 Lt cases, 5 Lt backward and 5 Lt batched cases, 22 status and 4
        // precision checks.
        assert!(out.contains("gemm_check: 81 passed, 0 failed"), "{out}");
        // TF32 math rounds the inputs where there are tensor cores (H100), not on Pascal.
        let (fp32, tf32) = (num(&o, "fp32_error"), num(&o, "tf32_error"));
        if profile == "h100" {
            assert!(tf32 > 20.0 * fp32, "fp32 {fp32} tf32 {tf32}");
        } else {
            assert_eq!(tf32, fp32);
        }
        // Both pointer modes, and beta = 0 over a C of NaN, were exercised.
        for what in ["scales=device", "scales=host", "beta=0 scales"] {
            assert!(out.contains(what), "{what}: {out}");
        }
    }
}

#[test]
fn shape_mode_computes_nothing_so_the_comparisons_fail() {
    // The comparisons can fail: without arithmetic (shape mode) they must.
    let o = run_sim(
        "h100",
        &[("SIMGPU_MODE", "shape")],
        "gemm_check",
        &["1", "2"],
    );
    assert!(!o.status.success());
    assert!(stdout(&o).contains("FAIL"), "{}", stdout(&o));
}

#[test]
fn gemms_run_the_same_under_libmarmoset() {
    let (o, _) = run_shim(&[], "gemm_check", &["4", "3"]);
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains("gemm_check: 59 passed, 0 failed"), "{out}");
}

fn profile(name: &str) -> serde_json::Value {
    let p = root().join(format!("simgpu/profiles/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn gemm_times_follow_the_profile_throughputs() {
    let env = [("SIMGPU_MODE", "shape")];
    let o = run_sim("h100", &env, "gemm_check", &["timing"]);
    ok(&o);
    let p = profile("h100");
    let g = &p["gemm"];
    let f = |k: &str| p[k].as_f64().unwrap();
    let (simt, tensor) = (
        g["simt_efficiency"].as_f64().unwrap(),
        g["tensor_efficiency"].as_f64().unwrap(),
    );
    // 8192^3: 1,024 output tiles of 256x128 fill 132 SMs in 7.76 waves, so 8 waves of work;
    // the time is within 4% of 2 m n k / (peak x efficiency), never under it.
    let flops = 2.0 * 8192f64.powi(3);
    for (key, peak) in [
        ("fp32_ms", f("fp32_tflops") * simt),
        ("tf32_ms", f("tensor_tflops") * tensor),
        ("fp16_ms", g["fp16_tflops"].as_f64().unwrap() * tensor),
    ] {
        let ideal = flops / (peak * 1e12) * 1e3;
        let got = num(&o, key);
        assert!(
            got >= ideal && got < ideal * 1.04,
            "{key}: {got} ms, ideal {ideal} ms"
        );
    }
    // TF32 math mode turns an FP32 GEMM into a TF32 one.
    assert_eq!(num(&o, "tf32_math_mode_ms"), num(&o, "tf32_ms"));
    // A 64^3 GEMM is bound by the shortest kernel, not by its 0.5 MFLOP.
    let small = num(&o, "small_ms");
    assert!(
        small < 0.01 && small >= f("kernel_min_us") * 1e-3,
        "{small}"
    );

    // Pascal: no tensor cores, TF32 runs as FP32, FP16 at twice the FP32 rate.
    let q = run_sim("p100", &env, "gemm_check", &["timing"]);
    ok(&q);
    assert_eq!(num(&q, "tf32_ms"), num(&q, "fp32_ms"));
    let ratio = num(&q, "fp32_ms") / num(&q, "fp16_ms");
    assert!((ratio - 2.0).abs() < 0.05, "{ratio}");
    assert!(num(&q, "fp32_ms") > 5.0 * num(&o, "fp32_ms"));
    // Deterministic.
    let again = run_sim("h100", &env, "gemm_check", &["timing"]);
    assert_eq!(stdout(&again), stdout(&o));
}
