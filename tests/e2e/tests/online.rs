//! The online policy (DTR's heuristic in process, `shim/src/virt/online.rs`): what no plan
//! guides is evicted by cost / (size x staleness) and dropped where it can be replayed, then
//! rebuilt before its next use. Two training iterations of torchlike never give the tracker a
//! verified repetition, so the whole run is in its hands. Data mode: results bit for bit those
//! of the unlimited run, within the budget, no trap; against `MARMOSET_ONLINE=0` (least
//! recently used, swapped, the same mechanism as `lru`) on the same program and budget, it
//! rebuilds instead of copying, and takes less simulated time where a rebuild's sources and
//! output fit beside the rest: at half the peak, and for out-of-place activations at 0.3. (At
//! 0.3 of the batch-norm network's peak, three activations in all, rebuilding costs more
//! copies than it saves: 7.8 against 6.0 ms simulated, see docs/memory.md.)

use marmoset_e2e::*;
use serde_json::Value;

/// Batch norms with ReLU in place after them (chains), the residual sum out of place, GELU-free:
/// what a CNN's forward pass makes.
const BN: [&str; 9] = ["2", "256", "32", "4", "2", "1", "relu", "nobias", "bnsum"];
/// Out-of-place activations of a kernel family named nowhere in Marmoset (first writes).
const SOFTSIGN: [&str; 7] = ["2", "128", "32", "4", "4", "1", "softsign"];

fn run(args: &[&str], budget: u64, online: bool) -> (std::process::Output, Vec<Value>, Value) {
    let on = if online { "1" } else { "0" };
    planned(
        "auto",
        budget,
        &[("MARMOSET_ONLINE", on)],
        "torchlike",
        args,
    )
}

fn simulated_s(report: &Value) -> f64 {
    report["virtual_time_s"].as_f64().expect("a simulated time")
}

#[test]
fn what_no_plan_guides_is_rebuilt_instead_of_copied_bit_for_bit() {
    for (args, faster) in [(&BN[..], &[0.5][..]), (&SOFTSIGN[..], &[0.5, 0.3][..])] {
        let (peak, plain) = unlimited("torchlike", args);
        for fraction in [0.5, 0.3] {
            let budget = (peak as f64 * fraction) as u64;
            let at = format!("torchlike {} at {fraction} P", args.join(" "));
            let (o, records, report) = run(args, budget, true);
            exact_within(&at, &o, &plain, &report, budget);
            assert!(
                of_kind(&records, "plan").is_empty(),
                "{at}: no plan guides two iterations"
            );
            let rebuilt = of_kind(&records, "recompute").len();
            assert!(rebuilt > 0, "{at}: dropped tensors rebuilt by replay");
            let (o, off_records, off) = run(args, budget, false);
            exact_within(
                &format!("{at}, MARMOSET_ONLINE=0"),
                &o,
                &plain,
                &off,
                budget,
            );
            assert!(of_kind(&off_records, "recompute").is_empty(), "{at}");
            assert!(
                !faster.contains(&fraction) || simulated_s(&report) < simulated_s(&off),
                "{at}: online {} s against least recently used {} s (simulated)",
                simulated_s(&report),
                simulated_s(&off)
            );
        }
    }
}

/// NORM bncopy: each block's first batch norm output copied aside before its in-place ReLU
/// (autograd's pattern for SiLU and hardswish).
const BN_COPY: [&str; 9] = ["2", "256", "32", "4", "2", "1", "relu", "nobias", "bncopy"];

#[test]
fn a_copy_aside_is_rebuilt_from_its_batch_norm_bit_for_bit() {
    let (peak, plain) = unlimited("torchlike", &BN_COPY);
    let budget = (peak as f64 * 0.3) as u64;
    let (o, records, report) = run(&BN_COPY, budget, true);
    exact_within("torchlike bncopy at 0.3 P", &o, &plain, &report, budget);
    assert!(
        of_kind(&records, "plan").is_empty(),
        "no plan guides two iterations"
    );
    let apis: Vec<String> = of_kind(&records, "recompute")
        .iter()
        .filter_map(|r| r["api"].as_str().map(String::from))
        .collect();
    assert!(
        apis.iter()
            .any(|a| a.starts_with("cudnnBatchNormalizationForwardTrainingEx then cudaMemcpyAsync")),
        "{apis:?}"
    );
}
