//! The wheel: built from this build tree with packaging/build_wheel.py, installed with pip into a
//! fresh virtual environment, and run from there with no build tree anywhere on the path.

use marmoset_e2e::*;
use std::path::Path;
use std::process::Command;

fn sh(c: &mut Command) -> std::process::Output {
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    ok(&o);
    o
}

#[test]
fn pip_installed_marmoset_runs_c_and_python_programs_on_the_simulated_gpu() {
    // Outside the build tree: nothing of it is on the installed command's way.
    let tmp = std::env::temp_dir().join(format!("marmoset-wheel-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let sim = stdout(&sh(Command::new(marmoset()).arg("sim-path")))
        .trim()
        .to_string();
    let version = stdout(&sh(Command::new(marmoset()).arg("--version")));
    let version = version.split_whitespace().nth(1).unwrap();
    let wheel = stdout(&sh(Command::new("python3")
        .arg(root().join("packaging/build_wheel.py"))
        .arg(build_dir())
        .arg(&sim)
        .arg(version)
        .arg(tmp.join("dist"))));
    let wheel = wheel.trim();
    assert!(
        wheel.ends_with("_x86_64.whl") && wheel.contains(&format!("marmoset-{version}-py3-none-")),
        "{wheel}"
    );
    let venv = tmp.join("venv");
    sh(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    sh(Command::new(venv.join("bin/pip")).args([
        "install",
        "-q",
        "--no-index",
        "--disable-pip-version-check",
        wheel,
    ]));
    // A C workload and the Python example, copied away from the build tree.
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::copy(workloads().join("conv_check"), work.join("conv_check")).unwrap();
    std::fs::copy(
        root().join("examples/cuda_ctypes.py"),
        work.join("cuda_ctypes.py"),
    )
    .unwrap();
    let installed = |args: &[&str]| {
        let mut c = Command::new("marmoset");
        c.args(args).current_dir(&work).env_clear();
        c.env(
            "PATH",
            format!("{}:/usr/bin:/bin", venv.join("bin").display()),
        )
        .env("HOME", &tmp);
        c.output().expect("run the installed marmoset")
    };
    let o = installed(&["sim-path"]);
    ok(&o);
    let sim_path = stdout(&o).trim().to_string();
    assert!(
        Path::new(&sim_path).starts_with(venv.canonicalize().unwrap()),
        "the installed command uses its own libraries: {sim_path}"
    );
    let o = installed(&["run", "--sim", "--", "./conv_check", "1", "12"]);
    ok(&o);
    assert!(stdout(&o).contains("17 passed, 0 failed"), "{}", stdout(&o));
    // With libmarmoset.so (a trace proves it was loaded) under a Python program.
    let o = installed(&[
        "run",
        "--sim",
        "--trace",
        "run.jsonl",
        "--",
        "python3",
        "cuda_ctypes.py",
    ]);
    ok(&o);
    assert!(stdout(&o).contains("round trip ok"), "{}", stdout(&o));
    let trace = std::fs::read_to_string(work.join("run.jsonl")).expect("a trace");
    assert_eq!(
        trace
            .lines()
            .filter(|l| l.contains(r#""kind":"alloc""#))
            .count(),
        4,
        "{trace}"
    );
    let o = installed(&["inspect", "run.jsonl"]);
    ok(&o);
    assert!(stdout(&o).contains("cudaMalloc"), "{}", stdout(&o));
    std::fs::remove_dir_all(&tmp).ok();
}
