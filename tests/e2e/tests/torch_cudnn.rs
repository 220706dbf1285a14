//! Unmodified PyTorch on the simulated GPU through cuDNN's default (backend, v8) path, against
//! torch's own CPU results (tests/torch/cudnn_default_path.py). Uses the pip wheel in .venv/ (set
//! up by scripts/setup-torch.sh, which the README's test command runs); a missing .venv fails
//! with that command, it never skips.

use marmoset_e2e::*;
use std::process::Command;

#[test]
fn torch_default_cudnn_path_matches_torch_on_the_cpu() {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup-torch.sh (the README's test command does)",
        python.display()
    );
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100", "--no-shim", "--"])
        .arg(python)
        .arg(root().join("tests/torch/cudnn_default_path.py"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") || k.starts_with("TORCH_") {
            c.env_remove(k);
        }
    }
    let o = c.env("SIMGPU_MODE", "data").output().expect("run marmoset");
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
