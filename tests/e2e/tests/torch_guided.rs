//! Unmodified PyTorch under Marmoset's planner (MARMOSET_POLICY=capuchin, and auto, what a
//! budget alone gets) at half its peak (ResNet-50 at 0.3 too), on the simulated H100 in shape mode: the shim finds
//! torch's training step in its call stream, plans it in-process, and guides the steps after it
//! to the end of the run without leaving the planned sequence; each guided step takes the time
//! the planner predicted (within 10%, simulated), and auto's less than the passive `lru`
//! policy's step in the same budget. (Capuchin's own selection need not be: on the BERT-like
//! encoder at batch 4 the passive policy, whose frees come back at once, is faster.)
//! ResNet-50 runs on torch 2.11 too (`.venv-torch-2.11.0`, the lent GPUs' version).
//! A missing .venv fails these tests with the command that makes it; they never skip.

use marmoset_e2e::*;

/// Each step's time on the device clock (simulated), from the examples' step lines.
fn step_times(out: &std::process::Output) -> Vec<f64> {
    stdout(out)
        .lines()
        .filter(|l| l.starts_with("step "))
        .map(|l| {
            let ms = l
                .split(", ")
                .nth(1)
                .and_then(|s| s.strip_suffix(" ms device time)"))
                .unwrap_or_else(|| panic!("no device time in {l:?}"));
            ms.parse().expect("a number of milliseconds")
        })
        .collect()
}

/// How many launches of a kernel whose name contains `kernel` the trace holds, each checked to
/// write what it does not only read whole (`w`, as many bytes as the allocation): its record
/// came through the launch hook, which gave the signature reader the grid.
fn written_whole(records: &[serde_json::Value], kernel: &str) -> usize {
    let funcs: Vec<&serde_json::Value> = of_kind(records, "kernel")
        .into_iter()
        .filter(|k| k["name"].as_str().is_some_and(|n| n.contains(kernel)))
        .map(|k| &k["func"])
        .collect();
    let launches: Vec<&serde_json::Value> = of_kind(records, "launch")
        .into_iter()
        .filter(|l| funcs.contains(&&l["func"]))
        .collect();
    for l in &launches {
        let writes: Vec<&serde_json::Value> = l["touches"]
            .as_array()
            .expect("touches")
            .iter()
            .filter(|t| t["access"] != "r")
            .collect();
        assert!(
            !writes.is_empty()
                && writes
                    .iter()
                    .all(|t| t["access"] == "w" && t["bytes"].as_u64() > Some(0)),
            "{kernel}: a launch whose outputs are not written whole: {l}"
        );
    }
    launches.len()
}

/// `script` at batch `batch` within `fraction` of its peak; `whole`: kernels (name fragments)
/// that must be traced, every launch writing its outputs whole (replayable).
/// The optimizer's foreach launches (SGD's momentum and update) read by their metadata's
/// layout: every touch has the tensor's own extent (the conservative rule gives none), the
/// momentum's scaling (one list) and the update alike.
fn foreach_read_exactly(records: &[serde_json::Value]) -> usize {
    let kernels: Vec<(&serde_json::Value, bool)> = of_kind(records, "kernel")
        .into_iter()
        .filter_map(|k| {
            let n = k["name"].as_str()?;
            n.contains("multi_tensor_apply_kernel")
                .then(|| (&k["func"], n.contains("TensorListMetadata<1>")))
        })
        .collect();
    let (mut one, mut read) = (0, 0);
    let mut launches = 0;
    for l in of_kind(records, "launch") {
        let Some(&(_, single)) = kernels.iter().find(|k| *k.0 == l["func"]) else {
            continue;
        };
        launches += 1;
        let touches = l["touches"].as_array().expect("touches");
        assert!(
            !touches.is_empty() && touches.iter().all(|t| t["bytes"].as_u64() > Some(0)),
            "a foreach launch read as words: {l}"
        );
        let count = |a: &str| touches.iter().filter(|t| t["access"] == a).count();
        if single {
            one = one.max(touches.len());
        } else {
            read = read.max(count("r"));
        }
    }
    // How many tensors one launch takes is the torch version's (2.15: all of ResNet-50's 161;
    // 2.11: 110 at depth 1, 64 at depth 2): both kinds of launch are read, tensor by tensor.
    assert!(
        one > 0 && read > 0,
        "momentum scaled over {one} tensors, the update reads {read}"
    );
    launches
}

