//! `marmoset doctor` on a planted environment: a fake torch whose library carries a DT_RPATH into
//! an nvidia-* wheel directory beside it (the trap: those libraries load ahead of
//! LD_LIBRARY_PATH), and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.

use marmoset_e2e::*;
use std::process::Command;

fn cc(args: &[&str]) {
    let o = Command::new("cc").args(args).output().expect("run cc");
    ok(&o);
}

#[test]
fn doctor_names_the_rpath_trap_the_setting_and_the_hook_coverage() {
    let site = temp_path("doctor-site");
    let _ = std::fs::remove_dir_all(&site);
    let nv = site.join("nvidia/cudnn/lib");
    let torch = site.join("torch");
    std::fs::create_dir_all(&nv).unwrap();
    std::fs::create_dir_all(torch.join("lib")).unwrap();
    // A stand-in for NVIDIA's cuDNN: one function Marmoset hooks, one it does not.
    let src = site.join("fake_cudnn.c");
    std::fs::write(
        &src,
        "int cudnnConvolutionForward(void) { return 0; }\nint cudnnNotAnything(void) { return 1; }\n",
    )
    .unwrap();
    let cudnn = nv.join("libcudnn.so.9");
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcudnn.so.9",
        "-o",
        cudnn.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    // torch's library: DT_RPATH (not RUNPATH) $ORIGIN/../../nvidia/cudnn/lib, as torch's wheels.
    let tsrc = site.join("fake_torch.c");
    std::fs::write(
        &tsrc,
        "int cudnnConvolutionForward(void);\nint torch_fake(void) { return cudnnConvolutionForward(); }\n",
    )
    .unwrap();
    let lib = torch.join("lib/libtorch_fake.so");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str().unwrap(),
        tsrc.to_str().unwrap(),
        "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../../nvidia/cudnn/lib",
        "-Wl,--no-as-needed",
        &format!("-L{}", nv.display()),
        "-l:libcudnn.so.9",
    ]);
    std::fs::write(
        torch.join("__init__.py"),
        "import ctypes, os\nctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libtorch_fake.so'))\n",
    )
    .unwrap();
    let run = |json: bool, sim: bool| {
        let mut c = Command::new(marmoset());
        c.arg("doctor");
        if sim {
            c.arg("--sim");
        }
        if json {
            c.arg("--json");
        }
        c.args(["--", "python3", "-c", "import torch"])
            .env("PYTHONPATH", &site)
            .env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
            .env("TORCH_DIST_USE_NCCL2", "1")
            .env("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "1")
            .env("TF_GPU_ALLOCATOR", "bfc")
            .env("TF_NUM_INTEROP_THREADS", "4")
            .env("MARMOSET_CACHE_DIR", site.join("cache"))
            .env_remove("PYTORCH_ALLOC_CONF");
        c.output().expect("run marmoset doctor")
    };
    let o = run(false, true);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "problems found: exit 1\n{out}{}",
        stderr(&o)
    );
    let nv_real = nv.canonicalize().unwrap();
    assert!(
        out.contains(&nv_real.display().to_string()) && out.contains("DT_RPATH"),
        "the trap's directory is named:\n{out}"
    );
    assert!(
        out.contains("expandable_segments:True") && out.contains("refuses every memory policy"),
        "{out}"
    );
    assert!(out.contains("the benchmark cache"), "{out}");
    assert!(
        out.contains("TORCH_DIST_USE_NCCL2=1") && out.contains("the process aborts"),
        "{out}"
    );
    assert!(
        out.contains("TF_GPU_ALLOCATOR=bfc") && out.contains("BFC allocator"),
        "{out}"
    );
    assert!(
        out.contains("TF_NUM_INTEROP_THREADS=4") && out.contains("no repeating iteration"),
        "{out}"
    );
    assert!(
        out.contains("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1"),
        "{out}"
    );
    // JSON: the library, where it came from and how, and the coverage counted from its exports.
    let o = run(true, true);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    let libs = v["libraries"].as_array().unwrap();
    let c = libs
        .iter()
        .find(|l| l["name"] == "libcudnn.so.9")
        .unwrap_or_else(|| panic!("libcudnn.so.9 loaded: {v:#}"));
    assert!(
        c["path"].as_str().unwrap().contains("/nvidia/cudnn/lib/"),
        "the wheel's library won over LD_LIBRARY_PATH's simulated one: {c}"
    );
    assert!(
        c["found_through"]
            .as_str()
            .unwrap()
            .starts_with("RPATH from file")
            && c["found_through"]
                .as_str()
                .unwrap()
                .contains("libtorch_fake.so"),
        "{c}"
    );
    assert_eq!(c["exported_functions"], 2, "{c}");
    assert_eq!(c["hooked"], 1, "{c}");
    assert_eq!(c["hooked_functions"][0], "cudnnConvolutionForward");
    assert_eq!(c["not_hooked_functions"][0], "cudnnNotAnything");
    assert_eq!(v["coverage"]["cuDNN"]["hooked"], 1);
    let findings = v["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .filter(|f| f["problem"] == true && f["topic"] == "rpath")
            .count()
            >= 1
    );
    assert!(findings.iter().any(|f| {
        f["problem"] == true
            && f["text"]
                .as_str()
                .unwrap()
                .contains("expandable_segments:True")
    }));
    // On a GPU the wheels' libraries are the ones meant to run: named, never a problem.
    let o = run(true, false);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("doctor --json");
    let rpath: Vec<&serde_json::Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["topic"] == "rpath")
        .collect();
    assert!(
        !rpath.is_empty() && rpath.iter().all(|f| f["problem"] == false),
        "{rpath:?}"
    );
    std::fs::remove_dir_all(&site).ok();
}

#[test]
fn doctor_without_problems_exits_0_and_says_so() {
    // A program that loads the simulated runtime by name, with clean settings.
    let cache = temp_path("doctor-cache");
    let o = Command::new(marmoset())
        .args(["doctor", "--sim", "--", "python3"])
        .arg(root().join("examples/cuda_ctypes.py"))
        .env("MARMOSET_CACHE_DIR", &cache)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .env_remove("TORCH_DIST_USE_NCCL2")
        .env_remove("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK")
        .env_remove("TF_GPU_ALLOCATOR")
        .env_remove("TF_NUM_INTEROP_THREADS")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("0 problems found"), "{out}");
    assert!(
        out.contains("libcudart.so.13") && out.contains("found through LD_LIBRARY_PATH"),
        "{out}"
    );
    assert!(out.contains("runtime"), "{out}");
    std::fs::remove_dir_all(&cache).ok();
}
