//! The simulated GPU, exercised through the C ABI by the workloads in tests/workloads.

use marmoset_e2e::*;

#[test]
fn convolutions_match_the_reference_for_every_algorithm_cuda13() {
    for seed in ["1", "2", "3"] {
        let o = run_sim("h100", &[], "conv_check", &[seed, "12"]);
        ok(&o);
        let out = stdout(&o);
        assert!(out.contains("17 passed, 0 failed"), "{out}");
        // Every algorithm family ran somewhere: FFT (4), Winograd (6) and non-fused (7) forward.
        assert!(out.contains("fwd[0124567]"), "{out}");
        assert!(out.contains("bwd-filter[012356]"), "{out}");
    }
}

#[test]
fn convolutions_match_the_reference_cuda12_runtime_p100() {
    let o = run_sim("p100", &[], "conv_check-cu12", &["7", "8"]);
    ok(&o);
    assert!(stdout(&o).contains("13 passed, 0 failed"), "{}", stdout(&o));
}

#[test]
fn out_of_memory_at_capacity_with_the_real_codes() {
    let o = run_sim("h100", &[("SIMGPU_MEMORY", "1GiB")], "sim_probe", &["oom"]);
    ok(&o);
    assert_eq!(num(&o, "total"), (1u64 << 30) as f64);
    assert_eq!(num(&o, "free"), (1u64 << 30) as f64);
    let big = ((1u64 << 30) / 10 * 6) as f64;
    assert!((num(&o, "free_after") - ((1u64 << 30) as f64 - big)).abs() < 4096.0);
    assert_eq!(num(&o, "runtime_oom"), 2.0, "cudaErrorMemoryAllocation");
    assert_eq!(num(&o, "driver_oom"), 2.0, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(num(&o, "async_oom"), 2.0);
    assert_eq!(num(&o, "after_free"), 0.0);
}

#[test]
fn unmapped_vmm_ranges_trap_for_copies_kernels_and_cudnn() {
    for (what, code) in [("copy", 700.0), ("kernel", 700.0), ("cudnn", 5001.0)] {
        let o = run_sim("h100", &[], "sim_probe", &[&format!("vmm-{what}")]);
        ok(&o);
        let v = values(&o);
        assert_eq!(v["mapped_readback"], "ok", "the mapped part stays readable");
        assert_eq!(num(&o, "trap_result"), code, "{what}: {}", stderr(&o));
        assert_eq!(
            num(&o, "sticky_malloc"),
            700.0,
            "the error is sticky, as a real context's"
        );
        let err = stderr(&o);
        assert!(
            err.contains("illegal address") && err.contains("not mapped"),
            "{err}"
        );
        // The message names an address inside the unmapped granule.
        let unmapped = u64::from_str_radix(v["unmapped_at"].trim_start_matches("0x"), 16).unwrap();
        let named = err
            .split("illegal address ")
            .nth(1)
            .unwrap()
            .split(':')
            .next()
            .unwrap();
        let named = u64::from_str_radix(named.trim_start_matches("0x"), 16).unwrap();
        assert!((unmapped..unmapped + (2 << 20)).contains(&named), "{err}");
    }
}

#[test]
fn copies_overlap_compute_across_streams_and_serialise_within_one() {
    let o = run_sim("h100", &[], "sim_probe", &["timing"]);
    ok(&o);
    let (k, c) = (num(&o, "kernel_ms"), num(&o, "copy_ms"));
    // 2 TFLOP at 66.9 TFLOPS; 256 MiB at 55 GB/s (h100 profile).
    assert!((k - 2e12 / 66.9e12 * 1e3).abs() / k < 0.01, "kernel {k}");
    assert!((c - 268435456.0 / 55e9 * 1e3).abs() / c < 0.01, "copy {c}");
    let two = num(&o, "two_streams_ms");
    let one = num(&o, "one_stream_ms");
    assert!(
        (two - k.max(c)).abs() / two < 0.01,
        "overlap: {two} vs max({k}, {c})"
    );
    assert!(
        (one - (k + c)).abs() / one < 0.01,
        "serial: {one} vs {k} + {c}"
    );
    assert_eq!(
        num(&o, "query_before_sync"),
        600.0,
        "cudaErrorNotReady before the work is done"
    );
    assert!(
        num(&o, "pageable_copy_ms") > 2.0 * c,
        "pageable copies are slower"
    );
    assert_eq!(
        num(&o, "pageable_query"),
        0.0,
        "pageable copies are synchronous"
    );
}

#[test]
fn elapsed_times_are_deterministic() {
    let a = run_sim("h100", &[], "sim_probe", &["timing"]);
    let b = run_sim("h100", &[], "sim_probe", &["timing"]);
    ok(&a);
    assert_eq!(stdout(&a), stdout(&b));
    let p = run_sim("p100", &[], "sim_probe", &["timing"]);
    assert_ne!(stdout(&a), stdout(&p), "the profile decides the times");
}

#[test]
fn kernels_launch_through_every_entry_point_with_real_parameter_buffers() {
    let o = run_sim("h100", &[], "sim_probe", &["kernels"]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["six_launches"], "ok");
    assert_eq!(v["struct_param"], "ok");
    let params: Vec<&str> = (0..4)
        .map(|i| v[&format!("axpy_param{i}")].as_str())
        .collect();
    assert_eq!(
        params,
        ["0+4", "4+4", "8+8", "16+8"],
        "int, float, two pointers"
    );
    assert_eq!(v["scale_param0"], "0+16");
    assert_eq!(v["scale_param1"], "16+4");
    assert_eq!(
        num(&o, "param_out_of_range"),
        1.0,
        "CUDA_ERROR_INVALID_VALUE"
    );
    assert_eq!(
        num(&o, "unknown_kernel"),
        98.0,
        "cudaErrorInvalidDeviceFunction"
    );
}

#[test]
fn driver_entry_points_follow_the_requested_version() {
    let o = run_sim("h100", &[], "sim_probe", &["entry"]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["cuMemAlloc_12000"], "cuMemAlloc_v2");
    assert_eq!(
        num(&o, "cuMemAlloc_3000_result"),
        500.0,
        "CUDA_ERROR_NOT_FOUND"
    );
    let text = stdout(&o);
    assert!(
        text.contains("cuMemAlloc_3000_result=500 status=2 null=1"),
        "{text}"
    );
    assert!(text.contains("cudnnCreate_result=500 status=1"), "{text}");
    assert_eq!(v["cuGetProcAddress_is_v2"], "1");
    assert_eq!(v["runtime_entry_point_same"], "1");
    assert_eq!(v["runtime_entry_point_default_same"], "1");
    assert_eq!(v["runtime_version"], "13020");
    assert_eq!(v["cudnn_version"], "92600");
    let cu12 = run_sim("h100", &[], "sim_probe-cu12", &["entry"]);
    assert_eq!(values(&cu12)["runtime_version"], "12080");
}

#[test]
fn shape_mode_simulates_40_gib_in_well_under_a_gib_of_host_memory() {
    let report = temp_path("shape-report.json");
    let o = run_sim(
        "h100",
        &[
            ("SIMGPU_MODE", "shape"),
            ("SIMGPU_REPORT", report.to_str().unwrap()),
        ],
        "sim_probe",
        &["shape", "40"],
    );
    ok(&o);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert!(r["peak_bytes"].as_u64().unwrap() >= 40 << 30, "{r}");
    assert_eq!(r["mode"], "shape");
    assert_eq!(r["simulated"], true);
    assert_eq!(r["cudnn_calls"], 39);
    assert_eq!(r["h2d_bytes"], 1u64 << 30);
    let rss_kib = num(&o, "maxrss_kib");
    assert!(rss_kib < 256.0 * 1024.0, "host memory {rss_kib} KiB");
    // 39 implicit-GEMM convolutions of 0.49 TFLOP each take about 0.42 s of device time.
    let t = r["virtual_time_s"].as_f64().unwrap();
    assert!(t > 0.3 && t < 0.6, "{t}");
    std::fs::remove_file(report).ok();
}

#[test]
fn fault_injection_fails_the_nth_allocation_copy_and_launch() {
    let o = run_sim(
        "h100",
        &[("SIMGPU_FAIL", "alloc:2,copy:3,launch:1")],
        "sim_probe",
        &["faults"],
    );
    ok(&o);
    let v = values(&o);
    let got: Vec<&str> = [
        "alloc1", "alloc2", "alloc3", "copy1", "copy2", "copy3", "launch1", "launch2",
    ]
    .iter()
    .map(|k| v[*k].as_str())
    .collect();
    assert_eq!(got, ["0", "2", "0", "0", "0", "999", "719", "0"]);
    assert!(stderr(&o).contains("injected failure: allocation #2"));
}

#[test]
fn p100_alexnet_conv2_needs_micro_batches_for_fft() {
    let csv = root().join("data/conv-layers/alexnet.csv");
    let full = run_sim(
        "p100",
        &[("SIMGPU_MODE", "shape")],
        "conv_layers",
        &[csv.to_str().unwrap(), "64"],
    );
    ok(&full);
    let text = stdout(&full);
    let fwd = text
        .lines()
        .find(|l| l.starts_with("conv2") && l.contains(" fwd "))
        .unwrap();
    assert!(
        fwd.contains("IMPLICIT_PRECOMP_GEMM") && fwd.contains("| FFT"),
        "{fwd}"
    );
    assert!(fwd.ends_with("(simulated)"), "{fwd}");
    let micro = run_sim(
        "p100",
        &[("SIMGPU_MODE", "shape")],
        "conv_layers",
        &[csv.to_str().unwrap(), "64", "32"],
    );
    let text = stdout(&micro);
    let fwd = text
        .lines()
        .find(|l| l.starts_with("conv2") && l.contains(" fwd "))
        .unwrap();
    assert!(fwd.contains(" FFT "), "at 32 images FFT fits 64 MiB: {fwd}");
}

/// SIMGPU_TIMELINE: a line per piece of work issued to an engine. Each starts once its stream
/// and the host are there, an engine runs one piece at a time, and on two streams a copy and a
/// kernel overlap: the timing probe's work, as its own clock measured it.
#[test]
fn the_timeline_says_when_each_engine_ran_what() {
    let path = temp_path("timeline.jsonl");
    let o = run_sim(
        "h100",
        &[("SIMGPU_TIMELINE", path.to_str().unwrap())],
        "sim_probe",
        &["timing"],
    );
    ok(&o);
    let lines = take_trace(&path);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let mut by_engine: std::collections::HashMap<String, Vec<(f64, f64)>> = Default::default();
    for v in &lines {
        let (start, end) = (f(v, "start"), f(v, "end"));
        assert!(
            start + 1e-12 >= f(v, "stream_ready").max(f(v, "host")) && end >= start,
            "{v}"
        );
        let engine = v["engine"].as_str().unwrap().to_string();
        assert!(["compute", "h2d", "d2h"].contains(&engine.as_str()), "{v}");
        by_engine.entry(engine).or_default().push((start, end));
    }
    for (engine, runs) in &mut by_engine {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in runs.windows(2) {
            assert!(w[1].0 + 1e-12 >= w[0].1, "{engine}: {w:?}");
        }
    }
    // The 256 MiB copy (4.88 ms at 55 GB/s) runs beside a kernel on another stream.
    let long = |e: &str| -> Vec<(f64, f64)> {
        by_engine[e]
            .iter()
            .copied()
            .filter(|(s, e)| e - s > 4e-3)
            .collect()
    };
    let overlap = long("h2d")
        .iter()
        .any(|c| long("compute").iter().any(|k| k.0 < c.1 && c.0 < k.1));
    assert!(overlap, "{:?} {:?}", long("h2d"), long("compute"));
}

#[test]
fn bad_simulator_settings_are_named_and_fail_cleanly() {
    let o = run_sim("h100", &[("SIMGPU_MEMORY", "lots")], "sim_probe", &["oom"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("SIMGPU_MEMORY") && err.contains("lots") && err.contains("MiB"),
        "{err}"
    );
    let o = run_sim("h100", &[("SIMGPU_MODE", "fast")], "sim_probe", &["oom"]);
    assert!(stderr(&o).contains("SIMGPU_MODE") && !o.status.success());
    let o = run_sim(
        "h100",
        &[("SIMGPU_TIMELINE", "/nonexistent/dir/t.jsonl")],
        "sim_probe",
        &["oom"],
    );
    let err = stderr(&o);
    assert!(
        err.contains("SIMGPU_TIMELINE") && err.contains("/nonexistent/dir") && !o.status.success(),
        "{err}"
    );
}

#[test]
fn marmoset_run_passes_the_exit_status_and_rejects_unknown_profiles() {
    let m = marmoset();
    let s = std::process::Command::new(&m)
        .args([
            "run",
            "--sim",
            "--no-shim",
            "--",
            "sh",
            "-c",
            "test -n \"$LD_LIBRARY_PATH\" && exit 7",
        ])
        .status()
        .unwrap();
    assert_eq!(s.code(), Some(7));
    let o = std::process::Command::new(&m)
        .args(["run", "--sim=v100", "--no-shim", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("h100"));
    let dir = std::process::Command::new(&m)
        .arg("sim-path")
        .output()
        .unwrap();
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&dir.stdout).trim());
    for so in [
        "libcuda.so.1",
        "libcudart.so.12",
        "libcudart.so.13",
        "libcudnn.so.9",
    ] {
        let elf = std::process::Command::new("readelf")
            .arg("-d")
            .arg(dir.join(so))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&elf.stdout);
        assert!(
            text.contains(&format!("Library soname: [{so}]")),
            "{so}: {text}"
        );
    }
}

