//! μ-cuDNN and the simulated device when memory or the benchmark cache is not what it seems: a
//! workspace limit far beyond what the host can back, a device that refuses the largest scratch
//! workspace, cache entries the library does not stand by, a cache line that is not text, and an
//! allocation within the device's capacity that the host cannot back. None of them may stop the
//! program; each is said once where Marmoset changes what it does.

use marmoset_e2e::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TRAINER: [&str; 4] = ["2", "8", "16", "0"];

fn cache_dir(name: &str) -> PathBuf {
    let d = temp_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn lines_with<'a>(o: &'a str, what: &str) -> Vec<&'a str> {
    o.lines().filter(|l| l.contains(what)).collect()
}

/// The trainer under WR at `limit` with the cache in `dir` (data mode, the simulated H100).
fn trainer(limit: &str, dir: &Path) -> Output {
    under_shim(
        "h100",
        &[
            ("MARMOSET_WORKSPACE_LIMIT", limit),
            ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
        ],
        "trainer",
        &TRAINER,
    )
}

#[test]
fn a_workspace_limit_beyond_the_host_sizes_the_benchmark_scratch_by_its_candidates() {
    let (_, plain) = unlimited("trainer", &TRAINER);
    let dir = cache_dir("robust-32gib");
    let report = temp_path("robust-32gib-report.json");
    // 32 GiB fits the simulated H100 (80 GB) and no host this suite runs on has it to spare: a
    // scratch workspace sized at the limit is backed by host memory in data mode.
    let o = under_shim(
        "h100",
        &[
            ("MARMOSET_WORKSPACE_LIMIT", "32GiB"),
            ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
            ("SIMGPU_REPORT", report.to_str().unwrap()),
        ],
        "trainer",
        &TRAINER,
    );
    ok(&o);
    assert_eq!(stdout(&o), plain, "the same losses and checksum");
    let err = stderr(&o);
    assert_eq!(
        lines_with(&err, "micro-configurations measured").len(),
        9,
        "every convolution measured: {err}"
    );
    assert!(!err.contains("cannot give"), "{err}");
    // The trainer's largest candidate asks about 1.6 MB: the device never held more than the
    // program and a few MiB of scratch, nowhere near the limit.
    let peak = sim_report(&report)["peak_bytes"].as_u64().unwrap();
    std::fs::remove_file(&report).ok();
    assert!(peak < 64 << 20, "peak {peak} B under a 32 GiB limit");
}

/// One AlexNet conv2 layer at 256 images: its largest candidate workspace (about 1.7 GB, at the
/// whole batch) is more than a 1 GiB device has free after the tensors; smaller ones fit.
fn conv2_csv() -> PathBuf {
    let p = temp_path("robust-conv2.csv");
    std::fs::write(
        &p,
        "source,W,H,C_in,N,C_out,kernel_w,kernel_h,pad_w,pad_h,stride_w,stride_h\n\
         conv2,27,27,64,256,192,5,5,2,2,1,1\n",
    )
    .unwrap();
    p
}

#[test]
fn a_device_that_refuses_the_largest_scratch_workspace_measures_the_rest_and_says_so() {
    let csv = conv2_csv();
    let args = [csv.to_str().unwrap(), "32768"];
    let dir = cache_dir("robust-refused");
    let small = under_shim(
        "h100",
        &[
            ("SIMGPU_MODE", "shape"),
            ("SIMGPU_MEMORY", "1GiB"),
            ("MARMOSET_WORKSPACE_LIMIT", "32GiB"),
            ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
        ],
        "conv_layers",
        &args,
    );
    ok(&small);
    let err = stderr(&small);
    let said = lines_with(&err, "μ-cuDNN: the device cannot give the");
    assert_eq!(said.len(), 3, "one line per benchmarked kernel: {err}");
    for d in ["Fwd", "BwdData", "BwdFilter"] {
        assert!(
            said.iter()
                .any(|l| l.contains(&format!("a {d} convolution of 256 images"))
                    && l.contains("measuring only the configurations within")),
            "{d}: {err}"
        );
        assert!(
            err.contains(&format!("planned a {d} convolution of 256 images: 1 x 256")),
            "{d} planned from what was measured: {err}"
        );
    }
    // Measurements that left candidates out are not written for other processes.
    let db = dir.join("mucudnn.jsonl");
    let kept = std::fs::read_to_string(&db).unwrap_or_default();
    assert_eq!(kept.lines().skip(1).count(), 0, "{kept}");
    // A device with room measures everything, silently, and writes it.
    let big = under_shim(
        "h100",
        &[
            ("SIMGPU_MODE", "shape"),
            ("MARMOSET_WORKSPACE_LIMIT", "32GiB"),
            ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
        ],
        "conv_layers",
        &args,
    );
    ok(&big);
    let err = stderr(&big);
    assert!(!err.contains("cannot give"), "{err}");
    assert_eq!(lines_with(&err, "micro-configurations measured").len(), 3);
    let kept = std::fs::read_to_string(&db).unwrap();
    assert_eq!(kept.lines().skip(1).count(), 3, "{kept}");
}

