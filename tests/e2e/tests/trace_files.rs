//! Trace files on disk: one readable trace per process of a run (children of a shell, ranks,
//! plain LD_PRELOAD, a forked child), a trace path that is a FIFO, and a trace cut by a full disk
//! read alike by every command that reads traces.

use marmoset_e2e::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A fresh, empty directory for one test's traces.
fn fresh_dir(name: &str) -> PathBuf {
    let d = temp_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `marmoset run --sim --trace TRACE -- sh -c SCRIPT`, W set to the workloads' folder, with none
/// of the test's own MARMOSET_ and SIMGPU_ settings.
fn run_script(trace: &Path, script: &str) -> Output {
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim", "--trace"])
        .arg(trace)
        .args(["--", "sh", "-c", script])
        .env("W", workloads());
    clean(&mut c);
    c.output().expect("run marmoset")
}

fn clean(c: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") || k == "RANK" {
            c.env_remove(k);
        }
    }
}

/// The files in `dir`, by name.
fn files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The records of a trace file, every line a whole JSON record.
fn lines_of(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.ends_with('\n'),
        "{}: ends with a whole line",
        path.display()
    );
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l:.200}", path.display()))
        })
        .collect()
}

/// A trace of one process: exactly one header, on the first line; returns (pid, run, launches).
fn one_process(path: &Path) -> (u64, String, usize) {
    let recs = lines_of(path);
    let headers: Vec<&Value> = of_kind(&recs, "header");
    assert_eq!(headers.len(), 1, "{}: one header", path.display());
    assert_eq!(recs[0]["kind"], "header", "{}", path.display());
    let inspect = Command::new(marmoset())
        .arg("inspect")
        .arg(path)
        .output()
        .unwrap();
    ok(&inspect);
    (
        headers[0]["pid"].as_u64().unwrap(),
        headers[0]["run"].as_str().unwrap_or_default().to_string(),
        of_kind(&recs, "launch").len(),
    )
}