#[test]
fn backend_graph_api_runs_all_three_directions_as_the_cudnn_frontend_builds_them() {
    let o = run_sim("h100", &[], "backend_conv", &[]);
    ok(&o);
    let v = values(&o);
    // Engines are the legacy algorithms of each direction (counts as cuDNN 9 numbers them).
    for (dir, engines) in [("fwd", "8"), ("bwd_data", "6"), ("bwd_filter", "7")] {
        assert_eq!(v[&format!("{dir}_engines")], engines, "{dir}");
        let results: usize = v[&format!("{dir}_results")].parse().unwrap();
        assert!(results > 0, "{dir}");
        assert_eq!(v[&format!("{dir}_matches_legacy")], "ok", "{dir}");
        assert_eq!(
            v[&format!("{dir}_knob0")],
            "2:0:0:1",
            "{dir}: TILE_SIZE, one choice"
        );
        assert_eq!(v[&format!("{dir}_choices")], "1", "{dir}");
        assert_eq!(v[&format!("{dir}_json_ok")], "1", "{dir}");
        // float32 engines never claim tensor cores or down-conversion (torch filters on those).
        for (k, notes) in &v {
            if k.starts_with(&format!("{dir}_notes_")) {
                assert!(
                    !notes.split(',').any(|n| n == "0" || n == "1"),
                    "{k}={notes}"
                );
            }
        }
    }
    // Honest notes: FFT (3), Winograd (5), nondeterministic accumulation (4).
    assert_eq!(v["fwd_notes_4"], "3");
    assert_eq!(v["fwd_notes_6"], "5");
    assert_eq!(v["fwd_notes_0"], "");
    assert_eq!(v["bwd_data_notes_0"], "4");
    assert_eq!(v["bwd_filter_notes_3"], "4");
    // Misuse: a wrong attribute type, a NULL descriptor to fill, a read before finalizing.
    assert_eq!(v["bad_type_status"], "2000");
    assert_eq!(v["null_element_status"], "2000");
    assert_eq!(v["unfinalized_status"], "2004");
}

