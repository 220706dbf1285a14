//! torch's memory statistics under a budget: with PyTorch's cudaMallocAsync backend,
//! torch.cuda.memory_allocated, max_memory_allocated, memory_reserved and max_memory_reserved are
//! the device's default memory pool's attributes, and reset_peak_memory_stats resets the pool's
//! high marks. tests/torch/memory_stats.py trains a small CNN on the simulated GPU and reads them
//! at fixed points (before anything, mid-step, after `del` and a synchronize, after a reset, after
//! a 32 MiB tensor made and deleted). Without Marmoset the simulated pool must give torch's true
//! figures; under Marmoset at a budget that makes it evict, the allocated figures must be the same
//! (what the program allocated, within the allocator's rounding), and the reserved ones what the
//! program's tensors hold of the budget. Shape mode. A missing .venv fails the test with the
//! command that makes it; it never skips.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::HashMap;
use std::process::Output;

const SCRIPT: &str = "../tests/torch/memory_stats.py";
const ASYNC: (&str, &str) = ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");
/// The allocator's rounding: the pool counts each allocation in 512-byte units.
const ROUNDING: i64 = 8 * 512;
const BURST: i64 = 32 << 20;

fn figures(out: &Output) -> HashMap<String, i64> {
    let v = values(out);
    assert_eq!(
        v.get("backend").map(String::as_str),
        Some("cudaMallocAsync"),
        "{}{}",
        stdout(out),
        stderr(out)
    );
    v.into_iter()
        .filter_map(|(k, x)| x.parse().ok().map(|x| (k, x)))
        .collect()
}

fn run(marmoset_args: &[&str], name: &str) -> (HashMap<String, i64>, Value) {
    let (out, report) = torch_example_with(marmoset_args, &[ASYNC], SCRIPT, &[], name);
    assert!(report["sticky_error"].is_null(), "a trap: {report}");
    (figures(&out), report)
}

fn get(f: &HashMap<String, i64>, key: &str) -> i64 {
    *f.get(key).unwrap_or_else(|| panic!("no {key} in {f:?}"))
}

/// The figures torch must report whoever holds the memory: none at the start, the model's own
/// tensors after `del`, a reset peak equal to the current figure, a burst seen by the peak only.
fn true_figures(f: &HashMap<String, i64>, run: &str) {
    let g = |k: &str| get(f, k);
    assert_eq!(g("start_allocated"), 0, "{run}");
    assert_eq!(g("start_max_allocated"), 0, "{run}");
    // After `del` and a synchronize: parameters, gradients and momentum, nothing else.
    assert_eq!(g("after_del_allocated"), g("tensors_held"), "{run}: {f:?}");
    // Mid-step the gradients are gone (zero_grad(set_to_none=True)) and the activations held.
    assert_ne!(g("mid_allocated"), g("after_del_allocated"), "{run}: {f:?}");
    assert!(
        g("step_max_allocated") > g("after_del_allocated") + (16 << 20),
        "{run}: activations and gradients at the peak: {f:?}"
    );
    assert!(
        g("step_max_allocated") >= g("mid_allocated"),
        "{run}: {f:?}"
    );
    assert_eq!(g("reset_allocated"), g("after_del_allocated"), "{run}");
    assert_eq!(
        g("reset_max_allocated"),
        g("reset_allocated"),
        "{run}: reset_peak_memory_stats leaves the peak at the current figure"
    );
    assert_eq!(g("burst_allocated"), g("reset_allocated"), "{run}");
    assert_eq!(
        g("burst_max_allocated"),
        g("reset_allocated") + BURST,
        "{run}: the peak since the reset is the 32 MiB tensor"
    );
    for at in ["mid", "step", "after_del", "reset", "burst"] {
        let (r, mr) = (
            g(&format!("{at}_reserved")),
            g(&format!("{at}_max_reserved")),
        );
        assert!(r <= mr, "{run}: {at}: reserved {r} over its peak {mr}");
    }
    assert_eq!(g("reset_max_reserved"), g("reset_reserved"), "{run}");
}

#[test]
fn torch_memory_statistics_are_the_programs_under_a_budget() {
    let (plain, report) = run(&["--no-shim"], "stats-plain");
    true_figures(&plain, "without Marmoset");
    // Without Marmoset the simulated pool keeps nothing back: reserved is allocated.
    for at in ["mid", "after_del", "reset", "burst"] {
        assert_eq!(
            get(&plain, &format!("{at}_reserved")),
            get(&plain, &format!("{at}_allocated")),
            "{at}"
        );
    }
    let peak = report["peak_bytes"].as_u64().expect("peak_bytes");
    // Half the whole program's peak (the modules' variables included): Marmoset evicts.
    let budget = peak / 2;
    let limit = budget.to_string();
    let (managed, report) = run(&["--memory-limit", &limit], "stats-managed");
    assert!(
        report["d2h_bytes"].as_u64() > Some(0),
        "no eviction at {budget} B: {report}"
    );
    true_figures(&managed, "under Marmoset");
    for (k, &v) in &plain {
        if k.ends_with("allocated") || k == "tensors_held" {
            let m = get(&managed, k);
            assert!(
                (m - v).abs() <= ROUNDING,
                "{k}: {m} under Marmoset at {budget} B, {v} without: {managed:?}"
            );
        }
    }
    // Reserved: what the program's tensors hold of the budget, never more than it.
    for at in ["mid", "step", "after_del", "reset", "burst"] {
        let mr = get(&managed, &format!("{at}_max_reserved"));
        assert!(
            mr <= budget as i64,
            "{at}: max_memory_reserved {mr} over the budget {budget}"
        );
    }
    assert!(
        get(&managed, "step_max_reserved") < get(&managed, "step_max_allocated"),
        "evicted tensors hold no device memory: {managed:?}"
    );
}
