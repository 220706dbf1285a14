//! Unmodified PyTorch (the pip wheel in .venv/, set up by scripts/setup-torch.sh, which the
//! README's test command runs) training the small CNN of examples/ for 3 steps on the simulated
//! GPU on PyTorch's default cuDNN (backend) path, in shape mode: without Marmoset, and under
//! libmarmoset.so (policy none, trace on), where the trace must count what the simulator counted.
//! A missing .venv fails these tests with the command that makes it; they never skip.

use marmoset_e2e::*;
use serde_json::Value;
use std::process::Output;

/// `marmoset run --sim ARGS -- .venv/bin/python examples/small_cnn.py --steps 3` in shape mode;
/// returns the output and the simulator's report.
fn small_cnn(marmoset_args: &[&str], name: &str) -> (Output, Value) {
    torch_example(marmoset_args, "small_cnn.py", &["--steps", "3"], name)
}

/// Three loss lines, no error, no trap, and device work done.
fn trained(out: &Output, report: &Value) {
    trained_three_steps(out, report);
    assert!(report["kernels"].as_u64().unwrap() > 10, "{report}");
    assert!(report["cudnn_calls"].as_u64().unwrap() > 0, "{report}");
    assert!(report["allocations"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn torch_trains_a_small_cnn_on_the_simulated_gpu() {
    let (out, report) = small_cnn(&["--no-shim"], "plain");
    trained(&out, &report);
}

/// PyTorch alone capped below what it needs (`set_per_process_memory_fraction`) fails with its
/// own out-of-memory error, as on a real device: its report of the processes using the device
/// (NVML, and the driver functions it looks up all at once) finds what it asks for.
#[test]
fn torch_alone_beyond_its_memory_fraction_reports_out_of_memory() {
    let mut c = torch_command(
        "--sim=h100",
        &["--no-shim"],
        "small_cnn.py",
        &["--steps", "3", "--memory-fraction", "0.00001"],
    );
    c.env("SIMGPU_MODE", "shape");
    let out = torch_output(&mut c);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("torch.OutOfMemoryError: CUDA out of memory"),
        "{err}"
    );
    assert!(!err.contains("INTERNAL ASSERT FAILED"), "{err}");
}

#[test]
fn torch_trains_under_marmoset_and_the_trace_counts_what_the_simulator_did() {
    let trace = temp_path("torch-trace.jsonl");
    let t = trace.to_string_lossy().into_owned();
    let (out, report) = small_cnn(&["--policy", "none", "--trace", &t], "shim");
    trained(&out, &report);
    let records = take_trace(&trace);
    // The program's launches are torch's fatbin kernels; the report's `kernels` also counts the
    // kernels cuBLAS launches inside its own calls, which a trace of the program's calls does not
    // hold as launches.
    let fatbin_launches: u64 = report["fatbin_kernels"]
        .as_object()
        .expect("fatbin_kernels in the report")
        .values()
        .map(|f| f["launches"].as_u64().unwrap())
        .sum();
    assert_eq!(
        of_kind(&records, "launch").len() as u64,
        fatbin_launches,
        "traced launches vs the simulator's launches of torch's kernels"
    );
    // cuDNN calls that compute (the simulator counts those), not the queries.
    let computing = of_kind(&records, "cudnn")
        .iter()
        .filter(|r| !r["api"].as_str().unwrap().contains("Get"))
        .count() as u64;
    assert_eq!(
        computing,
        report["cudnn_calls"].as_u64().unwrap(),
        "cuDNN calls"
    );
    assert_eq!(
        of_kind(&records, "alloc").len() as u64,
        report["allocations"].as_u64().unwrap(),
        "allocations"
    );
    // Every launch names the allocations its pointer arguments fall in.
    for r in of_kind(&records, "launch") {
        let touches = r["touches"].as_array().map(Vec::len).unwrap_or(0);
        assert!(touches > 0, "a launch that names no allocation: {r}");
    }
}

/// BERT-Tiny at batch 8 and sequence 512 on the p100 profile: its embedding backward sorts 4096
/// indices with CUB, whose host code picks its kernels from `cudaFuncGetAttributes(...).ptxVersion`
/// and refuses (cudaErrorInvalidDeviceFunction) a version below every architecture it was built
/// for (torch 2.15: sm_75 and up). The simulator runs the lowest cubin, sm_75, on a p100 (sm_60)
/// and must say so in the attributes, or CUB stops the run.
#[test]
fn torch_trains_bert_on_the_p100_profile() {
    let report = temp_path("torch-bert-p100-report.json");
    let args = ["--size", "tiny", "--batch", "8", "--steps", "3"];
    let mut c = torch_command("--sim=p100", &["--no-shim"], "bert.py", &args);
    // SIMGPU_LOG=debug names each kernel launched: the sort must be among them.
    c.env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", &report)
        .env("SIMGPU_LOG", "debug");
    let out = torch_output(&mut c);
    ok(&out);
    assert!(
        stderr(&out).contains("DeviceRadixSort"),
        "no CUB radix sort launched: {}",
        stderr(&out)
    );
    let text = std::fs::read_to_string(&report).expect("a simulator report");
    std::fs::remove_file(&report).ok();
    let report: Value = serde_json::from_str(&text).expect("report JSON");
    assert_eq!(report["profile"], "p100", "{report}");
    trained_three_steps(&out, &report);
}
