//! Host threads under a budget: four threads allocate, copy, compute on their own streams and
//! free at once (tests/workloads/threads.c, each checking its buffers against the host's own
//! arithmetic), under every policy at 0.5, 0.3 and 0.1 of the peak, in data mode: the output
//! must be the run without Marmoset's, byte for byte, within the budget, with no trap. A call's
//! operands, made resident by one thread, must stay so until the call is issued, whatever the
//! other threads allocate meanwhile.

use marmoset_e2e::*;
use serde_json::Value;
use std::sync::OnceLock;

/// Four threads, eight buffers of 2 MiB each, six steps: a peak of 64 MiB, all of it live at
/// once (each thread keeps its eight buffers), so a run within half of it must evict.
const ARGS: [&str; 4] = ["4", "8", "6", "2048"];

/// The run without Marmoset: its output and its peak.
fn plain() -> &'static (String, u64) {
    static PLAIN: OnceLock<(String, u64)> = OnceLock::new();
    PLAIN.get_or_init(|| {
        let r = temp_path("threads-plain.json");
        let o = run_sim(
            "h100",
            &[("SIMGPU_REPORT", r.to_str().unwrap())],
            "threads",
            &ARGS,
        );
        ok(&o);
        let out = stdout(&o);
        assert_eq!(out.matches("checksum").count(), 4, "{out}");
        (out, sim_report(&r)["peak_bytes"].as_u64().unwrap())
    })
}

/// Runs of `policy`: at 0.5 and 0.3 of the peak three times each, at 0.1 four times (ten runs).
fn bit_exact_under(policy: &str) {
    let (out, peak) = plain();
    for (fraction, runs) in [(0.5, 3), (0.3, 3), (0.1, 4)] {
        let budget = (*peak as f64 * fraction) as u64;
        for run in 0..runs {
            let at = format!("{policy} at {fraction} of the peak, run {run}");
            let r = temp_path(&format!("threads-{policy}-{fraction}-{run}.json"));
            let o = under_shim(
                "h100",
                &[
                    ("MARMOSET_POLICY", policy),
                    ("MARMOSET_MEMORY_LIMIT", &budget.to_string()),
                    ("MARMOSET_LOG", "warn"),
                    ("SIMGPU_REPORT", r.to_str().unwrap()),
                ],
                "threads",
                &ARGS,
            );
            ok(&o);
            assert_eq!(
                &stdout(&o),
                out,
                "{at}: every thread's bytes as without Marmoset"
            );
            let rep = sim_report(&r);
            std::fs::remove_file(&r).ok();
            assert_eq!(rep["sticky_error"], Value::Null, "{at}: no trap");
            assert!(
                rep["peak_bytes"].as_u64().unwrap() <= budget,
                "{at}: within {budget} B: {rep}"
            );
        }
    }
}

#[test]
fn threads_under_lru() {
    bit_exact_under("lru");
}

#[test]
fn threads_under_auto() {
    bit_exact_under("auto");
}

#[test]
fn threads_under_capuchin() {
    bit_exact_under("capuchin");
}

#[test]
fn threads_under_swap() {
    bit_exact_under("swap");
}

#[test]
fn threads_under_recompute() {
    bit_exact_under("recompute");
}

#[test]
fn threads_under_dtr() {
    bit_exact_under("dtr");
}

#[test]
fn threads_under_vdnn_all() {
    bit_exact_under("vdnn-all");
}

#[test]
fn threads_under_vdnn_conv() {
    bit_exact_under("vdnn-conv");
}

#[test]
fn threads_under_autoswap() {
    bit_exact_under("autoswap");
}

#[test]
fn threads_under_hybrid() {
    bit_exact_under("hybrid");
}

#[test]
fn every_runtime_policy_is_run_here() {
    // The list above is the library's: a policy added there must be added here.
    let here = [
        "lru",
        "auto",
        "capuchin",
        "swap",
        "recompute",
        "dtr",
        "vdnn-all",
        "vdnn-conv",
        "autoswap",
        "hybrid",
    ];
    let managed: Vec<&str> = planner::settings::RUNTIME_POLICIES
        .iter()
        .copied()
        .filter(|p| *p != "none")
        .collect();
    assert_eq!(managed, here);
}

#[test]
fn eight_threads_of_small_tensors_under_a_tight_budget() {
    // Eight threads allocating, launching and freeing 4 KiB tensors, each its own 2 MiB range
    // (MARMOSET_MIN_TENSOR=512), within four such ranges.
    for policy in ["lru", "auto"] {
        for run in 0..3 {
            let o = under_shim(
                "h100",
                &[
                    ("MARMOSET_POLICY", policy),
                    ("MARMOSET_MEMORY_LIMIT", "8MiB"),
                    ("MARMOSET_MIN_TENSOR", "512"),
                    ("MARMOSET_LOG", "warn"),
                ],
                "sim_probe",
                &["threads"],
            );
            ok(&o);
            assert!(
                stdout(&o).contains("threads=ok"),
                "{policy}, run {run}: {}",
                stdout(&o)
            );
            assert!(!stderr(&o).contains("illegal address"), "{}", stderr(&o));
        }
    }
}

#[test]
fn a_fresh_threads_first_call_makes_room_in_the_context_the_runtime_would_bind() {
    // Threads one after another, each leaving its 16 MiB allocated, the first CUDA call of each
    // a cudaMalloc on a thread with no context current (as on PyTorch's autograd thread), under
    // a budget the first thread fills: each later thread's first call must evict, which takes
    // driver calls that work only in a context (the simulated driver refuses them on a thread
    // with none, with CUDA_ERROR_INVALID_CONTEXT, as the real one does).
    let args = ["3", "8", "3", "2048", "cold"];
    let plain = run_sim("h100", &[], "threads", &args);
    ok(&plain);
    assert_eq!(stdout(&plain).matches("checksum").count(), 3);
    for policy in ["lru", "auto"] {
        let o = under_shim(
            "h100",
            &[
                ("MARMOSET_POLICY", policy),
                ("MARMOSET_MEMORY_LIMIT", "17MiB"),
                ("MARMOSET_LOG", "warn"),
            ],
            "threads",
            &args,
        );
        ok(&o);
        assert_eq!(stdout(&o), stdout(&plain), "{policy}: {}", stderr(&o));
        assert!(!stderr(&o).contains("failed"), "{policy}: {}", stderr(&o));
    }
}