/// ATen's reductions (bias gradients, sums) read by their `ReduceOp`'s tail: one input read,
/// the rest `rw`, never a word of the offset calculators (stale stack bytes that once equalled
/// another tensor's address and made ResNet-50's plan at 0.3 1.37x instead of 1.26x).
fn reductions_read_by_their_tail(records: &[serde_json::Value]) -> usize {
    let funcs: Vec<&serde_json::Value> = of_kind(records, "kernel")
        .into_iter()
        .filter(|k| {
            k["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("void at::native::reduce_kernel<"))
        })
        .map(|k| &k["func"])
        .collect();
    let mut launches = 0;
    for l in of_kind(records, "launch") {
        if !funcs.contains(&&l["func"]) {
            continue;
        }
        launches += 1;
        let touches = l["touches"].as_array().expect("touches");
        let reads = touches.iter().filter(|t| t["access"] == "r").count();
        assert!(
            reads <= 1 && touches.len() <= 5 && (reads == 1 || touches.len() == 1),
            "a reduction not read by its tail: {l}"
        );
    }
    launches
}

fn guided(script: &str, batch: &str, name: &str, fraction: f64, whole: &[&str]) {
    guided_on(&venv_python(), script, batch, name, fraction, whole)
}

/// [`guided`] on the torch of `python` (a venv's).
fn guided_on(
    python: &std::path::Path,
    script: &str,
    batch: &str,
    name: &str,
    fraction: f64,
    whole: &[&str],
) {
    const STEPS: usize = 8;
    let steps = STEPS.to_string();
    let args = ["--steps", steps.as_str(), "--batch", batch];
    let (out, report) = torch_example_of(
        python,
        &["--policy", "none"],
        &[],
        script,
        &args,
        &format!("{name}-p"),
    );
    let base = step_times(&out)[STEPS - 1];
    let budget = (report["peak_bytes"].as_u64().expect("a peak") as f64 * fraction) as u64;
    let limit = budget.to_string();
    // The program waits for the planner: the simulated GPU runs a step in far less host time
    // than planning takes, and on a real GPU the plan would be ready by the next step.
    let wait = [("MARMOSET_PLAN_WAIT", "1"), ("MARMOSET_LOG", "info")];
    let under = |policy: &str, trace: Option<&std::path::Path>| {
        let mut a = vec!["--policy", policy, "--memory-limit", &limit];
        if let Some(t) = trace {
            a.extend(["--trace", t.to_str().unwrap()]);
        }
        let (out, report) = torch_example_of(
            python,
            &a,
            &wait,
            script,
            &args,
            &format!("{name}-{policy}"),
        );
        assert!(report["sticky_error"].is_null(), "a trap: {report}");
        let held = report["peak_bytes"].as_u64().unwrap();
        assert!(held <= budget, "{policy}: peak {held} B over {budget} B");
        let times = step_times(&out);
        assert_eq!(times.len(), STEPS, "{}{}", stdout(&out), stderr(&out));
        (out, times)
    };
    let (_, lru) = under("lru", None);
    let last_lru = lru[STEPS - 1];
    let mut report = format!(
        "{name} at {fraction} of its peak (simulated): unlimited {base:.2} ms a step, lru {last_lru:.2} ms"
    );
    for policy in ["capuchin", "auto"] {
        let trace = temp_path(&format!("torch-guided-{name}-{policy}.jsonl"));
        let (out, times) = under(policy, Some(&trace));
        let within = planned_budget(&trace, budget).to_string();
        let offline = plan_offline(&trace, &within, policy);
        let records = take_trace(&trace);
        for k in whole {
            assert!(written_whole(&records, k) > 0, "{name}: no launch of {k}");
        }
        assert!(
            foreach_read_exactly(&records) > 0,
            "{name}: no foreach launch"
        );
        assert!(
            reductions_read_by_their_tail(&records) > 0,
            "{name}: no reduction"
        );
        let err = stderr(&out);
        assert!(
            err.contains("the plan guides from this iteration"),
            "{policy}: {err}"
        );
        // The plan that guides is the training step's (the setup's loops may be planned first).
        let plan = *of_kind(&records, "plan").last().expect("a plan");
        let (start, period) = (plan["start"].as_u64().unwrap(), plan["period"].as_u64());
        let predicted = plan["predicted_ms"].as_f64().unwrap();
        // No divergence from the plan's iteration on, but at the end of the run (the program's
        // teardown is not a step).
        let last_call = records
            .iter()
            .filter(|r| r["kind"] == "launch" || r["kind"] == "cudnn")
            .map(|r| r["seq"].as_u64().unwrap())
            .max()
            .unwrap();
        for d in of_kind(&records, "divergence") {
            let at = d["at"].as_u64().unwrap();
            assert!(
                at < start || d["period"].as_u64() != period || at > last_call,
                "{name} under {policy} left the planned sequence mid-run: {d}\n{err}"
            );
        }
        let last = times[STEPS - 1];
        assert!(
            (last / predicted - 1.0).abs() <= 0.10,
            "{name} under {policy}: the last guided step took {last:.2} ms against {predicted:.2} ms predicted (simulated)\n{err}"
        );
        if policy == "auto" {
            assert!(
                last < last_lru,
                "{name}: auto {last:.2} ms, not below lru's {last_lru:.2} ms (simulated)"
            );
        }
        let again = agrees_offline(&format!("{name} under {policy}"), &offline, plan);
        report += &format!(
            ", {policy} {last:.2} ms (predicted {predicted:.2} ms; {again:.2} ms offline)"
        );
    }
    eprintln!("{report}");
}

/// ResNet-50 at batch 32.
#[test]
fn resnet50_is_guided_to_the_end_at_half_its_peak_as_predicted() {
    guided("resnet50.py", "32", "r50", 0.5, &[]);
}

/// The same on torch 2.11, the lent GPUs' (its kernels, signatures and launch paths are another
/// version's: readers that know one torch only fail here).
#[test]
fn resnet50_on_torch_2_11_is_guided_to_the_end_at_half_its_peak_as_predicted() {
    guided_on(
        &venv_python_of("2.11.0"),
        "resnet50.py",
        "32",
        "r50-211",
        0.5,
        &[],
    );
}

/// ResNet-50 at batch 32 within 0.3 of its peak: long collective recomputations, whose
/// sources the executor must drop again as soon as the chain is done with them, as the plan
/// has it (held until the call ended, they ran 26% over the prediction).
#[test]
fn resnet50_is_guided_to_the_end_at_three_tenths_of_its_peak_as_predicted() {
    guided("resnet50.py", "32", "r50", 0.3, &[]);
}

/// The BERT-like encoder at batch 4; its LayerNorm, dropout and strided copy launches (the
/// attention's `.contiguous()` inputs, read by the strided layout, not as words) write their
/// outputs whole.
#[test]
fn bert_is_guided_to_the_end_at_half_its_peak_as_predicted() {
    guided(
        "bert.py",
        "4",
        "bert",
        0.5,
        &[
            "vectorized_layer_norm_kernel",
            "fused_dropout_kernel",
            "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda",
            "fmha_cutlassF_f32",
        ],
    );
}

/// A short run as a new user makes it (issue 40): ResNet-50 for 5 steps under a budget of half
/// its peak, the default policy, `marmoset run --sim` as the README has it (nothing set: the
/// program waits for the planner because `--sim` says so). The plan guides from its third step,
/// and the last step is not the passive policy's.
#[test]
fn a_five_step_run_is_guided_from_its_third_step() {
    let args = ["--steps", "5", "--batch", "8"];
    let (_, report) = torch_example(&["--policy", "none"], "resnet50.py", &args, "short-p");
    let budget = (report["peak_bytes"].as_u64().expect("a peak") / 2).to_string();
    let info = [("MARMOSET_LOG", "info")];
    let run = |policy: Option<&str>| {
        let mut a = vec!["--memory-limit", budget.as_str()];
        if let Some(p) = policy {
            a.extend(["--policy", p]);
        }
        let (out, report) = torch_example_with(
            &a,
            &info,
            "resnet50.py",
            &args,
            &format!("short-{}", policy.unwrap_or("default")),
        );
        assert!(report["sticky_error"].is_null(), "a trap: {report}");
        (step_times(&out), stderr(&out))
    };
    let (lru, _) = run(Some("lru"));
    let (times, err) = run(None);
    assert_eq!(times.len(), 5, "{err}");
    assert!(
        err.contains("the plan guides from this iteration"),
        "no plan guided: {err}"
    );
    assert!(
        times[4] < lru[4] && times[3] < lru[3],
        "the default policy's steps {times:?} against lru's {lru:?} (simulated)"
    );
}

/// The host link a plan assumes is the device's, measured before any eviction has: on the
/// simulated P100 (12 GB/s, simgpu/profiles/p100.json), by one timed copy the first time memory
/// is short, and the plan's link, from that copy or the evictions since, within 10% of it.
#[test]
fn the_plan_assumes_the_link_the_device_has() {
    let profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("simgpu/profiles/p100.json")).expect("p100.json"),
    )
    .expect("a profile in JSON");
    let device = profile["pcie_d2h_gbs"].as_f64().expect("pcie_d2h_gbs") * 1e9;
    let args = ["--steps", "4", "--batch", "32"];
    let (_, report) = torch_example(&["--policy", "none"], "resnet50.py", &args, "link-p");
    let limit = (report["peak_bytes"].as_u64().expect("a peak") / 2).to_string();
    let trace = temp_path("torch-link.jsonl");
    let a = [
        "--memory-limit",
        limit.as_str(),
        "--trace",
        trace.to_str().unwrap(),
    ];
    let report = temp_path("torch-link-report.json");
    let mut c = torch_command("--sim=p100", &a, "resnet50.py", &args);
    c.env("SIMGPU_MODE", "shape")
        .env("SIMGPU_REPORT", &report)
        .env("MARMOSET_PLAN_WAIT", "1")
        .env("MARMOSET_LOG", "info");
    let out = torch_output(&mut c);
    ok(&out);
    std::fs::remove_file(&report).ok();
    let records = take_trace(&trace);
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains("the host link measured by a copy"))
        .unwrap_or_else(|| panic!("no measured link: {err}"));
    let measured: f64 = line
        .strip_suffix(" GB/s")
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no GB/s in {line:?}"));
    assert!(
        (measured * 1e9 / device - 1.0).abs() < 0.05,
        "{line}: the simulated P100's link is {device} B/s"
    );
    let first_evict = records.iter().position(|r| r["kind"] == "evict");
    let plan = *of_kind(&records, "plan").first().expect("a plan");
    let link = plan["pcie_bps"][0].as_f64().expect("the plan's link");
    assert!(
        (link / device - 1.0).abs() < 0.10,
        "the plan assumed {link} B/s, the simulated P100 has {device} B/s: {plan}"
    );
    eprintln!(
        "the link measured by a copy: {measured} GB/s; the plan's: {:.2} GB/s; the first eviction at record {first_evict:?} (simulated P100, {device} B/s)",
        link / 1e9
    );
}
