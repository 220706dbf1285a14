//! The offline planner through the marmoset command, on DTR's real logs.

use marmoset_e2e::*;
use std::process::Command;

/// The policies issue 6 names, written out here rather than taken from the planner, so that a
/// policy the command stops accepting fails these tests.
const POLICIES: [&str; 10] = [
    "auto",
    "capuchin",
    "swap",
    "recompute",
    "dtr",
    "lru",
    "vdnn-all",
    "vdnn-conv",
    "autoswap",
    "hybrid",
];

/// DTR's log whose name starts with `name`; None (after one loud line) without the data.
fn log(name: &str) -> Option<std::path::PathBuf> {
    planner::testdata::dtr_logs()
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(name))
}

#[test]
fn plan_answers_in_json_and_imports_round_trip() {
    let Some(resnet32) = log("resnet32") else {
        return;
    };
    let out = temp_path("resnet32.json");
    let imp = Command::new(marmoset())
        .args(["import", "dtr"])
        .arg(&resnet32)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(imp.status.success(), "{}", stderr(&imp));
    for trace in [resnet32, out.clone()] {
        let o = Command::new(marmoset())
            .arg("plan")
            .arg(&trace)
            .args(["--budget", "0.5", "--policy", "capuchin", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        for key in [
            "policy",
            "profile",
            "budget_bytes",
            "peak_bytes_baseline",
            "peak_bytes_planned",
            "baseline_time_s",
            "planned_time_s",
            "overhead",
            "feasible",
            "swapped_bytes",
            "recomputed_ops",
            "stall_s",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
        assert_eq!(
            v["peak_bytes_baseline"], 10061179152u64,
            "ResNet-32's peak, as DTR measured it"
        );
        assert_eq!(v["feasible"], true);
        // The stalls by cause add up to the stall time, and the forward and backward passes
        // to the same.
        let lost = |k: &str| {
            let l = &v["stalls"][k];
            ["swap_in_s", "memory_s", "recompute_s"]
                .iter()
                .map(|c| {
                    l[c].as_f64()
                        .unwrap_or_else(|| panic!("stalls.{k}.{c} in {v}"))
                })
                .sum::<f64>()
        };
        let stall = v["stall_s"].as_f64().unwrap();
        assert!(stall > 0.0, "a plan under half the peak stalls: {v}");
        assert!((lost("all") - stall).abs() <= 1e-9 * stall, "{v}");
        assert!(
            (lost("forward") + lost("backward") - stall).abs() <= 1e-9 * stall,
            "{v}"
        );
        assert!(!v["stalls"]["worst"].as_array().unwrap().is_empty(), "{v}");
        assert!(v["peak_bytes_planned"].as_u64().unwrap() <= v["budget_bytes"].as_u64().unwrap());
        assert!(v["overhead"].as_f64().unwrap() < 1.1);
    }
    std::fs::remove_file(out).ok();
}

#[test]
fn a_bad_log_is_named_by_line() {
    let bad = temp_path("bad.log");
    std::fs::write(&bad, "{\"ANNOTATION\":\"START\",\"INSTRUCTION\":\"ANNOTATE\"}\n{\"INSTRUCTION\":\"RELEASE\",\"NAME\":\"ghost\"}\n").unwrap();
    let o = Command::new(marmoset())
        .args(["import", "dtr"])
        .arg(&bad)
        .arg("-o")
        .arg(temp_path("x.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("line 2") && stderr(&o).contains("ghost"),
        "{}",
        stderr(&o)
    );
    let Some(lstm) = log("lstm") else {
        return;
    };
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(lstm)
        .args(["--budget", "0.5", "--policy", "magic"])
        .output()
        .unwrap();
    assert!(stderr(&o).contains("capuchin"), "{}", stderr(&o));
}

#[test]
fn the_sweep_prints_every_policy_and_smartpool() {
    let Some(resnet32) = log("resnet32") else {
        return;
    };
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(resnet32)
        .args(["--sweep", "--profile", "p100"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = stdout(&o);
    for p in POLICIES.iter().chain(&["smartpool"]) {
        assert!(text.lines().any(|l| l.starts_with(p)), "{p} in\n{text}");
    }
    assert!(text.contains("simulated"));
}

#[test]
fn a_marmoset_trace_with_timings_can_be_planned() {
    let (o, records) = run_shim(
        &[("MARMOSET_TRACE_TIMING", "1")],
        "trainer",
        &["2", "16", "64", "4"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let path = temp_path("trainer-timed.jsonl");
    std::fs::write(
        &path,
        records.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let p = Command::new(marmoset())
        .arg("plan")
        .arg(&path)
        .args(["--budget", "0.7", "--policy", "capuchin", "--json"])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", stderr(&p));
    let v: serde_json::Value = serde_json::from_slice(&p.stdout).unwrap();
    assert_eq!(v["feasible"], true, "{v}");
    assert!(v["peak_bytes_planned"].as_u64().unwrap() <= v["budget_bytes"].as_u64().unwrap());
    // Without device timings (`marmoset run --trace` records them unless told not to) the
    // planner says what is missing.
    let (_, untimed) = run_shim(&[("MARMOSET_TRACE_TIMING", "0")], "trainer", &["1"]);
    std::fs::write(
        &path,
        untimed.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let p = Command::new(marmoset())
        .arg("plan")
        .arg(&path)
        .args(["--budget", "0.5"])
        .output()
        .unwrap();
    assert!(!p.status.success());
    assert!(
        stderr(&p).contains("MARMOSET_TRACE_TIMING=1"),
        "{}",
        stderr(&p)
    );
    std::fs::remove_file(path).ok();
}

/// `--explain` on a shim's trace lists what cannot be replayed, with why: torchlike's plainly
/// named in-place ReLU (`relu_`, its roles inferred) may update its tensor in place, while the
/// test's softsign kernel, which writes fresh memory, is replayable and not listed.
#[test]
fn explain_lists_what_cannot_be_replayed_and_why() {
    let (o, records) = run_shim(
        &[("MARMOSET_TRACE_TIMING", "1")],
        "torchlike",
        &["5", "4", "16", "8", "2", "3", "softsign"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let path = temp_path("torchlike-explain.jsonl");
    std::fs::write(
        &path,
        records.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let p = Command::new(marmoset())
        .arg("plan")
        .arg(&path)
        .args(["--budget", "0.5", "--explain"])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", stderr(&p));
    let text = stdout(&p);
    let listed: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("not replayable"))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .collect();
    assert!(
        listed
            .iter()
            .any(|l| l.contains("relu_") && l.contains("may update memory holding contents")),
        "{text}"
    );
    assert!(
        !listed.iter().any(|l| l.contains("softsign_forward")),
        "{text}"
    );
    std::fs::remove_file(path).ok();
}

/// `--explain` prints every decision, including drops at a tensor's last use (no operation
/// after them) and sources kept past the program's free, and never panics.
#[test]
fn explain_names_every_decision_for_every_policy() {
    let (Some(densenet), Some(resnet32)) = (log("tv_densenet121"), log("resnet32")) else {
        return;
    };
    let mut seen = (false, false, false, false);
    for policy in POLICIES {
        let o = Command::new(marmoset())
            .arg("plan")
            .arg(&densenet)
            .args(["--budget", "0.3", "--policy", policy, "--explain"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{policy}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("simulated"), "{policy}: {text}");
        seen.0 |= text.contains("its last use");
        seen.1 |= text.contains("kept past the program's free");
        seen.2 |= text.contains("swap out after op");
        assert!(text.contains("  stalled "), "{policy}: {text}");
        seen.3 |= text.contains("the operations that lost the most");
    }
    assert!(
        seen.0 && seen.1 && seen.2 && seen.3,
        "dead drops, kept sources, swaps and where time is lost all explained: {seen:?}"
    );
    // A budget nothing can meet: the answer says where it stays over, and by how much.
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(resnet32)
        .args(["--budget", "1000", "--policy", "capuchin"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("NOT feasible") && text.contains("over the budget at") && text.contains(" B"),
        "{text}"
    );
}

/// A reader that stops early (`| head`) ends the command quietly, as SIGPIPE would.
#[test]
fn a_closed_stdout_is_not_a_crash() {
    use std::process::Stdio;
    let Some(densenet) = log("tv_densenet121") else {
        return;
    };
    let mut child = Command::new(marmoset())
        .arg("plan")
        .arg(densenet)
        .args(["--sweep"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

const LOGS: [&str; 4] = ["resnet32", "tv_densenet121", "transformer", "lstm"];

/// `marmoset plan LOG --sweep --json` for every log on both profiles, run once for the tests
/// that read it: (log, profile, sweep); empty without the data.
fn sweeps() -> &'static [(&'static str, &'static str, serde_json::Value)] {
    static SWEEPS: std::sync::OnceLock<Vec<(&str, &str, serde_json::Value)>> =
        std::sync::OnceLock::new();
    SWEEPS.get_or_init(|| {
        let mut v = Vec::new();
        for profile in ["h100", "p100"] {
            for name in LOGS {
                let Some(l) = log(name) else {
                    return Vec::new();
                };
                let o = Command::new(marmoset())
                    .arg("plan")
                    .arg(l)
                    .args(["--sweep", "--json", "--profile", profile])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{}", stderr(&o));
                v.push((name, profile, serde_json::from_slice(&o.stdout).unwrap()));
            }
        }
        v
    })
}

/// One policy's overhead at one budget of a sweep; `None` where it cannot keep within it.
fn overhead(sweep: &serde_json::Value, policy: &str, f: f64) -> Option<f64> {
    let r = sweep["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["policy"] == policy && x["budget_fraction"].as_f64() == Some(f))
        .unwrap();
    (r["feasible"] == true).then(|| r["overhead"].as_f64().unwrap())
}

/// DTR's own simulator on the four logs (Kirisame et al., ICLR 2021, its simulator's published runs): slowdowns at 0.9, 0.7, 0.5,
/// 0.4, 0.3 and 0.2 of the peak.
const DTR_PUBLISHED: [(&str, [f64; 6]); 4] = [
    ("resnet32", [1.013, 1.046, 1.107, 1.140, 1.179, 1.332]),
    ("tv_densenet121", [1.026, 1.104, 1.176, 1.293, 1.426, 1.616]),
    ("transformer", [1.009, 1.031, 1.058, 1.091, 1.124, 1.545]),
    ("lstm", [1.017, 1.031, 1.071, 1.159, 1.365, 1.550]),
];
const DTR_BUDGETS: [f64; 6] = [0.9, 0.7, 0.5, 0.4, 0.3, 0.2];

/// Issue 6's target for recompute-only (simulated): feasible at every budget DTR reaches, and
/// within a few percent (5%) of DTR's own slowdowns there. And a check of the simulator against
/// an independent one: our `dtr` (DTR's heuristic on our timeline) lands within 1% of DTR's
/// simulator at 0.9 to 0.5, where DTR's equivalence-class approximation of the neighbourhood
/// and our walk of it (up to 64 storages) rarely disagree.
#[test]
fn recompute_only_is_within_a_few_percent_of_dtr_and_dtr_is_reproduced() {
    if sweeps().is_empty() {
        return; // without DTR's logs: said in one loud line by testdata::dtr_logs
    }
    let mut misses = Vec::new();
    for (name, published) in DTR_PUBLISHED {
        let sweep = &sweeps()
            .iter()
            .find(|s| s.0 == name && s.1 == "h100")
            .unwrap()
            .2;
        for (f, dtr) in DTR_BUDGETS.into_iter().zip(published) {
            match overhead(sweep, "recompute", f) {
                Some(x) if x <= dtr * 1.05 => {}
                got => misses.push(format!("{name} {f}: recompute {got:?}, DTR {dtr}")),
            }
            if f >= 0.5 {
                match overhead(sweep, "dtr", f) {
                    Some(x) if (x / dtr - 1.0).abs() <= 0.01 => {}
                    got => misses.push(format!("{name} {f}: dtr {got:?}, DTR's simulator {dtr}")),
                }
            }
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}

/// Issue 14's claims on the four DTR logs, both profiles, every budget of the sweep (simulated):
/// `auto` at or below every other policy; `capuchin` and `recompute` at or below `dtr`; `hybrid`
/// at or below the better of `swap` and `recompute`; every figure at or above the lower bound,
/// its gap printed beside it. "At or below" includes feasible wherever the other is. The same
/// check as scripts/plan-check.py, through `--sweep --json`.
#[test]
fn the_policies_hold_their_claims_on_the_dtr_logs() {
    let mut misses = Vec::new();
    for (name, profile, v) in sweeps() {
        assert_eq!(v["simulated"], true);
        let results = v["results"].as_array().unwrap();
        assert_eq!(
            results.len(),
            POLICIES.len() * 8,
            "every policy at every budget"
        );
        for f in [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2] {
            let at: Vec<&serde_json::Value> = results
                .iter()
                .filter(|x| x["budget_fraction"].as_f64() == Some(f))
                .collect();
            let get = |p: &str| *at.iter().find(|x| x["policy"] == p).unwrap();
            // Infeasible counts as infinitely slow.
            let time = |x: &serde_json::Value| {
                if x["feasible"] == true {
                    x["planned_time_s"].as_f64().unwrap()
                } else {
                    f64::INFINITY
                }
            };
            let claims: [(&str, &[&str]); 4] = [
                ("auto", &POLICIES[1..]),
                ("capuchin", &["dtr"]),
                ("recompute", &["dtr"]),
                ("hybrid", &["swap", "recompute"]),
            ];
            for (who, than) in claims {
                let mine = time(get(who));
                let best = than
                    .iter()
                    .map(|p| (time(get(p)), *p))
                    .min_by(|x, y| x.0.total_cmp(&y.0))
                    .unwrap();
                if mine > best.0 * (1.0 + 1e-12) {
                    misses.push(format!(
                        "{name} {profile} {f}: {who} {mine}, {} {}",
                        best.1, best.0
                    ));
                }
            }
            for x in &at {
                if x["feasible"] == true {
                    let gap = x["gap"]
                        .as_f64()
                        .expect("a gap beside every feasible figure");
                    if gap < -1e-9 {
                        misses.push(format!(
                            "{name} {profile} {f}: {} below the bound",
                            x["policy"]
                        ));
                    }
                    assert!(x["peak_bytes_planned"].as_u64() <= x["budget_bytes"].as_u64());
                }
            }
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}
