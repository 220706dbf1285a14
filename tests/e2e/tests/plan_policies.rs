//! `marmoset plan` on the shim's own timed traces of the trainer and torchlike, at the sizes the
//! guided tests run (tests/e2e/tests/guided.rs), under every policy it offers: each policy that
//! can keep these iterations within 0.5 and 0.3 of their peak finds a feasible plan, whose
//! planned peak is within the budget. What a policy cannot do here is listed with the reason.

use marmoset_e2e::*;
use std::process::Command;

/// The shim's trace of `prog` with device timings (shape mode: the model is the data mode's,
/// the virtual clock the same), written to a file.
fn timed_trace(prog: &str, args: &[&str]) -> std::path::PathBuf {
    let (o, records) = run_shim(
        &[("MARMOSET_TRACE_TIMING", "1"), ("SIMGPU_MODE", "shape")],
        prog,
        args,
    );
    ok(&o);
    let path = temp_path(&format!("{prog}-policies.jsonl"));
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// Why `policy` cannot keep `prog`'s iteration within `fraction` of its peak, if it cannot.
fn cannot(prog: &str, policy: &str, fraction: f64) -> Option<&'static str> {
    match (prog, policy, fraction) {
        // The planner gives a producer only to the calls the shim replays: the trainer's
        // convolutions with the bias cuDNN adds in place after them (a chain) are, but
        // torchlike's activations (a convolution's output, then in-place bias and kernels) can
        // only be kept or swapped, so recomputation alone cannot go far below its peak.
        ("torchlike", "recompute" | "dtr", _) => {
            Some("only what the shim replays can be recomputed")
        }
        // vDNN's convolution mode moves only what convolutions read in the forward pass, with
        // no passive mode behind: the rest of the peak (gradients, other feature maps) stays.
        (_, "vdnn-conv", _) => Some("static: convolutions' forward inputs only"),
        // vDNN moves only forward feature maps (from 1 MiB), with no passive mode behind: at a
        // third of the peak torchlike's backward (gradients, the next batch) is over.
        ("torchlike", "vdnn-all", 0.3) => Some("static: forward feature maps only"),
        // AutoSwap's ranked swaps, with no passive mode behind, stay over at 0.5 and 0.3.
        ("torchlike", "autoswap", _) => Some("static: its ranked swaps are not enough"),
        // Capuchin's swap-only selection is followed by its passive mode (LRU) but never
        // replaced by it, and LRU alone fits where the selection then fails; hybrid starts from
        // swap's and recompute's plans.
        ("torchlike", "swap" | "hybrid", 0.3) => {
            Some("the passive mode is tried behind the selection only")
        }
        _ => None,
    }
}

fn plan(path: &std::path::Path, policy: &str, fraction: f64) -> serde_json::Value {
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(path)
        .args([
            "--budget",
            &fraction.to_string(),
            "--policy",
            policy,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{policy}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn every_policy_that_can_fits_half_and_three_tenths_of_the_trainer_and_torchlike() {
    let runs: [(&str, &[&str]); 2] = [
        ("trainer", &["4", "8", "64", "12"]),
        ("torchlike", &["5", "128", "32", "4", "4", "1"]),
    ];
    let mut failed = Vec::new();
    let mut fits = 0;
    for (prog, args) in runs {
        let path = timed_trace(prog, args);
        for &policy in planner::policy::POLICIES {
            for fraction in [0.5, 0.3] {
                let v = plan(&path, policy, fraction);
                assert_eq!(v["simulated"], true);
                let feasible = v["feasible"] == true;
                let within = v["peak_bytes_planned"].as_u64().unwrap()
                    <= v["budget_bytes"].as_u64().unwrap();
                match cannot(prog, policy, fraction) {
                    None if !(feasible && within) => {
                        failed.push(format!("{prog} {policy} at {fraction}: {v}"))
                    }
                    None => fits += 1,
                    // A feasible plan here is progress: the list above is out of date.
                    Some(why) if feasible => failed.push(format!(
                        "{prog} {policy} at {fraction} now fits (listed: {why}); update the list"
                    )),
                    Some(_) => {}
                }
            }
        }
        std::fs::remove_file(path).ok();
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(fits >= 20, "{fits} feasible plans");
}
