//! `scripts/fidelity.py`: the device time per kind of call of a real and a simulated trace over
//! their steady steps. Two hand-written traces: a step is a kernel, a cuDNN call and the loss's
//! 4-byte read; the script must leave out the warm-up steps, sum each kind, and name a kind whose
//! count differs between the two.

use marmoset_e2e::*;
use std::fmt::Write as _;
use std::process::Command;

/// A trace of one step per `kernel_ms`: each a launch of `add_kernel<4>` taking its time, a
/// cudnnBackendExecute taking `cudnn_ms` (none in `no_cudnn_in`), and the loss's read.
fn trace(kernel_ms: &[f64], cudnn_ms: f64, no_cudnn_in: Option<usize>) -> String {
    let mut t = String::new();
    let mut seq = 0;
    let mut rec = |t: &mut String, body: String| {
        writeln!(
            t,
            "{{\"seq\":{seq},\"t_ns\":{},\"tid\":1,{body}}}",
            seq * 1000
        )
        .unwrap();
        seq += 1;
        seq - 1
    };
    rec(&mut t, "\"kind\":\"header\",\"schema\":1".into());
    rec(
        &mut t,
        "\"kind\":\"kernel\",\"func\":7,\"name\":\"void at::native::add_kernel<4, float>(int, float*)\"".into(),
    );
    for (s, ms) in kernel_ms.iter().enumerate() {
        let l = rec(&mut t, "\"kind\":\"launch\",\"api\":\"__cudaLaunchKernel\",\"func\":7,\"stream\":0,\"result\":0".into());
        rec(
            &mut t,
            format!("\"kind\":\"timing\",\"of\":{l},\"device_ms\":{ms}"),
        );
        if no_cudnn_in != Some(s) {
            let c = rec(
                &mut t,
                "\"kind\":\"cudnn\",\"api\":\"cudnnBackendExecute\",\"result\":0".into(),
            );
            rec(
                &mut t,
                format!("\"kind\":\"timing\",\"of\":{c},\"device_ms\":{cudnn_ms}"),
            );
        }
        let d = rec(&mut t, "\"kind\":\"copy\",\"api\":\"cudaMemcpyAsync\",\"size\":4,\"dir\":\"d2h\",\"stream\":0,\"result\":0".into());
        rec(
            &mut t,
            format!("\"kind\":\"timing\",\"of\":{d},\"device_ms\":0.01"),
        );
    }
    t
}

fn fidelity(real: &str, sim: &str, skip: &str) -> serde_json::Value {
    let (a, b) = (
        temp_path("fidelity-real.jsonl"),
        temp_path("fidelity-sim.jsonl"),
    );
    std::fs::write(&a, real).unwrap();
    std::fs::write(&b, sim).unwrap();
    let o = Command::new("python3")
        .arg(root().join("scripts/fidelity.py"))
        .args([
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--skip",
            skip,
            "--json",
        ])
        .output()
        .expect("python3 scripts/fidelity.py");
    ok(&o);
    serde_json::from_slice(&o.stdout).expect("JSON")
}

#[test]
fn device_time_by_kind_over_the_steady_steps() {
    // Real: the first step's kernel is slow (warm-up), the others 2 ms; cuDNN 3 ms a call.
    // Simulated: every kernel 1 ms, cuDNN 1.5 ms.
    let real = trace(&[50.0, 2.0, 2.0, 2.0], 3.0, None);
    let sim = trace(&[1.0; 4], 1.5, None);
    let v = fidelity(&real, &sim, "1");
    assert_eq!(v["steps"], serde_json::json!([3, 3]), "{v}");
    let kind = |name: &str| {
        v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kind"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"))
            .clone()
    };
    let add = kind("add_kernel");
    assert_eq!(add["real_calls"], 3);
    assert!(
        (add["real_ms"].as_f64().unwrap() - 6.0).abs() < 1e-9,
        "{add}"
    );
    assert!((add["ratio"].as_f64().unwrap() - 2.0).abs() < 1e-9, "{add}");
    let cudnn = kind("cudnnBackendExecute");
    assert!(
        (cudnn["ratio"].as_f64().unwrap() - 2.0).abs() < 1e-9,
        "{cudnn}"
    );
    assert_eq!(kind("copy d2h")["sim_calls"], 3);
    assert_eq!(v["counts_differ"], serde_json::json!([]));
    // With no warm-up left out, the slow first step counts.
    let all = fidelity(&real, &sim, "0");
    assert!((all["all"]["real_ms"].as_f64().unwrap() - (56.0 + 12.0 + 0.04)).abs() < 1e-9);
}

#[test]
fn a_kind_whose_count_differs_is_named() {
    let real = trace(&[1.0; 3], 1.0, None);
    let sim = trace(&[1.0; 3], 1.0, Some(2));
    let v = fidelity(&real, &sim, "0");
    assert_eq!(
        v["counts_differ"],
        serde_json::json!(["cudnnBackendExecute"]),
        "{v}"
    );
}

#[test]
fn a_kind_attributed_in_one_trace_only_is_named() {
    // The simulated trace's cuDNN calls name their tensors, the real one's none (as the H200's
    // did before Marmoset took variant packs as the program filled them).
    let real = trace(&[1.0; 3], 1.0, None);
    let sim = real.replace(
        "\"api\":\"cudnnBackendExecute\",",
        "\"api\":\"cudnnBackendExecute\",\"tensors\":[{\"role\":\"x\",\"ptr\":1,\"access\":\"r\"}],",
    );
    assert_ne!(real, sim);
    let v = fidelity(&real, &sim, "0");
    assert_eq!(
        v["unattributed_differ"],
        serde_json::json!(["cudnnBackendExecute"]),
        "{v}"
    );
    assert_eq!(
        fidelity(&real, &real, "0")["unattributed_differ"],
        serde_json::json!([])
    );
}
