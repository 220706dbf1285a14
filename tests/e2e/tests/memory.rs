//! Memory virtualisation (MARMOSET_POLICY=lru) on the simulated GPU: programs run within a budget
//! smaller than they need, with results identical bit for bit, and no operation ever touches an
//! evicted tensor (the simulator would trap).

use marmoset_e2e::*;
use serde_json::Value;

/// The trainer, 8 blocks deep at 64 x 64: its peak, then runs at fractions of it.
const TRAINER: [&str; 4] = ["2", "16", "64", "8"];

#[test]
fn the_trainer_runs_bit_for_bit_at_half_and_a_third_of_its_peak() {
    let r0 = temp_path("lru-unlimited.json");
    let plain = run_sim(
        "h100",
        &[("SIMGPU_REPORT", r0.to_str().unwrap())],
        "trainer",
        &TRAINER,
    );
    ok(&plain);
    let peak = sim_report(&r0)["peak_bytes"].as_u64().unwrap();
    assert!(
        peak > 64 << 20,
        "a workload big enough to need several evictions: {peak}"
    );
    for fraction in [0.5, 0.3] {
        let budget = (peak as f64 * fraction) as u64;
        let r = temp_path(&format!("lru-{fraction}.json"));
        let (o, records) = run_shim(
            &[
                ("MARMOSET_POLICY", "lru"),
                ("MARMOSET_MEMORY_LIMIT", &budget.to_string()),
                ("SIMGPU_REPORT", r.to_str().unwrap()),
            ],
            "trainer",
            &TRAINER,
        );
        ok(&o);
        assert_eq!(
            stdout(&o),
            stdout(&plain),
            "{fraction} P: the same losses and checksum, bit for bit"
        );
        let rep = sim_report(&r);
        assert!(
            rep["peak_bytes"].as_u64().unwrap() <= budget,
            "{fraction} P: {rep}"
        );
        assert_eq!(rep["sticky_error"], Value::Null, "no trap");
        assert!(!of_kind(&records, "evict").is_empty() && !of_kind(&records, "restore").is_empty());
        assert!(rep["d2h_bytes"].as_u64().unwrap() > 0);
        // Without Marmoset, the same memory is not enough.
        let small = run_sim(
            "h100",
            &[("SIMGPU_MEMORY", &budget.to_string())],
            "trainer",
            &TRAINER,
        );
        assert!(!small.status.success());
        assert!(
            stderr(&small).contains("cudaErrorMemoryAllocation"),
            "{}",
            stderr(&small)
        );
    }
}

#[test]
fn the_trap_fires_when_one_restore_is_skipped() {
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
            ("MARMOSET_TEST_SKIP_RESTORE", "1"),
        ],
        "mem_probe",
        &["streams"],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("illegal address") && err.contains("not mapped"),
        "{err}"
    );
    // And without skipping, the same program is fine.
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
        ],
        "mem_probe",
        &["streams"],
    );
    ok(&o);
}

#[test]
fn tensors_across_streams_freed_while_evicted_and_in_stream_order() {
    for (probe, key) in [
        ("streams", "streams"),
        ("freed-evicted", "freed_evicted"),
        ("async", "async"),
    ] {
        let (o, records) = run_shim(
            &[
                ("MARMOSET_POLICY", "lru"),
                ("MARMOSET_MEMORY_LIMIT", "16MiB"),
            ],
            "mem_probe",
            &[probe],
        );
        ok(&o);
        assert_eq!(values(&o)[key], "ok", "{probe}");
        assert!(
            !of_kind(&records, "evict").is_empty(),
            "{probe}: the budget forced evictions"
        );
        if probe == "freed-evicted" {
            // A tensor freed while evicted is never brought back.
            let evicted: std::collections::HashSet<u64> = of_kind(&records, "evict")
                .iter()
                .map(|r| r["alloc"].as_u64().unwrap())
                .collect();
            let freed_first: Vec<u64> = of_kind(&records, "free")
                .iter()
                .take(4)
                .map(|r| r["alloc"].as_u64().unwrap())
                .collect();
            assert!(
                freed_first.iter().any(|a| evicted.contains(a)),
                "some were freed while evicted"
            );
            for a in &freed_first {
                assert!(
                    of_kind(&records, "restore")
                        .iter()
                        .all(|r| r["alloc"].as_u64().unwrap() != *a)
                );
            }
        }
    }
}

