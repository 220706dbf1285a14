//! libmarmoset.so under the workloads: results unchanged, every call seen whichever way it was
//! resolved, traces consistent, and the host process safe from bad settings and our own faults.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::HashMap;
use std::process::Command;

/// The trainer's own call counts ("calls alloc=.. free=.. ...").
fn own_counts(out: &str) -> HashMap<String, u64> {
    let line = out
        .lines()
        .find(|l| l.starts_with("calls "))
        .expect("a calls line");
    line.split_whitespace()
        .skip(1)
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_trainer_is_unchanged_bit_for_bit_and_the_trace_counts_its_calls() {
    let plain = run_sim("h100", &[], "trainer", &["6"]);
    ok(&plain);
    let (shim, records) = run_shim(&[], "trainer", &["6"]);
    ok(&shim);
    assert_eq!(
        stdout(&plain),
        stdout(&shim),
        "losses, checksum and counts identical"
    );
    let losses: Vec<f64> = stdout(&plain)
        .lines()
        .filter(|l| l.starts_with("iter "))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(losses.len(), 6);
    assert!(losses[5] < losses[0], "it learns: {losses:?}");
    let own = own_counts(&stdout(&shim));
    assert_eq!(records[0]["kind"], "header");
    for kind in ["alloc", "free", "copy", "memset", "launch", "cudnn", "sync"] {
        assert_eq!(of_kind(&records, kind).len() as u64, own[kind], "{kind}");
    }
    // Sequence numbers are unique, and every cuDNN convolution names its tensors' allocations.
    let mut seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), records.len());
    for r in of_kind(&records, "cudnn") {
        if r["api"] == "cudnnConvolutionForward" {
            let access = accesses(r);
            let with_ws = r["workspace"].as_u64().unwrap() > 0;
            assert_eq!(
                access,
                if with_ws {
                    vec!["r", "r", "w", "rw"]
                } else {
                    vec!["r", "r", "w"]
                },
                "{r}"
            );
            assert_eq!(r["tensors"][0]["role"], "x");
        }
    }
}

fn alloc_id(records: &[Value], ptr: u64) -> u64 {
    records
        .iter()
        .find(|r| r["kind"] == "alloc" && r["ptr"] == ptr)
        .unwrap_or_else(|| panic!("no allocation at {ptr}"))["alloc"]
        .as_u64()
        .unwrap()
}

#[test]
fn calls_reached_through_rtld_local_handles_proc_address_and_entry_points_are_seen() {
    let (o, records) = run_shim(&[], "dl_probe", &[]);
    ok(&o);
    let v = values(&o);
    let allocs = of_kind(&records, "alloc");
    let api_of = |key: &str| {
        let ptr: u64 = v[key].parse().unwrap();
        allocs
            .iter()
            .find(|r| r["ptr"] == ptr)
            .unwrap_or_else(|| panic!("{key} not traced"))["api"]
            .clone()
    };
    assert_eq!(
        api_of("dlsym_handle_alloc"),
        "cudaMalloc",
        "dlsym on an RTLD_LOCAL handle"
    );
    assert_eq!(
        api_of("proc_address_alloc"),
        "cuMemAlloc_v2",
        "cuGetProcAddress_v2"
    );
    assert_eq!(
        api_of("entry_point_alloc"),
        "cuMemAlloc_v2",
        "cudaGetDriverEntryPointByVersion"
    );
    let frees = of_kind(&records, "free");
    assert_eq!(frees.len(), 2);
    assert!(
        frees.iter().all(|f| f["alloc"].is_u64()),
        "frees matched to their allocations"
    );
}

