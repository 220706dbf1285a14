//! Measured and guided execution (MARMOSET_POLICY=capuchin and the planner's other policies) on
//! the simulated GPU: the shim's tracker finds and verifies the iteration while the program runs
//! passively under the budget, the bridge plans it on a background thread with the planner's
//! code, and results stay bit for bit those of an unlimited run.

use marmoset_e2e::*;
use serde_json::Value;

fn report(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("a simulator report")).unwrap()
}

/// The trainer, 12 blocks deep at 64 x 64, for 4 iterations; tensors from 64 KiB are evictable
/// (smaller ones stay in the pool and would fill a third of the peak).
const TRAINER: [&str; 4] = ["4", "8", "64", "12"];
const MIN_TENSOR: (&str, &str) = ("MARMOSET_MIN_TENSOR", "65536");

fn peak_of(prog: &str, args: &[&str]) -> (u64, String) {
    let r0 = temp_path(&format!("guided-{prog}-unlimited.json"));
    let plain = run_sim(
        "h100",
        &[("SIMGPU_REPORT", r0.to_str().unwrap())],
        prog,
        args,
    );
    ok(&plain);
    (report(&r0)["peak_bytes"].as_u64().unwrap(), stdout(&plain))
}

/// The trainer under `policy` at half and a third of its peak.
fn trainer_under(policy: &str) {
    let (peak, plain) = peak_of("trainer", &TRAINER);
    {
        for fraction in [0.5, 0.3] {
            let budget = (peak as f64 * fraction) as u64;
            let r = temp_path(&format!("guided-{policy}-{fraction}.json"));
            let (o, records) = run_shim(
                &[
                    ("MARMOSET_POLICY", policy),
                    ("MARMOSET_MEMORY_LIMIT", &budget.to_string()),
                    ("SIMGPU_REPORT", r.to_str().unwrap()),
                    MIN_TENSOR,
                ],
                "trainer",
                &TRAINER,
            );
            ok(&o);
            assert_eq!(
                stdout(&o),
                plain,
                "{policy} at {fraction} P: the same losses and checksum, bit for bit"
            );
            let rep = report(&r);
            assert!(
                rep["peak_bytes"].as_u64().unwrap() <= budget,
                "{policy} at {fraction} P: {rep}"
            );
            assert_eq!(rep["sticky_error"], Value::Null, "no trap");
            // The iteration was found and verified, then planned by this policy, in the
            // background, for this budget; the record says how long planning took.
            let its = of_kind(&records, "iteration");
            assert_eq!(its.len(), 1, "{policy} at {fraction} P: {its:?}");
            let period = its[0]["period"].as_u64().unwrap();
            assert!(
                period > 20,
                "one training iteration is many calls: {period}"
            );
            let plans = of_kind(&records, "plan");
            assert_eq!(
                plans.len(),
                1,
                "{policy} at {fraction} P: {:?}",
                of_kind(&records, "no_plan")
            );
            let p = plans[0];
            assert_eq!(p["policy"], policy);
            assert_eq!(p["budget"].as_u64().unwrap(), budget);
            assert_eq!(p["period"].as_u64().unwrap(), period);
            assert!(p["planning_ms"].as_f64().unwrap() > 0.0);
            assert!(p["predicted_ms"].as_f64().unwrap() > 0.0);
            assert!(
                p["swaps"].as_u64().unwrap() + p["recomputes"].as_u64().unwrap() > 0,
                "below the peak the plan moves something: {p}"
            );
            // The only departure from the iteration is the program's end (the checksum).
            let div = of_kind(&records, "divergence");
            assert!(
                div.len() <= 1 && div.iter().all(|d| d["call"] == 0),
                "{policy} at {fraction} P: {div:?}"
            );
        }
    }
}

#[test]
fn the_trainer_under_capuchin() {
    trainer_under("capuchin");
}

#[test]
fn the_trainer_under_swap() {
    trainer_under("swap");
}

#[test]
fn the_trainer_under_recompute() {
    trainer_under("recompute");
}

#[test]
fn without_a_repeating_iteration_nothing_is_planned_and_results_stay_exact() {
    // One iteration: nothing repeats, so there is nothing to plan; lru's passive mode runs it.
    let args = ["1", "8", "64", "12"];
    let (peak, plain) = peak_of("trainer", &args);
    let budget = (peak as f64 * 0.5) as u64;
    let (o, records) = run_shim(
        &[
            ("MARMOSET_POLICY", "capuchin"),
            ("MARMOSET_MEMORY_LIMIT", &budget.to_string()),
            MIN_TENSOR,
        ],
        "trainer",
        &args,
    );
    ok(&o);
    assert_eq!(stdout(&o), plain);
    assert!(of_kind(&records, "iteration").is_empty());
    assert!(of_kind(&records, "plan").is_empty());
    assert!(
        !of_kind(&records, "evict").is_empty(),
        "passive eviction ran"
    );
}

#[test]
fn an_unknown_policy_is_named_with_the_planner_policies_accepted() {
    let (o, _) = run_shim(&[("MARMOSET_POLICY", "capuchin2")], "trainer", &["1"]);
    let e = stderr(&o);
    assert!(
        e.contains("capuchin2") && e.contains("capuchin, swap, recompute"),
        "{e}"
    );
}