#[test]
fn a_failing_eviction_copy_leaves_the_tensor_resident_and_intact() {
    let (o, records) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "10MiB"),
            ("SIMGPU_FAIL", "copy:3"),
        ],
        "mem_probe",
        &["fault"],
    );
    ok(&o);
    assert_eq!(values(&o)["fault"], "ok");
    assert!(
        stderr(&o).contains("injected failure: copy #3") && stderr(&o).contains("stays resident"),
        "{}",
        stderr(&o)
    );
    assert!(
        !of_kind(&records, "evict").is_empty(),
        "another tensor was evicted instead"
    );
}

#[test]
fn a_thousand_random_operations_match_a_shadow_copy_byte_for_byte() {
    let (o, records) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
        ],
        "mem_probe",
        &["random", "1000"],
    );
    ok(&o);
    assert!(stdout(&o).contains("random=ok ops=1000"), "{}", stdout(&o));
    assert!(of_kind(&records, "evict").len() > 100 && of_kind(&records, "restore").len() > 100);
}

#[test]
fn an_operation_larger_than_the_budget_fails_with_out_of_memory_and_loses_nothing() {
    // 4 MiB tensors under a 3 MiB budget: the allocation itself cannot be satisfied.
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "3MiB"),
        ],
        "mem_probe",
        &["streams"],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("out of memory") && err.contains("-> 2"),
        "{err}"
    );
}

#[test]
fn the_budget_is_what_the_program_sees_as_the_device() {
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "1GiB"),
        ],
        "sim_probe",
        &["oom"],
    );
    ok(&o);
    assert_eq!(num(&o, "total"), (1u64 << 30) as f64);
    assert!(num(&o, "free_after") < 0.41 * (1u64 << 30) as f64);
    // A second 60% allocation fits: Marmoset evicts the first one (its bytes go to host).
    assert_eq!(num(&o, "runtime_oom"), 0.0);
    assert_eq!(num(&o, "driver_oom"), 0.0);
}

#[test]
fn a_budget_above_the_device_is_the_device_said_once() {
    // 1 GiB asked of a 48 MiB device, by a program whose 64 MiB are all live at once: the
    // device is the budget, the program sees it, and evictions keep the program within it.
    let device = 48u64 << 20;
    let plain = run_sim("h100", &[], "threads", &["4", "8", "3", "2048"]);
    ok(&plain);
    let r = temp_path("budget-above-device.json");
    let o = under_shim(
        "h100",
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "1GiB"),
            ("MARMOSET_LOG", "warn"),
            ("SIMGPU_MEMORY", &device.to_string()),
            ("SIMGPU_REPORT", r.to_str().unwrap()),
        ],
        "threads",
        &["4", "8", "3", "2048"],
    );
    ok(&o);
    assert_eq!(stdout(&o), stdout(&plain));
    let err = stderr(&o);
    assert_eq!(
        err.matches("is more than the device has").count(),
        1,
        "{err}"
    );
    let rep = sim_report(&r);
    assert!(rep["peak_bytes"].as_u64().unwrap() <= device, "{rep}");
    let seen = under_shim(
        "h100",
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "1GiB"),
            ("SIMGPU_MEMORY", &device.to_string()),
        ],
        "sim_probe",
        &["oom"],
    );
    assert_eq!(num(&seen, "total"), device as f64, "{}", stdout(&seen));
}

#[test]
fn the_lru_policy_asks_pytorch_for_one_allocation_per_tensor_without_overriding_the_user() {
    let show = |env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(marmoset());
        c.args([
            "run",
            "--sim",
            "--policy",
            "lru",
            "--",
            "sh",
            "-c",
            "echo \"[$PYTORCH_CUDA_ALLOC_CONF]\"",
        ]);
        c.env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .env_remove("PYTORCH_ALLOC_CONF")
            .env_remove("PYTORCH_NO_CUDA_MEMORY_CACHING");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    assert_eq!(stdout(&show(&[])).trim(), "[backend:cudaMallocAsync]");
    assert_eq!(
        stdout(&show(&[(
            "PYTORCH_CUDA_ALLOC_CONF",
            "max_split_size_mb:64"
        )]))
        .trim(),
        "[max_split_size_mb:64]"
    );
    let refused = show(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]);
    assert_eq!(stdout(&refused).trim(), "[expandable_segments:True]");
    assert!(
        stderr(&refused).contains("expandable segments"),
        "{}",
        stderr(&refused)
    );
    // And under none nothing is set.
    let mut c = std::process::Command::new(marmoset());
    c.args([
        "run",
        "--sim",
        "--",
        "sh",
        "-c",
        "echo \"[$PYTORCH_CUDA_ALLOC_CONF]\"",
    ])
    .env_remove("PYTORCH_CUDA_ALLOC_CONF");
    assert_eq!(stdout(&c.output().unwrap()).trim(), "[]");
}