#[test]
fn every_launch_entry_point_and_pointers_inside_struct_parameters() {
    let (o, records) = run_shim(&[], "sim_probe", &["kernels"]);
    ok(&o);
    let launches = of_kind(&records, "launch");
    let apis: Vec<&str> = launches
        .iter()
        .map(|r| r["api"].as_str().unwrap())
        .collect();
    for api in [
        "cudaLaunchKernel",
        "__cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
    ] {
        assert!(apis.contains(&api), "{api} in {apis:?}");
    }
    let (x, y) = (
        alloc_id(&records, launches_ptr(&records, 0)),
        alloc_id(&records, launches_ptr(&records, 1)),
    );
    // The six axpy launches (kernelParams and the packed buffer alike) touch x and y.
    for r in launches.iter().take(6) {
        let t: Vec<u64> = r["touches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["alloc"].as_u64().unwrap())
            .collect();
        assert_eq!(t, [x, y], "{r}");
    }
    // scale(struct { float *p; int n; }, float): the pointer inside the struct is y.
    let scale = launches[6];
    let t: Vec<u64> = scale["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["alloc"].as_u64().unwrap())
        .collect();
    assert_eq!(t, [y], "{scale}");
    assert_eq!(
        launches[7]["result"], 98,
        "the unknown kernel's error is recorded"
    );
}

/// The device pointer of the n-th allocation in the trace.
fn launches_ptr(records: &[Value], n: usize) -> u64 {
    of_kind(records, "alloc")[n]["ptr"].as_u64().unwrap()
}

#[test]
fn a_backend_execution_is_attributed_to_its_variant_pack_allocations() {
    let (o, records) = run_shim(&[], "backend_conv", &[]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["backend_matches_legacy"], "ok");
    let ptr = |k: &str| u64::from_str_radix(v[k].trim_start_matches("0x"), 16).unwrap();
    let exec = of_kind(&records, "cudnn")
        .into_iter()
        .find(|r| r["api"] == "cudnnBackendExecute")
        .expect("traced");
    let touches: Vec<(u64, &str)> = exec["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["alloc"].as_u64().unwrap(), t["access"].as_str().unwrap()))
        .collect();
    let want = vec![
        (alloc_id(&records, ptr("x")), "r"),
        (alloc_id(&records, ptr("w")), "r"),
        (alloc_id(&records, ptr("y")), "w"),
        (alloc_id(&records, ptr("ws")), "rw"),
    ];
    assert_eq!(touches, want, "{exec}");
    assert_eq!(
        exec["workspace"].as_u64().unwrap().to_string(),
        v["workspace_bytes"]
    );
}

#[test]
fn a_backend_execution_without_workspace_is_attributed_though_cudnn_gives_its_pack_back_not() {
    // Engine 0 (implicit GEMM) needs no workspace: the variant pack's workspace pointer is NULL,
    // and cuDNN then gives the pack's unique ids back not (as the real one did on an H200):
    // Marmoset takes the pack's contents as the program set them.
    let (o, records) = run_shim(&[], "backend_conv", &["implicit-gemm"]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["workspace_bytes"], "0");
    assert_ne!(
        v["pack_ids_status"], "0",
        "the simulated cuDNN refuses the read-back"
    );
    let ptr = |k: &str| u64::from_str_radix(v[k].trim_start_matches("0x"), 16).unwrap();
    let exec = of_kind(&records, "cudnn")
        .into_iter()
        .find(|r| r["api"] == "cudnnBackendExecute")
        .expect("traced");
    let touches: Vec<(u64, &str)> = exec["touches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["alloc"].as_u64().unwrap(), t["access"].as_str().unwrap()))
        .collect();
    let want = vec![
        (alloc_id(&records, ptr("x")), "r"),
        (alloc_id(&records, ptr("w")), "r"),
        (alloc_id(&records, ptr("y")), "w"),
    ];
    assert_eq!(touches, want, "{exec}");
}

#[test]
fn bad_settings_are_named_and_change_nothing() {
    let plain = run_sim("h100", &[], "trainer", &["2"]);
    for (var, val, accepted) in [
        ("MARMOSET_POLICY", "fastest", "none"),
        ("MARMOSET_LOG", "chatty", "error, warn, info, debug"),
        ("MARMOSET_DISABLE", "perhaps", "1, 0"),
        ("MARMOSET_TRACE_TIMING", "yes please", "1, 0"),
        ("MARMOSET_MEMORY_LIMIT", "2.5", "fraction"),
        ("MARMOSET_WORKSPACE_LIMIT", "64 apples", "MiB"),
    ] {
        let (o, records) = run_shim(&[(var, val)], "trainer", &["2"]);
        assert_eq!(o.status.code(), plain.status.code(), "{var}");
        assert_eq!(
            stdout(&o),
            stdout(&plain),
            "{var}: the program's output is unchanged"
        );
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("marmoset")).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(
            lines[0].contains(var) && lines[0].contains(val) && lines[0].contains(accepted),
            "{err}"
        );
        assert!(records.is_empty(), "{var}: pass-through writes no trace");
    }
}

#[test]
fn disable_and_an_unwritable_trace_pass_through() {
    let plain = run_sim("h100", &[], "trainer", &["2"]);
    let (o, records) = run_shim(&[("MARMOSET_DISABLE", "1")], "trainer", &["2"]);
    assert_eq!(stdout(&o), stdout(&plain));
    // Off, and the trace it was asked for said to be idle, in one line.
    let err = stderr(&o);
    assert!(
        records.is_empty()
            && err.lines().count() == 1
            && err.contains("MARMOSET_DISABLE=1")
            && err.contains("MARMOSET_TRACE"),
        "{err}"
    );
    let mut c = std::process::Command::new(marmoset());
    c.args(["run", "--sim", "--trace", "/nonexistent-dir/t.jsonl", "--"])
        .arg(workloads().join("trainer"))
        .arg("2");
    let o = c.output().unwrap();
    assert_eq!(stdout(&o), stdout(&plain));
    assert!(stderr(&o).contains("MARMOSET_TRACE"), "{}", stderr(&o));
}

#[test]
fn a_panic_inside_a_hook_leaves_the_process_running_and_the_call_forwarded() {
    let plain = run_sim("h100", &[], "trainer", &["3"]);
    let (o, records) = run_shim(
        &[("MARMOSET_TEST_PANIC", "cudnnConvolutionForward")],
        "trainer",
        &["3"],
    );
    ok(&o);
    assert_eq!(
        stdout(&o),
        stdout(&plain),
        "the panicking call was forwarded, results unchanged"
    );
    let err = stderr(&o);
    assert!(
        err.contains("panic")
            && err.contains("cudnnConvolutionForward")
            && err.contains("pass through"),
        "{err}"
    );
    assert!(
        of_kind(&records, "cudnn")
            .iter()
            .all(|r| r["api"] != "cudnnConvolutionForward"),
        "off from then on"
    );
    assert!(
        !of_kind(&records, "alloc").is_empty(),
        "what came before was traced"
    );
}

#[test]
fn a_forked_child_passes_through_and_the_parent_keeps_tracing() {
    let (o, records) = run_shim(&[], "sim_probe", &["fork"]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["child_malloc"], "0");
    assert_eq!(v["child_exit"], "0");
    let sizes: Vec<u64> = of_kind(&records, "alloc")
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(
        sizes,
        [1000, 3000],
        "the child's allocation is not in the parent's trace"
    );
}

#[test]
fn eight_threads_give_a_consistent_trace() {
    let (o, records) = run_shim(&[], "sim_probe", &["threads"]);
    ok(&o);
    let mut recs: Vec<&Value> = records.iter().collect();
    recs.sort_by_key(|r| r["seq"].as_u64().unwrap());
    assert_eq!(of_kind(&records, "alloc").len(), 800);
    assert_eq!(of_kind(&records, "free").len(), 800);
    assert_eq!(of_kind(&records, "launch").len(), 400);
    // In seq order: each free ends an allocation that is live, no address is live twice, and
    // every launch touches two live allocations.
    let mut live_by_ptr: HashMap<u64, u64> = HashMap::new();
    let mut live: std::collections::HashSet<u64> = Default::default();
    for r in recs {
        match r["kind"].as_str().unwrap() {
            "alloc" => {
                let (ptr, id) = (r["ptr"].as_u64().unwrap(), r["alloc"].as_u64().unwrap());
                assert!(
                    live_by_ptr.insert(ptr, id).is_none(),
                    "address live twice: {r}"
                );
                live.insert(id);
            }
            "free" => {
                let id = r["alloc"].as_u64().expect("a known allocation");
                assert!(live.remove(&id), "free of a dead allocation: {r}");
                assert_eq!(live_by_ptr.remove(&r["ptr"].as_u64().unwrap()), Some(id));
            }
            "launch" => {
                let t = r["touches"].as_array().unwrap();
                assert_eq!(t.len(), 2, "{r}");
                assert!(
                    t.iter()
                        .all(|t| live.contains(&t["alloc"].as_u64().unwrap())),
                    "{r}"
                );
            }
            _ => {}
        }
    }
    assert!(live.is_empty());
}

#[test]
fn the_trace_is_flushed_when_the_program_calls_exit_directly() {
    let (o, records) = run_shim(&[], "sim_probe", &["exit"]);
    ok(&o);
    let sizes: Vec<u64> = of_kind(&records, "alloc")
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [4096, 8192, 12288]);
}

#[test]
fn device_timings_and_inspect() {
    let (o, records) = run_shim(&[("MARMOSET_TRACE_TIMING", "1")], "trainer", &["2"]);
    ok(&o);
    let timings = of_kind(&records, "timing");
    let measured = of_kind(&records, "launch").len()
        + of_kind(&records, "copy").len()
        + of_kind(&records, "memset").len();
    let compute = of_kind(&records, "cudnn")
        .iter()
        .filter(|r| !r["api"].as_str().unwrap().contains("Get"))
        .count();
    assert_eq!(
        timings.len(),
        measured + compute,
        "one timing per launch, copy, memset and cuDNN computation"
    );
    assert!(
        timings
            .iter()
            .all(|t| t["device_ms"].as_f64().unwrap() > 0.0)
    );
    // Timing's own event calls are not traced as the program's.
    assert!(
        of_kind(&records, "sync")
            .iter()
            .all(|r| r["api"] == "cudaDeviceSynchronize")
    );
    let path = temp_path("inspect.jsonl");
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(marmoset())
        .args(["inspect", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    ok(&out);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    let own = own_counts(&stdout(&o));
    assert_eq!(s["by_kind"]["alloc"].as_u64().unwrap(), own["alloc"]);
    assert!(s["peak_load_bytes"].as_u64().unwrap() > 0);
    assert!(s["device_ms"]["cudnn"].as_f64().unwrap() > 0.0);
    let human = std::process::Command::new(marmoset())
        .arg("inspect")
        .arg(&path)
        .output()
        .unwrap();
    let h = stdout(&human);
    assert!(
        h.contains("peak memory load") && h.contains("cudnnConvolutionForward"),
        "{h}"
    );
    std::fs::remove_file(path).ok();
}

#[test]
fn hook_overhead_benchmark_runs() {
    let (o, _) = run_shim(&[], "hook_bench", &["20000"]);
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains("shim=loaded"), "{out}");
    for key in ["direct_ns", "hooked_ns", "added_ns"] {
        assert!(out.contains(key), "{out}");
    }
    let plain = run_sim("h100", &[], "hook_bench", &["20000"]);
    assert!(stdout(&plain).contains("shim=absent"));
}

#[test]
fn a_failed_trace_write_is_one_warning_and_the_trace_ends_with_a_whole_record() {
    let plain = run_sim("h100", &[], "trainer", &["2"]);
    ok(&plain);
    let trace = temp_path("cut-by-limit.jsonl");
    let _ = std::fs::remove_file(&trace);
    // A 20 KiB file size limit (SIGXFSZ ignored, so writes fail with EFBIG): the disk is full
    // in the middle of the run. And /dev/full: every write fails.
    let full = std::path::PathBuf::from("/dev/full");
    for path in [&trace, &full] {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("ulimit -f 40; trap '' XFSZ; exec \"$0\" \"$@\"")
            .arg(marmoset())
            .args(["run", "--sim", "--trace"])
            .arg(path)
            .arg("--")
            .arg(workloads().join("trainer"))
            .arg("2");
        for (k, _) in std::env::vars() {
            if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
                c.env_remove(k);
            }
        }
        let o = c.output().unwrap();
        ok(&o);
        assert_eq!(stdout(&o), stdout(&plain), "the program is unchanged");
        let err = stderr(&o);
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("marmoset")).collect();
        assert_eq!(ours.len(), 1, "{err}");
        assert!(
            ours[0].contains("writing the trace") && ours[0].contains(&path.display().to_string()),
            "{err}"
        );
    }
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.len() > 1000 && text.len() <= 20480, "{}", text.len());
    assert!(text.ends_with('\n'), "ends with a whole line");
    for l in text.lines() {
        serde_json::from_str::<serde_json::Value>(l).expect("whole JSON lines only");
    }
    let o = Command::new(marmoset())
        .arg("inspect")
        .arg(&trace)
        .output()
        .unwrap();
    ok(&o);
    assert!(
        stderr(&o).contains("cut: writing it failed"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(&trace).ok();
}