#[test]
fn the_cudnn_dispatcher_finds_functions_in_sub_libraries_by_exact_name() {
    let o = run_sim("h100", &[("SIMGPU_LOG", "debug")], "dl_cudnn_dispatch", &[]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["create_status"], "0");
    for k in [
        "create_looked_up_in_graph",
        "execute_looked_up_in_graph",
        "conv_looked_up_in_cnn",
        "tensor_looked_up_in_ops",
        "version_same",
        "error_string_same",
        "dispatcher_is_not_graph",
    ] {
        assert_eq!(v[k], "1", "{k}");
    }
    // Imported by torch, simulated by nobody: NOT_SUPPORTED, named once at SIMGPU_LOG=debug.
    assert_eq!(v["ctc_status"], "3000");
    assert_eq!(v["ctc_again_status"], "3000");
    assert_eq!(v["ctc_in_graph"], "0");
    assert_eq!(
        stderr(&o).matches("cudnnCTCLoss is not simulated").count(),
        1
    );
}

#[test]
fn batch_normalisation_matches_a_double_precision_reference() {
    let o = run_sim("h100", &[], "batchnorm", &[]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["spatial_param_dims"], "1x4x1x1");
    assert_eq!(v["per_activation_param_dims"], "1x4x5x6");
    for mode in ["spatial", "per_activation"] {
        for q in [
            "y",
            "running_mean",
            "running_var",
            "saved_mean",
            "saved_inv",
            "dx",
            "dscale",
            "dbias",
            "infer",
        ] {
            let e: f64 = v[&format!("{mode}_{q}_err")].parse().unwrap();
            assert!(e < 1e-4, "{mode} {q}: {e}");
        }
        for q in ["workspace", "reserve", "backward_workspace"] {
            assert_eq!(v[&format!("{mode}_{q}")], "0", "{mode} {q}");
        }
    }
    assert_eq!(v["fused_status"], "3000");
    // Shape mode: the same calls run (no arithmetic) without a trap.
    ok(&run_sim(
        "h100",
        &[("SIMGPU_MODE", "shape")],
        "batchnorm",
        &[],
    ));
}