/// Rewrites the entries of the cache at `db` whose key starts with `prefix` (the first such
/// entry only) with `edit` applied to each micro-configuration [batch, algo, ms, workspace];
/// returns the entry's key.
fn edit_entry(db: &Path, prefix: &str, edit: impl Fn(&mut Vec<serde_json::Value>)) -> String {
    let text = std::fs::read_to_string(db).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("{{\"key\":\"{prefix}")))
        .unwrap_or_else(|| panic!("no {prefix} entry in {text}"));
    let mut e: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    for m in e["micro"].as_array_mut().unwrap() {
        let mut v = m.as_array().unwrap().clone();
        edit(&mut v);
        *m = serde_json::Value::Array(v);
    }
    lines[at] = e.to_string();
    std::fs::write(db, lines.join("\n") + "\n").unwrap();
    e["key"].as_str().unwrap().to_string()
}

#[test]
fn a_cache_entry_the_library_does_not_stand_by_is_dropped_with_a_warning_and_measured_again() {
    let (_, plain) = unlimited("trainer", &TRAINER);
    let dir = cache_dir("robust-edited");
    let db = dir.join("mucudnn.jsonl");
    let first = trainer("64MiB", &dir);
    ok(&first);
    assert_eq!(stdout(&first), plain);
    // An algorithm cuDNN does not have, with no workspace.
    let unknown = edit_entry(&db, "Fwd|", |m| {
        m[1] = 99.into();
        m[3] = 0.into();
    });
    // Real algorithms, but recorded as needing no workspace where cuDNN asks for some.
    let text = std::fs::read_to_string(&db).unwrap();
    let needs: u64 = text
        .lines()
        .find(|l| l.starts_with("{\"key\":\"BwdFilter|"))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .unwrap()["micro"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[3].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        needs > 0,
        "some BwdFilter algorithm needs workspace: {text}"
    );
    let short = edit_entry(&db, "BwdFilter|", |m| m[3] = 0.into());
    let before = std::fs::read_to_string(&db).unwrap();

    let second = trainer("64MiB", &dir);
    ok(&second);
    assert_eq!(stdout(&second), plain, "the same losses and checksum");
    let err = stderr(&second);
    let dropped = lines_with(&err, "dropping the entry");
    assert_eq!(dropped.len(), 2, "{err}");
    for (key, why) in [
        (
            &unknown,
            "algorithm 99 on 8 images, which cuDNN does not offer",
        ),
        (&short, "0 B of workspace for algorithm"),
    ] {
        let line = dropped
            .iter()
            .find(|l| l.contains(key.as_str()))
            .unwrap_or_else(|| panic!("no warning names {key}: {err}"));
        assert!(line.contains(&db.display().to_string()), "{line}");
        assert!(line.contains(why), "{line}");
    }
    assert_eq!(lines_with(&err, "micro-configurations measured").len(), 2);
    assert_eq!(
        lines_with(&err, "micro-configurations from the cache").len(),
        7
    );
    // Nothing was rewritten: the new measurements follow, and supersede, the dropped entries.
    let after = std::fs::read_to_string(&db).unwrap();
    assert!(after.starts_with(&before), "appended only");
    assert_eq!(after.lines().count(), before.lines().count() + 2);

    let third = trainer("64MiB", &dir);
    ok(&third);
    assert_eq!(stdout(&third), plain);
    let err = stderr(&third);
    assert!(!err.contains("dropping"), "{err}");
    assert_eq!(
        lines_with(&err, "micro-configurations from the cache").len(),
        9
    );
}