#[test]
fn host_staging_memory_is_bounded() {
    // 16 MiB of device budget, but only 4 MiB of host memory for evicted tensors: the probe's
    // working set cannot be kept, and the allocation that cannot be satisfied fails cleanly.
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
            ("MARMOSET_HOST_LIMIT", "4MiB"),
        ],
        "mem_probe",
        &["freed-evicted"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("out of memory"), "{}", stderr(&o));
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
            ("MARMOSET_HOST_LIMIT", "64MiB"),
        ],
        "mem_probe",
        &["freed-evicted"],
    );
    ok(&o);
}

/// The first copy number whose injected failure hits a restore of `mem_probe random 200`.
fn a_restore_copy() -> String {
    for n in 1..=60 {
        let n = n.to_string();
        let (o, _) = run_shim(
            &[
                ("MARMOSET_POLICY", "lru"),
                ("MARMOSET_MEMORY_LIMIT", "16MiB"),
                ("MARMOSET_LOG", "info"),
                ("SIMGPU_FAIL", &format!("copy:{n}")),
            ],
            "mem_probe",
            &["random", "200"],
        );
        if stderr(&o).contains("restoring allocation") {
            return n;
        }
    }
    panic!("no restore among the first 60 copies");
}

#[test]
fn a_failed_restore_is_retried_from_the_host_copy_then_reported_with_the_drivers_error() {
    let n: u64 = a_restore_copy().parse().unwrap();
    let env = |fail: String, log: &'static str| {
        vec![
            ("MARMOSET_POLICY", "lru".to_string()),
            ("MARMOSET_MEMORY_LIMIT", "16MiB".to_string()),
            ("MARMOSET_LOG", log.to_string()),
            ("SIMGPU_FAIL", fail),
        ]
    };
    let run = |e: Vec<(&str, String)>| {
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_shim(&e, "mem_probe", &["random", "200"]).0
    };
    // Once: the retry copies the same host bytes in, and every byte still matches the shadow.
    let o = run(env(format!("copy:{n}"), "info"));
    ok(&o);
    assert!(stdout(&o).contains("random=ok"), "{}", stdout(&o));
    assert!(stderr(&o).contains("trying once more"), "{}", stderr(&o));
    let o = run(env(format!("copy:{n}"), "warn"));
    ok(&o);
    assert!(
        !stderr(&o).contains("marmoset:"),
        "a retry that works is not a warning: {}",
        stderr(&o)
    );
    // Twice: one warning naming the tensor and the driver's error, and the operation fails.
    let o = run(env(format!("copy:{n},copy:{}", n + 1), "warn"));
    assert!(!o.status.success());
    let err = stderr(&o);
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("marmoset:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains("restoring allocation")
            && ours[0].contains("failed twice")
            && ours[0].contains("CUDA_ERROR_UNKNOWN (999)"),
        "{err}"
    );
    assert!(!stdout(&o).contains("random=ok"), "{}", stdout(&o));
}

#[test]
fn out_of_memory_names_the_host_limit_when_that_is_what_stopped_eviction() {
    let (o, _) = run_shim(
        &[
            ("MARMOSET_POLICY", "lru"),
            ("MARMOSET_MEMORY_LIMIT", "16MiB"),
            ("MARMOSET_HOST_LIMIT", "2MiB"),
        ],
        "mem_probe",
        &["random", "200"],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("out of memory") && err.contains("MARMOSET_HOST_LIMIT (2097152 B"),
        "{err}"
    );
    assert!(!err.contains("nothing left to evict"), "{err}");
}

/// A budget smaller than what one call needs at once (torchlike's convolutions read and write
/// 4 MiB activations: 6 MiB cannot hold both): each such call runs beyond the budget, said once,
/// rather than be refused (a refused kernel launch would be skipped: `<<<...>>>` launches report
/// errors only through cudaGetLastError). Results bit for bit, under `lru` and `auto`.
#[test]
fn a_call_that_cannot_fit_in_the_budget_runs_beyond_it_said_once() {
    let args = ["2", "256", "32", "4", "2", "1"];
    let (_, plain) = unlimited("torchlike", &args);
    let budget = 6 << 20;
    for policy in ["lru", "auto"] {
        let (o, _, report) = planned(policy, budget, &[], "torchlike", &args);
        ok(&o);
        assert_eq!(stdout(&o), plain, "{policy}: every call ran");
        let err = stderr(&o);
        assert_eq!(
            err.matches("it runs beyond the budget").count(),
            1,
            "{policy}: said once: {err}"
        );
        assert!(
            report["peak_bytes"].as_u64().unwrap() > budget,
            "{policy}: the simulator saw it beyond: {report}"
        );
    }
}