#[test]
fn a_convolution_bias_relu_graph_runs_with_virtual_intermediates() {
    let o = run_sim("h100", &[], "backend_fused", &[]);
    ok(&o);
    let v = values(&o);
    assert_eq!(v["engines"], "8");
    assert!(v["results"].parse::<u32>().unwrap() > 0);
    let err: f64 = v["max_err"].parse().unwrap();
    assert!(err < 1e-5, "{err}");
    // The data exercise both sides of the ReLU.
    assert!(v["nonzero"].parse::<u32>().unwrap() > 50, "{v:?}");
    assert!(v["zeros"].parse::<u32>().unwrap() > 50, "{v:?}");
}

/// The simulator's report (SIMGPU_REPORT) is written at every exit it can see: a normal exit
/// and an abort (as PyTorch's std::terminate at exit), with or without the shim, counting the
/// work issued up to the abort, and the timeline's lines flushed. A process killed by SIGKILL
/// cannot write it: `marmoset run --sim` says so after the program, whether the file is missing
/// or an earlier run's.
#[test]
fn the_report_is_written_at_exit_and_abort_and_its_absence_is_said() {
    use std::os::unix::process::ExitStatusExt;
    let mib = "3";
    for (how, code) in [("exit", 0), ("abort", 128 + libc::SIGABRT)] {
        for shim in [false, true] {
            let at = format!("{how}, shim {shim}");
            let r = temp_path(&format!("exit-probe-{how}-{shim}.json"));
            let t = temp_path(&format!("exit-probe-{how}-{shim}.timeline.jsonl"));
            let env = [
                ("SIMGPU_REPORT", r.to_str().unwrap()),
                ("SIMGPU_TIMELINE", t.to_str().unwrap()),
            ];
            let o = if shim {
                under_shim("h100", &env, "exit_probe", &[how, mib])
            } else {
                run_sim("h100", &env, "exit_probe", &[how, mib])
            };
            assert_eq!(o.status.code(), Some(code), "{at}: {}", stderr(&o));
            let report = sim_report(&r);
            assert_eq!(
                report["h2d_bytes"].as_f64(),
                Some(num(&o, "h2d_bytes")),
                "{at}"
            );
            assert_eq!(
                report["d2h_bytes"].as_f64(),
                Some(num(&o, "d2h_bytes")),
                "{at}"
            );
            assert!(report["virtual_time_s"].as_f64() > Some(0.0), "{at}");
            let timeline = std::fs::read_to_string(&t).unwrap();
            assert_eq!(
                timeline.lines().count(),
                3,
                "{at}: three copies\n{timeline}"
            );
            assert!(
                !stderr(&o).contains("was not written"),
                "{at}: {}",
                stderr(&o)
            );
            std::fs::remove_file(&r).ok();
            std::fs::remove_file(&t).ok();
        }
    }
    for earlier in [false, true] {
        let r = temp_path(&format!("exit-probe-kill-{earlier}.json"));
        std::fs::remove_file(&r).ok();
        if earlier {
            std::fs::write(&r, "{\"an earlier run's\": true}\n").unwrap();
        }
        let o = run_sim(
            "h100",
            &[("SIMGPU_REPORT", r.to_str().unwrap())],
            "exit_probe",
            &["kill", mib],
        );
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "{}", stderr(&o));
        let err = stderr(&o);
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("was not written"))
            .collect();
        assert!(
            said.len() == 1
                && said[0].contains(r.to_str().unwrap())
                && said[0].contains("SIGKILL")
                && said[0].contains(if earlier { "earlier run" } else { "no file" }),
            "earlier file {earlier}: {err}"
        );
        std::fs::remove_file(&r).ok();
    }
}

#[test]
fn a_thread_has_no_context_until_one_is_bound() {
    // The real driver's rule: a fresh thread has no context current, a call that works in one
    // fails there with CUDA_ERROR_INVALID_CONTEXT (201) until one is bound (by the driver's
    // cuCtxSetCurrent, or by the runtime at its first call on the thread that needs one).
    let o = run_sim("h100", &[], "sim_probe", &["context"]);
    ok(&o);
    assert_eq!(num(&o, "fresh_get"), 0.0, "{}", stdout(&o));
    assert_eq!(num(&o, "fresh_current_null"), 1.0, "{}", stdout(&o));
    assert_eq!(num(&o, "fresh_alloc"), 201.0, "{}", stdout(&o));
    assert_eq!(num(&o, "set"), 0.0, "{}", stdout(&o));
    assert_eq!(num(&o, "bound_alloc"), 0.0, "{}", stdout(&o));
    assert_eq!(num(&o, "runtime_malloc"), 0.0, "{}", stdout(&o));
    assert_eq!(num(&o, "runtime_bound"), 1.0, "{}", stdout(&o));
}