/// The launch counts the programs' own `calls` lines give, sorted.
fn own_launches(o: &Output) -> Vec<usize> {
    let mut v: Vec<usize> = stdout(o)
        .lines()
        .filter(|l| l.starts_with("calls "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("launch="))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    v.sort();
    v
}

/// Two trainers under one `marmoset run`: two traces, one per process, each whole and readable,
/// each with one program's launches, both of the same run; the run names both, and inspect on
/// the path names the other.
fn two_children(name: &str, script: &str) {
    let dir = fresh_dir(name);
    let trace = dir.join("t.jsonl");
    let o = run_script(&trace, script);
    ok(&o);
    assert_eq!(own_launches(&o).len(), 2, "{}", stdout(&o));
    let names = files(&dir);
    assert_eq!(names.len(), 2, "{names:?}\n{}", stderr(&o));
    assert!(names.contains("t.jsonl"), "{names:?}");
    let sibling = names.iter().find(|n| *n != "t.jsonl").unwrap();
    let pid = sibling
        .strip_prefix("t.")
        .and_then(|r| r.strip_suffix(".jsonl"))
        .unwrap();
    let (pid_a, run_a, launches_a) = one_process(&trace);
    let (pid_b, run_b, launches_b) = one_process(&dir.join(sibling));
    assert_eq!(pid, pid_b.to_string(), "named by its process");
    assert_ne!(pid_a, pid_b);
    assert!(!run_a.is_empty() && run_a == run_b, "{run_a} {run_b}");
    let mut traced = vec![launches_a, launches_b];
    traced.sort();
    assert_eq!(
        traced,
        own_launches(&o),
        "each trace holds one program's launches"
    );
    let err = stderr(&o);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("traces")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("2 traces") && said[0].contains("t.jsonl") && said[0].contains(sibling),
        "{err}"
    );
    let inspect = Command::new(marmoset())
        .arg("inspect")
        .arg(&trace)
        .output()
        .unwrap();
    ok(&inspect);
    let note: Vec<String> = stderr(&inspect)
        .lines()
        .filter(|l| l.contains(sibling.as_str()))
        .map(String::from)
        .collect();
    assert_eq!(note.len(), 1, "{}", stderr(&inspect));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn two_child_programs_one_after_the_other_leave_one_trace_each() {
    two_children(
        "sequential",
        "\"$W/trainer\" 2 8 16 0; \"$W/trainer\" 3 8 16 0",
    );
}

#[test]
fn two_child_programs_at_once_leave_one_trace_each() {
    two_children(
        "concurrent",
        "\"$W/trainer\" 2 8 16 0 & \"$W/trainer\" 3 8 16 0 & wait",
    );
}

/// A run's first process writes the path itself, whatever an earlier run left there: the
/// earlier run's traces (the path and its siblings) are gone after the next run.
#[test]
fn the_next_run_replaces_the_traces_of_the_last() {
    let dir = fresh_dir("rerun");
    let trace = dir.join("t.jsonl");
    ok(&run_script(
        &trace,
        "\"$W/trainer\" 2 8 16 0; \"$W/trainer\" 2 8 16 0",
    ));
    assert_eq!(files(&dir).len(), 2);
    let (first_pid, first_run, _) = one_process(&trace);
    let o = run_script(&trace, "exec \"$W/trainer\" 3 8 16 0");
    ok(&o);
    assert_eq!(
        files(&dir),
        BTreeSet::from(["t.jsonl".to_string()]),
        "{}",
        stderr(&o)
    );
    let (pid, run, launches) = one_process(&trace);
    assert_ne!((pid, &run), (first_pid, &first_run));
    assert_eq!(vec![launches], own_launches(&o));
    assert!(!stderr(&o).contains("traces,"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}

/// Under plain LD_PRELOAD (MARMOSET_TRACE set by hand): the processes under one first process
/// are one run (a process with RANK names its trace by rank), and the next invocation replaces
/// that run's traces instead of writing beside them.
#[test]
fn plain_ld_preload_children_are_one_run_and_ranks_name_their_traces() {
    let dir = fresh_dir("plain");
    let trace = dir.join("p.jsonl");
    let sim = Command::new(marmoset()).arg("sim-path").output().unwrap();
    ok(&sim);
    let run = || {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("\"$W/trainer\" 2 8 16 0; RANK=1 \"$W/trainer\" 3 8 16 0")
            .env("W", workloads());
        clean(&mut c);
        c.env("LD_PRELOAD", build_dir().join("libmarmoset.so"))
            .env("LD_LIBRARY_PATH", stdout(&sim).trim())
            .env("SIMGPU_PROFILE", "h100")
            .env("MARMOSET_TRACE", &trace);
        let o = c.output().unwrap();
        ok(&o);
        assert_eq!(
            files(&dir),
            BTreeSet::from(["p.jsonl".to_string(), "p.rank1.jsonl".to_string()]),
            "{}",
            stderr(&o)
        );
        let (pa, ra, la) = one_process(&trace);
        let (pb, rb, lb) = one_process(&dir.join("p.rank1.jsonl"));
        assert_ne!(pa, pb);
        assert!(!ra.is_empty() && ra == rb, "{ra} {rb}");
        assert_eq!(
            vec![la, lb],
            own_launches(&o),
            "the first trainer at the path"
        );
        ra
    };
    let first = run();
    let second = run();
    assert_ne!(first, second, "a new invocation is a new run");
    std::fs::remove_dir_all(&dir).ok();
}

/// A child forked after CUDA started passes through: nothing of it reaches the parent's trace,
/// which stays whole, and it writes none of its own.
#[test]
fn a_forked_child_writes_nothing_into_the_parents_trace() {
    let dir = fresh_dir("fork");
    let trace = dir.join("f.jsonl");
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(workloads().join("sim_probe"))
        .arg("fork");
    clean(&mut c);
    let o = c.output().unwrap();
    ok(&o);
    assert!(stdout(&o).contains("child_malloc=0"), "{}", stdout(&o));
    assert_eq!(files(&dir), BTreeSet::from(["f.jsonl".to_string()]));
    one_process(&trace);
    let sizes: Vec<u64> = of_kind(&lines_of(&trace), "alloc")
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1000, 3000], "the parent's allocations only");
    std::fs::remove_dir_all(&dir).ok();
}

/// A FIFO at the trace path, no reader: the program runs on at once, unchanged, untraced, with
/// one line naming MARMOSET_TRACE and the path.
#[test]
fn a_fifo_as_the_trace_path_is_refused_without_waiting() {
    let dir = fresh_dir("fifo");
    let fifo = dir.join("trace.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let plain = run_sim("h100", &[], "trainer", &["2", "8", "16", "0"]);
    ok(&plain);
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim", "--trace"])
        .arg(&fifo)
        .arg("--")
        .arg(workloads().join("trainer"))
        .args(["2", "8", "16", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    clean(&mut c);
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // marmoset passes SIGTERM on to the program, then ends as it did.
            // SAFETY: kill on the pid of a child this test started and has not reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(2));
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "still running after 60 s: opening the FIFO waits for a reader\n{}",
                stderr(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    ok(&o);
    assert_eq!(stdout(&o), stdout(&plain), "the program is unchanged");
    let err = stderr(&o);
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("marmoset")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains("MARMOSET_TRACE")
            && ours[0].contains(&fifo.display().to_string())
            && ours[0].contains("FIFO"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A trace cut by a full disk (a file size limit) ends with the shim's `trace_cut` mark; inspect,
/// report and export --chrome each read it up to its last whole record and say so in the same
/// one line.
#[test]
fn every_reader_reads_a_trace_cut_at_its_mark_and_says_so_once() {
    let dir = fresh_dir("cut");
    let trace = dir.join("cut.jsonl");
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -f 40; trap '' XFSZ; exec \"$0\" \"$@\"")
        .arg(marmoset())
        .args(["run", "--sim", "--trace"])
        .arg(&trace)
        .arg("--")
        .arg(workloads().join("trainer"))
        .arg("2");
    clean(&mut c);
    ok(&c.output().unwrap());
    let text = std::fs::read_to_string(&trace).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.starts_with("{\"trace_cut\""), "{last}");
    let whole = text.lines().count() - 1;
    let html = dir.join("cut.html");
    let chrome = dir.join("cut.json");
    let mut notes = Vec::new();
    for args in [
        vec!["inspect".into(), trace.clone().into_os_string()],
        vec![
            "report".into(),
            trace.clone().into_os_string(),
            "-o".into(),
            html.clone().into_os_string(),
        ],
        vec![
            "export".into(),
            "--chrome".into(),
            trace.clone().into_os_string(),
            "-o".into(),
            chrome.clone().into_os_string(),
        ],
    ] {
        let o = Command::new(marmoset()).args(&args).output().unwrap();
        ok(&o);
        let err = stderr(&o);
        let cut: Vec<&str> = err.lines().filter(|l| l.contains(": cut: ")).collect();
        assert_eq!(cut.len(), 1, "{args:?}: {err}");
        assert!(
            cut[0].contains("writing it failed") && cut[0].contains(&format!("{whole} complete")),
            "{args:?}: {err}"
        );
        notes.push(cut[0].to_string());
    }
    assert!(notes.iter().all(|n| *n == notes[0]), "{notes:?}");
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&chrome).unwrap()).unwrap();
    assert!(!v["traceEvents"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).ok();
}
