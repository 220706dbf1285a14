//! Helpers for the end-to-end tests: where the built binaries are, building the C workloads, and
//! running them on the simulated GPU through `marmoset run`. The tests expect a release build of
//! the workspace (`cargo build --release --workspace`, which the README's test command does); a
//! missing build fails the tests with that instruction, it never skips them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// target/<profile> of this test binary (it lives in target/<profile>/deps).
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

pub fn marmoset() -> PathBuf {
    let m = build_dir().join("marmoset");
    assert!(
        m.is_file(),
        "{} is missing: build the workspace first (cargo build --release --workspace)",
        m.display()
    );
    m
}

/// Builds the C workloads once per test process and returns their directory.
pub fn workloads() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        marmoset();
        let profile = build_dir()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let out = Command::new(root().join("scripts/build-workloads.sh"))
            .env("MARMOSET_CARGO_PROFILE", profile)
            .output()
            .expect("run scripts/build-workloads.sh");
        assert!(
            out.status.success(),
            "building the workloads failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// Runs a workload with `marmoset run --sim=PROFILE --no-shim`, with extra environment.
pub fn run_sim(profile: &str, env: &[(&str, &str)], prog: &str, args: &[&str]) -> Output {
    let mut c = Command::new(marmoset());
    c.arg("run")
        .arg(format!("--sim={profile}"))
        .arg("--no-shim")
        .arg("--");
    c.arg(workloads().join(prog)).args(args);
    for k in [
        "SIMGPU_MEMORY",
        "SIMGPU_MODE",
        "SIMGPU_FAIL",
        "SIMGPU_REPORT",
        "SIMGPU_PROFILE",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run marmoset")
}

/// Runs a workload under the shim (no trace) on the simulated `profile`, Marmoset's log at info,
/// with none of the test's own MARMOSET_ and SIMGPU_ settings but `env`.
pub fn under_shim(profile: &str, env: &[(&str, &str)], prog: &str, args: &[&str]) -> Output {
    let mut c = Command::new(marmoset());
    c.arg("run")
        .arg(format!("--sim={profile}"))
        .arg("--")
        .arg(workloads().join(prog))
        .args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    c.env("MARMOSET_LOG", "info");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run marmoset")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `key=value` pairs of a probe's output (several may share a line).
pub fn values(o: &Output) -> HashMap<String, String> {
    stdout(o)
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A numeric value of a probe's output; panics with the whole output when absent.
pub fn num(o: &Output, key: &str) -> f64 {
    values(o)
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key} in:\n{}{}", stdout(o), stderr(o)))
}

/// A fresh temporary path under the build directory, never handed out twice: tests of one
/// binary run in parallel, and two that name their files alike must not share them.
pub fn temp_path(name: &str) -> PathBuf {
    let dir = build_dir().join("e2e-tmp");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}-{}-{name}", std::process::id(), unique()))
}

/// Runs a workload under `marmoset run --sim=h100` with libmarmoset.so, writing a trace; returns
/// the output and the trace's records (empty when none was written).
pub fn run_shim(
    env: &[(&str, &str)],
    prog: &str,
    args: &[&str],
) -> (Output, Vec<serde_json::Value>) {
    let trace = temp_path(&format!("{prog}.jsonl"));
    let mut c = Command::new(marmoset());
    c.args(["run", "--sim=h100", "--trace"])
        .arg(&trace)
        .arg("--");
    c.arg(workloads().join(prog)).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run marmoset");
    let records = if trace.exists() {
        take_trace(&trace)
    } else {
        Vec::new()
    };
    (out, records)
}

/// The records of the trace at `path`, a JSON line each; the file is removed.
pub fn take_trace(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no trace at {}: {e}", path.display()));
    std::fs::remove_file(path).ok();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The simulator's report (SIMGPU_REPORT) at `path`.
pub fn sim_report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no simulator report at {}: {e}", path.display()));
    serde_json::from_str(&text).expect("a simulator report in JSON")
}

/// A workload run without Marmoset on the simulated H100: its peak and its output.
pub fn unlimited(prog: &str, args: &[&str]) -> (u64, String) {
    let r = temp_path(&format!("{prog}-unlimited.json"));
    let o = run_sim(
        "h100",
        &[("SIMGPU_REPORT", r.to_str().unwrap())],
        prog,
        args,
    );
    ok(&o);
    let peak = sim_report(&r)["peak_bytes"].as_u64().expect("a peak");
    std::fs::remove_file(&r).ok();
    (peak, stdout(&o))
}

/// A workload under planner policy `policy` within `budget` on the simulated H100 (the program
/// waits for the plan; Marmoset's log at info), with these extra settings: its output, its
/// trace's records and the simulator's report.
pub fn planned(
    policy: &str,
    budget: u64,
    extra: &[(&str, &str)],
    prog: &str,
    args: &[&str],
) -> (Output, Vec<serde_json::Value>, serde_json::Value) {
    let r = temp_path(&format!("{prog}-{policy}.json"));
    let budget = budget.to_string();
    let mut env = vec![
        ("MARMOSET_POLICY", policy),
        ("MARMOSET_MEMORY_LIMIT", budget.as_str()),
        ("MARMOSET_PLAN_WAIT", "1"),
        ("MARMOSET_LOG", "info"),
        ("SIMGPU_REPORT", r.to_str().unwrap()),
    ];
    env.extend_from_slice(extra);
    let (o, records) = run_shim(&env, prog, args);
    let report = sim_report(&r);
    std::fs::remove_file(&r).ok();
    (o, records, report)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// `marmoset plan` on the trace of a guided run (before [`take_trace`] removes it), at the run's
/// budget and policy: it plans what the shim planned (the model as held, the links its plan
/// assumed, the plan as carried out).
pub fn plan_offline(trace: &Path, budget: &str, policy: &str) -> serde_json::Value {
    let o = Command::new(marmoset())
        .arg("plan")
        .arg(trace)
        .args(["--budget", budget, "--policy", policy, "--json"])
        .output()
        .expect("run marmoset plan");
    ok(&o);
    serde_json::from_slice(&o.stdout).expect("marmoset plan --json")
}

/// Asserts the shim's `plan` record says how memory was held, and that [`plan_offline`]'s plan
/// fits and is predicted as the shim's plan was (within 0.1%: it plans the same records, under
/// the same budget); returns the offline prediction (ms).
pub fn agrees_offline(what: &str, offline: &serde_json::Value, plan: &serde_json::Value) -> f64 {
    assert!(plan["held"].is_object(), "{what}: {plan}");
    assert_eq!(offline["held"], plan["held"], "{what}");
    let predicted = plan["predicted_ms"].as_f64().unwrap();
    let again = offline["planned_time_s"].as_f64().unwrap() * 1e3;
    assert!(
        offline["feasible"] == true && (again / predicted - 1.0).abs() < 0.001,
        "{what}: marmoset plan on the trace predicts {again:.2} ms, the shim's plan {predicted:.2} ms: {offline}"
    );
    eprintln!(
        "{what}: marmoset plan on the trace {again:.3} ms, the shim's plan {predicted:.3} ms ({:+.2}%, simulated)",
        100.0 * (again / predicted - 1.0)
    );
    again
}

/// Whether a `plan` record is a replan of guided execution's memory feedback (made within
/// less of the budget because the allocator needed more than a plan counted), declined or not.
pub fn is_replan(plan: &serde_json::Value) -> bool {
    plan["feedback"] == true
}

/// Whether a `plan` record guided: not a replan of the memory feedback that it declined.
pub fn guided_by(plan: &serde_json::Value) -> bool {
    plan["declined"] != true
}

/// The device budget `marmoset plan` must be given to plan what a trace's last plan that guided
/// planned:
/// `budget` less what the memory feedback left unplanned.
pub fn planned_budget(trace: &Path, budget: u64) -> u64 {
    let text = std::fs::read_to_string(trace)
        .unwrap_or_else(|e| panic!("no trace at {}: {e}", trace.display()));
    let unplanned = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["kind"] == "plan" && guided_by(r))
        .and_then(|p| p["unplanned"].as_u64())
        .unwrap_or(0);
    budget.saturating_sub(unplanned)
}

/// Records of a kind.
pub fn of_kind<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// The access (`r`, `w`, `rw`) of each touch of a record, in order.
pub fn accesses(record: &serde_json::Value) -> Vec<&str> {
    record["touches"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["access"].as_str()).collect())
        .unwrap_or_default()
}

/// Asserts the program succeeded, showing everything it printed when it did not.
pub fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// Asserts a planned data-mode run (`planned`) kept everything: it succeeded with the
/// unlimited run's output `plain`, MARMOSET_VERIFY found no replay that differed, nothing was
/// lost, the simulator's peak stayed within `budget` and nothing trapped. `at` names the run.
pub fn exact_within(at: &str, o: &Output, plain: &str, report: &serde_json::Value, budget: u64) {
    ok(o);
    let err = stderr(o);
    assert_eq!(stdout(o), plain, "{at}: the same losses and checksum");
    assert!(!err.contains("MARMOSET_VERIFY: replaying"), "{at}: {err}");
    assert!(!err.contains("lost"), "{at}: {err}");
    assert!(
        report["peak_bytes"].as_u64().unwrap() <= budget,
        "{at}: {report}"
    );
    assert_eq!(
        report["sticky_error"],
        serde_json::Value::Null,
        "{at}: no trap"
    );
}

/// Runs a PyTorch example (through `marmoset run`). Now and then, on a loaded machine, such a run
/// aborts *after* its last line: "terminate called without an active exception". The cause is
/// torch's and CPython's, not ours (scripts/torch-exit-race.py forces it under gdb): after
/// backward has returned, torch's autograd thread drops the last reference to the finished
/// GraphTask, whose saved thread-local state holds a Python object; releasing it takes the GIL;
/// if the interpreter began finalizing meanwhile, CPython 3.11 ends that thread with
/// pthread_exit, and the forced unwind through torch's noexcept destructor calls std::terminate.
/// No frame of Marmoset or the simulated GPU is on that stack. Its rate is the host's load, not
/// Marmoset's: none in about 250 runs on 2026-11-24; with two busy loops on 2 cores (2026-11-28),
/// 2 of 40 ResNet-50 runs without the shim and 1 of 40 under it; twice in a row once in CI, and
/// four times in a row in two suite runs (the same test, ResNet-50 guided at half its peak;
/// retried at once while other test binaries loaded the machine), so such a run is reported loudly and
/// run again, up to five more times after a doubling pause; any other failure, or the same one
/// six times, stands.
pub fn torch_output(c: &mut Command) -> Output {
    let aborted_at_exit = |o: &Output| {
        o.status.code() == Some(134)
            && stderr(o).contains("terminate called without an active exception")
            && stdout(o).contains("peak memory allocated by torch")
    };
    let mut o = c.output().expect("run marmoset");
    // A pause before each retry, doubling: the rate follows the machine's load, and the other
    // test binaries' load changes within seconds.
    for pause in [1, 2, 4, 8, 16] {
        if !aborted_at_exit(&o) {
            break;
        }
        eprintln!(
            "*** the known abort at exit after a complete run (torch's autograd thread meets interpreter finalization; scripts/torch-exit-race.py): running it again in {pause} s ***"
        );
        std::thread::sleep(std::time::Duration::from_secs(pause));
        o = c.output().expect("run marmoset");
    }
    o
}

/// The Python of `.venv/` (scripts/setup-torch.sh makes it; the README's test command runs it).
/// A missing venv fails the test with that command: torch tests never skip.
pub fn venv_python() -> PathBuf {
    let py = root().join(".venv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup-torch.sh (the README's test command does)",
        py.display()
    );
    py
}

/// The Python of `.venv-torch-VERSION/` (`scripts/setup-torch.sh --version VERSION` makes it;
/// the README's test command makes 2.11.0's). A missing venv fails the test with that command.
pub fn venv_python_of(version: &str) -> PathBuf {
    let py = root().join(format!(".venv-torch-{version}/bin/python"));
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup-torch.sh --version {version} (the README's test command does)",
        py.display()
    );
    py
}

/// `marmoset run SIM MARMOSET_ARGS -- .venv/bin/python examples/SCRIPT ARGS` (SIM: `--sim`,
/// `--sim=p100`), with none of the test's own MARMOSET_, SIMGPU_, TORCH_ and PYTORCH_ settings.
pub fn torch_command(sim: &str, marmoset_args: &[&str], script: &str, args: &[&str]) -> Command {
    torch_command_of(&venv_python(), sim, marmoset_args, script, args)
}

/// [`torch_command`] with another venv's Python ([`venv_python_of`]).
pub fn torch_command_of(
    python: &Path,
    sim: &str,
    marmoset_args: &[&str],
    script: &str,
    args: &[&str],
) -> Command {
    let mut c = Command::new(marmoset());
    c.args(["run", sim]).args(marmoset_args).arg("--");
    c.arg(python)
        .arg(root().join("examples").join(script))
        .args(args);
    without_settings(&mut c);
    c
}

/// Removes the test's own MARMOSET_, SIMGPU_, TORCH_ and PYTORCH_ settings from `c`'s
/// environment: a program under test gets only those the test gives it.
pub fn without_settings(c: &mut Command) {
    for (k, _) in std::env::vars() {
        if ["MARMOSET_", "SIMGPU_", "TORCH_", "PYTORCH_"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            c.env_remove(k);
        }
    }
}

/// `marmoset run --sim MARMOSET_ARGS -- .venv/bin/python examples/SCRIPT ARGS` in shape mode,
/// with no inherited Marmoset, simulator or framework settings; returns the output (which must
/// succeed) and the simulator's report.
pub fn torch_example(
    marmoset_args: &[&str],
    script: &str,
    args: &[&str],
    name: &str,
) -> (Output, serde_json::Value) {
    torch_example_with(marmoset_args, &[], script, args, name)
}

/// [`torch_example`] with these environment variables set (after the test's own MARMOSET_,
/// SIMGPU_, TORCH_ and PYTORCH_ ones are removed).
pub fn torch_example_with(
    marmoset_args: &[&str],
    env: &[(&str, &str)],
    script: &str,
    args: &[&str],
    name: &str,
) -> (Output, serde_json::Value) {
    torch_example_of(&venv_python(), marmoset_args, env, script, args, name)
}

/// [`torch_example_with`] with another venv's Python ([`venv_python_of`]).
pub fn torch_example_of(
    python: &Path,
    marmoset_args: &[&str],
    env: &[(&str, &str)],
    script: &str,
    args: &[&str],
    name: &str,
) -> (Output, serde_json::Value) {
    let report = temp_path(&format!("torch-{name}-report.json"));
    let mut c = torch_command_of(python, "--sim", marmoset_args, script, args);
    c.env("SIMGPU_MODE", "shape").env("SIMGPU_REPORT", &report);
    c.envs(env.iter().copied());
    let out = torch_output(&mut c);
    ok(&out);
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no simulator report ({e}):\n{}{}",
            stdout(&out),
            stderr(&out)
        )
    });
    std::fs::remove_file(&report).ok();
    (out, serde_json::from_str(&text).expect("report JSON"))
}

