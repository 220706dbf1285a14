//! Unmodified PyTorch on the simulated GPU, through cuDNN's default (backend, v8) path, against
//! torch's CPU results. Needs a Python with torch: `MARMOSET_TORCH_PYTHON`, else the worktree's
//! `.venv/bin/python`. Without one the test says so loudly on stderr and passes (a clone has no
//! torch; the rest of the suite does not depend on it).

use marmoset_e2e::*;
use std::path::PathBuf;
use std::process::Command;

fn torch_python() -> Option<PathBuf> {
    let p = std::env::var_os("MARMOSET_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let ok = Command::new(&p)
        // torch itself imports only on a (simulated) GPU stack: ask whether it is installed.
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

#[test]
fn torch_default_cudnn_path_matches_torch_on_the_cpu() {
    let Some(python) = torch_python() else {
        eprintln!(
            "NOT RUN: no Python with torch (set MARMOSET_TORCH_PYTHON or make .venv): torch's cuDNN path is untested here"
        );
        return;
    };
    let o = Command::new(marmoset())
        .args(["run", "--sim=h100", "--no-shim", "--"])
        .arg(python)
        .arg(root().join("tests/torch/cudnn_default_path.py"))
        .env("SIMGPU_MODE", "data")
        .env_remove("TORCH_CUDNN_V8_API_DISABLED")
        .output()
        .expect("run marmoset");
    ok(&o);
    let v = values(&o);
    assert_eq!(v["cudnn_version"], "92600");
    for (k, tol) in [
        ("conv_fwd_err", 1e-4),
        ("conv_bwd_data_err", 1e-4),
        ("conv_bwd_filter_err", 1e-3),
        ("bn_fwd_err", 1e-4),
        ("bn_running_mean_err", 1e-5),
        ("bn_running_var_err", 1e-5),
        ("bn_dx_err", 1e-4),
        ("bn_dweight_err", 1e-4),
        ("bn_dbias_err", 1e-4),
    ] {
        let e: f64 = v[k].parse().unwrap();
        assert!(e < tol, "{k}={e}");
    }
}
