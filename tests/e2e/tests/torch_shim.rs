//! Unmodified PyTorch training ResNet-50 and the BERT-like encoder of examples/ for 3 steps on the
//! simulated H100 on PyTorch's default path (cuDNN, cuBLAS, cuBLASLt), in shape mode: without
//! Marmoset; under libmarmoset.so (policy none, trace on), where the trace must count what the
//! simulator counted (launches and the GEMM kernels of cuBLAS calls, cuDNN calls, allocations) and
//! every launch must name the allocations it touches; and both under the lru policy at half their
//! peak (ResNet-50 at batch 128), where the simulator's peak must stay within the budget.
//! Small batches where the count is all that matters. A missing .venv fails these tests with the
//! command that makes it; they never skip.

use marmoset_e2e::*;
use serde_json::Value;
use std::process::Output;

/// `marmoset run --sim ARGS -- .venv/bin/python examples/SCRIPT --steps 3 --batch B` in shape
/// mode; returns the output and the simulator's report.
fn run(marmoset_args: &[&str], script: &str, batch: u32, name: &str) -> (Output, Value) {
    let batch = batch.to_string();
    let args = ["--steps", "3", "--batch", batch.as_str()];
    torch_example(marmoset_args, script, &args, &format!("shim-{name}"))
}

/// Three loss lines, no error, no trap.
fn trained(out: &Output, report: &Value) {
    trained_three_steps(out, report);
}

fn count(report: &Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

/// Under the shim with a trace: the trace's counts equal the simulator's.
fn traced(script: &str, batch: u32, name: &str, needs_cudnn: bool) {
    let trace = temp_path(&format!("torch-shim-{name}.jsonl"));
    let t = trace.to_string_lossy().into_owned();
    let (out, report) = run(&["--policy", "none", "--trace", &t], script, batch, name);
    trained(&out, &report);
    let records = take_trace(&trace);
    let ok_calls = |kind: &str| -> Vec<&Value> {
        of_kind(&records, kind)
            .into_iter()
            .filter(|r| r["result"].as_i64() == Some(0))
            .collect()
    };
    // Kernels: the program's launches (torch's fatbin kernels) and the GEMMs cuBLAS/cuBLASLt run
    // inside their calls (one `cublas` record each, `kernels` 1 when it has work).
    let launches = ok_calls("launch").len() as u64;
    let gemm_kernels: u64 = ok_calls("cublas")
        .iter()
        .map(|r| r["kernels"].as_u64().expect("kernels"))
        .sum();
    let fatbin: u64 = report["fatbin_kernels"]
        .as_object()
        .expect("fatbin_kernels in the report")
        .values()
        .map(|f| f["launches"].as_u64().unwrap())
        .sum();
    assert!(launches > 100, "{launches} launches");
    assert!(gemm_kernels > 0, "no GEMM traced");
    assert_eq!(launches, fatbin, "launches vs fatbin_kernels");
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
    // cuDNN calls that compute (the simulator counts those), not the queries.
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
    // Every GEMM names its operands with exact extents.
    for r in ok_calls("cublas") {
        let touches = r["touches"].as_array().expect("touches");
        assert!(
            touches.len() >= 3 && touches.iter().all(|t| t["bytes"].as_u64() > Some(0)),
            "a GEMM without its operands: {r}"
        );
    }
}

#[test]
fn resnet50_trains_without_marmoset() {
    let (out, report) = run(&["--no-shim"], "resnet50.py", 8, "r50-plain");
    trained(&out, &report);
}

#[test]
fn resnet50_trace_counts_what_the_simulator_did() {
    traced("resnet50.py", 8, "r50", true);
}

#[test]
fn bert_trains_without_marmoset() {
    let (out, report) = run(&["--no-shim"], "bert.py", 2, "bert-plain");
    trained(&out, &report);
}

#[test]
fn bert_trace_counts_what_the_simulator_did() {
    traced("bert.py", 2, "bert", false);
}

/// SCRIPT under lru at half its peak: it trains, with evictions, and the simulator's peak, less
/// the modules' variables that no allocator holds, stays within the budget.
fn under_lru_at_half_its_peak(script: &str, batch: u32, name: &str, min_peak: u64) {
    let (out, report) = run(
        &["--policy", "none"],
        script,
        batch,
        &format!("{name}-peak"),
    );
    trained(&out, &report);
    let peak = count(&report, "peak_bytes");
    assert!(peak > min_peak, "peak {peak}");
    let budget = peak / 2;
    let limit = budget.to_string();
    let (out, report) = run(
        &["--policy", "lru", "--memory-limit", &limit],
        script,
        batch,
        &format!("{name}-lru"),
    );
    trained(&out, &report);
    // The whole simulated peak, the modules' variables included: what the process held before
    // Marmoset took over counts against the budget.
    let held = count(&report, "peak_bytes");
    assert!(
        held <= budget,
        "simulated peak {held} B over the budget {budget} B"
    );
    assert!(
        count(&report, "d2h_bytes") > 1 << 30,
        "no eviction at half the peak: {report}"
    );
}

/// ResNet-50 at batch 128 (above 8 GiB).
#[test]
fn resnet50_trains_under_lru_at_half_its_peak() {
    under_lru_at_half_its_peak("resnet50.py", 128, "r50", 8 << 30);
}

/// The BERT-like encoder at its default batch of 8 (5.6 GiB).
#[test]
fn bert_trains_under_lru_at_half_its_peak() {
    under_lru_at_half_its_peak("bert.py", 8, "bert", 4 << 30);
}