/// Three loss lines, no error, no trap.
pub fn trained_three_steps(out: &Output, report: &serde_json::Value) {
    let steps = stdout(out)
        .lines()
        .filter(|l| l.starts_with("step ") && l.contains("loss"))
        .count();
    assert_eq!(steps, 3, "{}{}", stdout(out), stderr(out));
    assert!(report["sticky_error"].is_null(), "a trap: {report}");
    assert!(!stderr(out).contains("illegal address"), "{}", stderr(out));
}

/// `prog args` under planner policy `policy` within `fraction` of its unlimited peak, in data
/// mode with MARMOSET_VERIFY, held to [`exact_within`] against the unlimited run (`unlimited`:
/// its peak and output). Returns the run's name for messages and its trace's records.
pub fn verified_exact(
    prog: &str,
    args: &[&str],
    policy: &str,
    fraction: f64,
    unlimited: &(u64, String),
) -> (String, Vec<serde_json::Value>) {
    let (peak, plain) = unlimited;
    let at = format!("{prog} {} under {policy} at {fraction} P", args.join(" "));
    let budget = (*peak as f64 * fraction) as u64;
    let (o, records, report) = planned(policy, budget, &[("MARMOSET_VERIFY", "1")], prog, args);
    exact_within(&at, &o, plain, &report, budget);
    (at, records)
}