#[test]
fn a_backend_graph_cache_entry_with_an_engine_the_library_lacks_is_measured_again() {
    let dir = cache_dir("robust-backend");
    let db = dir.join("mucudnn.jsonl");
    let run = |name: &str| {
        let out = temp_path(name);
        let o = under_shim(
            "p100",
            &[
                ("MARMOSET_WORKSPACE_LIMIT", "64MiB"),
                ("MARMOSET_CACHE_DIR", dir.to_str().unwrap()),
            ],
            "backend_check",
            &["8", "5", out.to_str().unwrap()],
        );
        ok(&o);
        let floats = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).ok();
        (o, floats)
    };
    let (_, want) = run("robust-backend-1.bin");
    let key = edit_entry(&db, "backend|", |m| m[1] = 99.into());
    let (second, got) = run("robust-backend-2.bin");
    assert_eq!(got, want, "the same outputs");
    let err = stderr(&second);
    let dropped = lines_with(&err, "dropping the entry");
    assert_eq!(dropped.len(), 1, "{err}");
    assert!(dropped[0].contains(&key), "{}", dropped[0]);
    assert!(dropped[0].contains("engine 99 on"), "{}", dropped[0]);
}

#[test]
fn a_cache_line_that_is_not_text_costs_that_line_only() {
    let dir = cache_dir("robust-bytes");
    let db = dir.join("mucudnn.jsonl");
    let first = trainer("64MiB", &dir);
    ok(&first);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes.extend_from_slice(b"\xff\xfe\x00 not text \x80\n");
    std::fs::write(&db, &bytes).unwrap();
    let second = trainer("64MiB", &dir);
    ok(&second);
    assert_eq!(stdout(&second), stdout(&first));
    let err = stderr(&second);
    let said = lines_with(&err, "ignoring 1 corrupt line");
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains(&db.display().to_string()), "{}", said[0]);
    assert_eq!(
        lines_with(&err, "micro-configurations from the cache").len(),
        9,
        "the other entries are used: {err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "left as it was");
    // A file of bytes that is not ours at all: said, ignored, never written to.
    let foreign = b"\x7fELF\x02\x01\x01\xff\xff\n\x00\x00".to_vec();
    std::fs::write(&db, &foreign).unwrap();
    let third = trainer("64MiB", &dir);
    ok(&third);
    assert_eq!(stdout(&third), stdout(&first));
    let err = stderr(&third);
    let said = lines_with(&err, "not a Marmoset benchmark cache");
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains(&db.display().to_string()), "{}", said[0]);
    assert_eq!(std::fs::read(&db).unwrap(), foreign, "left as it was");
}

/// big_alloc GIB on the simulated H100 (80 GB) in a process whose address space is capped at
/// `cap_gib` GiB, as a host without the memory to back the allocation: with or without the shim,
/// in data or shape mode.
fn big_alloc_capped(gib: &str, cap_gib: u64, shim: bool, mode: &str) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "ulimit -v {} && exec \"$@\"",
            cap_gib << 20 // KiB
        ))
        .arg("sh")
        .arg(marmoset())
        .args(["run", "--sim=h100"]);
    if !shim {
        c.arg("--no-shim");
    }
    c.arg("--").arg(workloads().join("big_alloc")).arg(gib);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    c.env("SIMGPU_MODE", mode);
    c.output().expect("run marmoset")
}

#[test]
fn an_allocation_the_host_cannot_back_fails_cleanly_at_every_entry_point() {
    for shim in [false, true] {
        let o = big_alloc_capped("16", 8, shim, "data");
        ok(&o);
        let v = values(&o);
        for (entry, code) in [
            ("runtime", "2"),
            ("driver", "2"),
            ("async", "2"),
            ("create", "2"),
        ] {
            // cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2.
            assert_eq!(
                v.get(entry).map(String::as_str),
                Some(code),
                "{entry} (shim {shim}):\n{}{}",
                stdout(&o),
                stderr(&o)
            );
        }
        assert_eq!(v["free_after"], v["free_before"], "nothing taken");
        assert_eq!(v["roundtrip"], "ok", "the device goes on");
    }
    // Shape mode backs nothing on the host: the same allocations are the device's to give.
    let o = big_alloc_capped("16", 8, false, "shape");
    ok(&o);
    let v = values(&o);
    for entry in ["runtime", "driver", "async", "create"] {
        assert_eq!(v[entry], "0", "{entry}: {}", stdout(&o));
    }
}
