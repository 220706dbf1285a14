//! The `marmoset` command as a careful user meets it: every `run` flag reaches the program,
//! signals reach it too, limits are stated and named, bad input gives one message and exit 2
//! (never a panic, an abort or a signal), and traces cut short are read up to their last whole
//! record.

use marmoset_e2e::*;
use std::process::{Command, Output, Stdio};

fn m(args: &[&str]) -> Output {
    Command::new(marmoset())
        .args(args)
        .env_remove("MARMOSET_POLICY")
        .output()
        .unwrap()
}

/// The `KEY=value` lines `env` printed.
fn env_of(o: &Output) -> Vec<String> {
    stdout(o).lines().map(String::from).collect()
}

/// The long flags `marmoset SUB --help` lists.
fn flags(sub: &str) -> Vec<String> {
    let help = stdout(&m(&[sub, "--help"]));
    let mut v: Vec<String> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == ']')
        .filter(|w| {
            w.starts_with("--")
                && w.len() > 2
                && w[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .map(String::from)
        .collect();
    v.sort();
    v.dedup();
    v.retain(|f| f != "--help" && f != "--version");
    v
}

#[test]
fn every_run_flag_reaches_the_program() {
    // flag, value, what the program must see. A flag `run --help` lists without a row here fails.
    let rows: &[(&str, &str, &str)] = &[
        ("--policy", "lru", "MARMOSET_POLICY=lru"),
        (
            "--trace",
            "/tmp/marmoset-e2e-t.jsonl",
            "MARMOSET_TRACE=/tmp/marmoset-e2e-t.jsonl",
        ),
        ("--memory-limit", "0.5", "MARMOSET_MEMORY_LIMIT=0.5"),
        (
            "--workspace-limit",
            "64MiB",
            "MARMOSET_WORKSPACE_LIMIT=64MiB",
        ),
        ("--workspace-total", "1GiB", "MARMOSET_WORKSPACE_TOTAL=1GiB"),
        ("--batch-sizes", "all", "MARMOSET_BATCH_SIZES=all"),
        ("--joint-workspace", "off", "MARMOSET_JOINT_WORKSPACE=off"),
        ("--sim", "p100", "SIMGPU_PROFILE=p100"),
    ];
    let listed = flags("run");
    for f in &listed {
        if f == "--no-shim" {
            continue;
        }
        let Some((flag, value, want)) = rows.iter().find(|r| r.0 == f) else {
            panic!("{f} is a run flag this test does not check: add it");
        };
        let arg = if *flag == "--sim" {
            format!("--sim={value}")
        } else {
            flag.to_string()
        };
        let mut args = vec!["run"];
        if *flag != "--sim" {
            args.extend(["--sim", &arg, value]);
        } else {
            args.push(&arg);
        }
        args.extend(["--", "env"]);
        let o = m(&args);
        ok(&o);
        let env = env_of(&o);
        assert!(
            env.iter().any(|l| l == want),
            "{flag} {value}: {want} not in\n{}",
            stdout(&o)
        );
        assert!(
            env.iter()
                .any(|l| l.starts_with("LD_PRELOAD=") && l.contains("libmarmoset.so"))
        );
    }
    assert!(listed.len() >= rows.len(), "{listed:?}");
    // --no-shim: no libmarmoset.so, and the shim's flags are refused with it, each by name.
    let o = m(&["run", "--sim", "--no-shim", "--", "env"]);
    ok(&o);
    assert!(!stdout(&o).contains("libmarmoset.so"));
    for (flag, value, _) in rows.iter().filter(|r| r.0 != "--sim") {
        let o = m(&["run", "--sim", "--no-shim", flag, value, "--", "true"]);
        assert_eq!(o.status.code(), Some(2), "{flag}");
        assert!(
            stderr(&o).contains(flag) && stderr(&o).contains("--no-shim"),
            "{}",
            stderr(&o)
        );
    }
}

/// On the simulated GPU the program waits for the in-process planner (MARMOSET_PLAN_WAIT=1),
/// unless the user set the variable; without `--sim`, or without the shim, nothing is set.
#[test]
fn on_the_simulated_gpu_the_program_waits_for_the_planner_unless_told_not_to() {
    let wait = |args: &[&str], user: Option<&str>| {
        let mut c = Command::new(marmoset());
        c.arg("run")
            .args(args)
            .args(["--", "env"])
            .env_remove("MARMOSET_PLAN_WAIT");
        if let Some(v) = user {
            c.env("MARMOSET_PLAN_WAIT", v);
        }
        let o = c.output().unwrap();
        ok(&o);
        env_of(&o)
            .into_iter()
            .find_map(|l| l.strip_prefix("MARMOSET_PLAN_WAIT=").map(String::from))
    };
    assert_eq!(wait(&["--sim"], None).as_deref(), Some("1"));
    assert_eq!(wait(&["--sim=p100"], None).as_deref(), Some("1"));
    assert_eq!(wait(&["--sim"], Some("0")).as_deref(), Some("0"));
    assert_eq!(wait(&["--sim", "--no-shim"], None), None);
    assert_eq!(wait(&[], None), None);
}

#[test]
fn every_bad_run_flag_stops_with_exit_2_naming_the_flag() {
    for (flag, value, accepted) in [
        ("--policy", "bogus", "none, lru"),
        ("--batch-sizes", "x", "all, pow2, undivided"),
        ("--memory-limit", "1.5", "fraction"),
        ("--memory-limit", "0", "fraction"),
        ("--workspace-limit", "64 apples", "MiB"),
        ("--workspace-total", "18446744073709551616", "at most"),
    ] {
        let o = m(&["run", "--sim", flag, value, "--", "true"]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(flag) && err.contains(accepted),
            "{flag} {value:?}: {err}"
        );
    }
}

#[test]
fn wd_turns_on_from_the_command_line_as_from_the_environment() {
    let csv = temp_path("conv2.csv");
    std::fs::write(
        &csv,
        "source,W,H,C_in,N,C_out,kernel_w,kernel_h,pad_w,pad_h,stride_w,stride_h\nconv2,27,27,64,256,192,5,5,2,2,1,1\n",
    )
    .unwrap();
    let cache = temp_path("wd-cache");
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(marmoset());
        c.args(["run", "--sim=p100"]).args(flags).arg("--");
        c.arg(workloads().join("conv_layers")).arg(&csv).arg("64");
        for (k, _) in std::env::vars() {
            if k.starts_with("MARMOSET_") || k.starts_with("SIMGPU_") {
                c.env_remove(k);
            }
        }
        c.env("SIMGPU_MODE", "shape")
            .env("MARMOSET_CACHE_DIR", &cache);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        ok(&o);
        stdout(&o)
    };
    let fwd = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("conv2") && l.contains(" fwd "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    let plain = run(&[], &[]);
    let by_env = run(&[], &[("MARMOSET_WORKSPACE_TOTAL", "64MiB")]);
    let by_flag = run(&["--workspace-total", "64MiB"], &[]);
    assert!(fwd(&plain).contains("GEMM"), "{plain}");
    assert!(fwd(&by_env).contains(" FFT "), "{by_env}");
    assert_eq!(by_flag, by_env, "the flag does what the variable does");
    let sizes_env = run(
        &[],
        &[
            ("MARMOSET_WORKSPACE_LIMIT", "64MiB"),
            ("MARMOSET_BATCH_SIZES", "undivided"),
        ],
    );
    let sizes_flag = run(
        &["--workspace-limit", "64MiB", "--batch-sizes", "undivided"],
        &[],
    );
    assert_eq!(sizes_flag, sizes_env);
    assert_ne!(
        fwd(&sizes_flag),
        fwd(&by_env),
        "undivided cannot use FFT within 64 MiB"
    );
    std::fs::remove_dir_all(&cache).ok();
}

#[test]
fn a_program_that_cannot_run_exits_as_a_shell_says() {
    let o = m(&["run", "--sim", "--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/program"));
    let not_exec = temp_path("not-executable");
    std::fs::write(&not_exec, "data").unwrap();
    let o = m(&[
        "run",
        "--sim",
        "--no-shim",
        "--",
        not_exec.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
}

fn alive(pid: &str) -> bool {
    // Gone, or a zombie about to be reaped by init.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn signals_reach_the_program_and_marmoset_ends_as_it_does() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    for (sig, num) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
        for trap in [false, true] {
            // The program prints its pid, then sleeps; with `trap` it catches the signal and
            // exits 3 on its own.
            let script = if trap {
                format!("trap 'kill $!; exit 3' {sig}; echo $$; sleep 37 & wait")
            } else {
                "echo $$; exec sleep 37".to_string()
            };
            let mut c = Command::new(marmoset());
            c.args(["run", "--sim", "--", "sh", "-c", &script])
                .stdout(Stdio::piped());
            // A test run started in the background by a non-interactive shell inherits SIGINT
            // ignored, and so would marmoset's program (as it would without marmoset): start
            // marmoset with the signals' default actions, as a terminal would.
            // SAFETY: signal() with SIG_DFL is async-signal-safe, between fork and exec.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                        libc::signal(s, libc::SIG_DFL);
                    }
                    Ok(())
                });
            }
            let mut child = c.spawn().unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            let pid = line.trim().to_string();
            assert!(alive(&pid));
            let k = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(child.id().to_string())
                .status()
                .unwrap();
            assert!(k.success());
            let status = child.wait().unwrap();
            if trap {
                assert_eq!(status.code(), Some(3), "SIG{sig}, trapped: {status:?}");
            } else {
                assert_eq!(status.signal(), Some(num), "SIG{sig}: {status:?}");
            }
            for _ in 0..100 {
                if !alive(&pid) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(!alive(&pid), "SIG{sig}: the program {pid} was left running");
        }
    }
}

#[test]
fn a_signal_sent_to_marmosets_group_reaches_the_program_once() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    // The program counts the SIGINTs it gets; another process signals the whole group that
    // marmoset leads, as a job runner or `kill -INT -PGID` does.
    let program = "import signal, sys, time\n\
n = 0\n\
def got(*_):\n    global n\n    n += 1\n\
signal.signal(signal.SIGINT, got)\n\
print('ready', flush=True)\n\
end = time.time() + 0.6\n\
while time.time() < end:\n    time.sleep(0.01)\n\
print(n, flush=True)\n";
    for run in 0..8 {
        let mut c = Command::new(marmoset());
        c.args(["run", "--no-shim", "--", "python3", "-c", program])
            .stdout(Stdio::piped())
            .process_group(0);
        // SAFETY: signal() with SIG_DFL is async-signal-safe, between fork and exec.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        // SAFETY: signalling the process group this test just made.
        assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) }, 0);
        line.clear();
        out.read_line(&mut line).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "run {run}: {status:?}");
        assert_eq!(
            line.trim(),
            "1",
            "run {run}: the program got SIGINT {} times",
            line.trim()
        );
    }
}

fn table(name: &str) -> std::path::PathBuf {
    let t = temp_path(name);
    std::fs::write(
        &t,
        "batch,algo,time_ms,workspace_bytes\n1,0,1.0,0\n2,0,1.5,0\n4,1,2.0,100\n",
    )
    .unwrap();
    t
}

#[test]
fn microbatch_states_its_limits_instead_of_panicking_or_aborting() {
    let t = table("mb-limits.csv");
    let t = t.to_str().unwrap();
    let help = stdout(&m(&["microbatch", "--help"]));
    let limit = planner::microbatch::MAX_BATCH.to_string();
    assert!(help.contains(&limit), "the limit is in --help: {help}");
    for n in ["18446744073709551615", "1000000000", "100000", "65537"] {
        for sizes in ["pow2", "all"] {
            let o = m(&[
                "microbatch",
                "--table",
                t,
                "--batch",
                n,
                "--workspace",
                "1MiB",
                "--sizes",
                sizes,
            ]);
            assert_eq!(o.status.code(), Some(2), "{n} {sizes}: {}", stderr(&o));
            assert!(
                stderr(&o).contains("--batch") && stderr(&o).contains(&format!("at most {limit}")),
                "{}",
                stderr(&o)
            );
        }
    }
    let o = m(&[
        "microbatch",
        "--table",
        t,
        "--batch",
        "0",
        "--workspace",
        "1MiB",
    ]);
    assert!(stderr(&o).contains("--batch: at least 1"), "{}", stderr(&o));
    // At the limit it answers, in seconds and little memory.
    let o = m(&[
        "microbatch",
        "--table",
        t,
        "--batch",
        &limit,
        "--workspace",
        "1MiB",
        "--sizes",
        "all",
    ]);
    ok(&o);
    assert!(
        stdout(&o).contains(&format!("{} x 4 (algo 1)", (1 << 16) / 4)),
        "{}",
        stdout(&o)
    );
}

/// A DTR log of one iteration: x (1000 B) -> y (4000 B) -> z (2000 B).
const DTR: &str = r#"{"INSTRUCTION":"ANNOTATE","ANNOTATION":"START"}
{"INSTRUCTION":"CONSTANT","NAME":"x"}
{"INSTRUCTION":"MEMORY","MEMORY":"1000","NAME":"x"}
{"ARGS":["x"],"INSTRUCTION":"CALL","NAME":"f","RESULT":["y"],"TIME":"2000000"}
{"INSTRUCTION":"MEMORY","MEMORY":"4000","NAME":"y"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y"}
{"ARGS":["y"],"INSTRUCTION":"CALL","NAME":"g","RESULT":["z"],"TIME":"1000000"}
{"INSTRUCTION":"MEMORY","MEMORY":"2000","NAME":"z"}
{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"z"}
{"INSTRUCTION":"RELEASE","NAME":"y"}
{"INSTRUCTION":"RELEASE","NAME":"z"}
"#;

fn dtr_log(name: &str, text: &str) -> String {
    let p = temp_path(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn plan_takes_smartpool_as_its_help_says() {
    let log = dtr_log("sp.log", DTR);
    let help = stdout(&m(&["plan", "--help"]));
    assert!(help.contains("smartpool"));
    let o = m(&["plan", &log, "--policy", "smartpool"]);
    ok(&o);
    // x is a constant; y and z live together at g: a peak load of 7000 B, and SmartPool's pool
    // is that size.
    assert!(
        stdout(&o).contains("a pool of 7000 B for a peak load of 7000 B"),
        "{}",
        stdout(&o)
    );
    let o = m(&[
        "plan",
        &log,
        "--policy",
        "smartpool",
        "--budget",
        "6000",
        "--json",
    ]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["pool_bytes"], 7000);
    assert_eq!(v["feasible"], false);
    let o = m(&["plan", &log, "--policy", "bogus", "--budget", "0.5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--policy") && stderr(&o).contains("smartpool"));
}

#[test]
fn numbers_out_of_range_are_refused_with_the_limit() {
    let log = dtr_log("range.log", DTR);
    let o = m(&["plan", &log, "--budget", "18446744073709551616"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--budget") && stderr(&o).contains("at most 18446744073709551615"),
        "{}",
        stderr(&o)
    );
    for (from, to, what) in [
        (
            r#""MEMORY":"4000""#,
            r#""MEMORY":"1e30""#,
            "MEMORY 1e30 is out of range",
        ),
        (
            r#""ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"y""#,
            r#""ALIAS":"-2","INSTRUCTION":"ALIAS","NAME":"y""#,
            "ALIAS -2 is out of range",
        ),
    ] {
        let bad = dtr_log("range-bad.log", &DTR.replacen(from, to, 1));
        for args in [
            vec!["plan", &bad, "--budget", "0.5"],
            vec!["import", "dtr", &bad, "-o", "/dev/null"],
        ] {
            let o = m(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?}");
            assert!(stderr(&o).contains(what), "{}", stderr(&o));
        }
    }
}

#[test]
fn an_empty_trace_is_refused_instead_of_printing_nan() {
    let log = dtr_log(
        "empty.log",
        "{\"INSTRUCTION\":\"ANNOTATE\",\"ANNOTATION\":\"START\"}\n",
    );
    for args in [
        vec!["plan", &log, "--budget", "0.5"],
        vec!["plan", &log, "--sweep"],
    ] {
        let o = m(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("nothing to plan"), "{}", stderr(&o));
        assert!(!stdout(&o).contains("NaN") && !stdout(&o).contains("inf"));
    }
}

#[test]
fn import_never_writes_over_its_own_log() {
    let log = dtr_log("self.log", DTR);
    let link = temp_path("self-link.log");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&log, &link).unwrap();
    for out in [log.as_str(), link.to_str().unwrap()] {
        let o = m(&["import", "dtr", &log, "-o", out]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("-o"), "{}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            DTR,
            "the log is intact"
        );
    }
}

#[test]
fn inspect_and_plan_read_a_cut_trace_to_its_last_whole_record() {
    // A timed trace of the trainer, cut in the middle of a record.
    let (o, records) = run_shim(&[("MARMOSET_TRACE_TIMING", "1")], "trainer", &["2"]);
    ok(&o);
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    let keep = lines.len() * 3 / 4;
    let mut text = lines[..keep].join("\n");
    text.push('\n');
    text.push_str(&lines[keep][..lines[keep].len() / 2]);
    let cut = temp_path("cut.jsonl");
    std::fs::write(&cut, &text).unwrap();
    let o = m(&["inspect", cut.to_str().unwrap()]);
    ok(&o);
    assert!(
        stdout(&o).starts_with(&format!("{keep} records")),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains(&format!("cut: line {}", keep + 1)),
        "{}",
        stderr(&o)
    );
    let o = m(&["plan", cut.to_str().unwrap(), "--budget", "0.9"]);
    assert!(stderr(&o).contains("cut:"), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains(&format!(": line {}: ", keep + 1)),
        "not refused whole: {}",
        stderr(&o)
    );
}

/// A small deterministic PRNG (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

#[test]
fn random_arguments_never_panic_abort_or_fail_silently() {
    let t = table("prop.csv");
    let log = dtr_log("prop.log", DTR);
    let (o, records) = run_shim(&[("MARMOSET_TRACE_TIMING", "1")], "trainer", &["1"]);
    ok(&o);
    let trace = temp_path("prop.jsonl");
    std::fs::write(
        &trace,
        records.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let out = temp_path("prop-out.json");
    // A mutated `-o` may name a relative path ("100000"): it lands here, not in the checkout.
    let cwd = temp_path("prop-cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let (t, log, trace, out) = (
        t.to_str().unwrap(),
        log.as_str(),
        trace.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let numbers = [
        "0",
        "1",
        "-1",
        "0.5",
        "1.0",
        "1.5",
        "NaN",
        "inf",
        "-inf",
        "1e308",
        "4",
        "65536",
        "65537",
        "100000",
        "1000000000",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999",
        "64MiB",
        "1e30GiB",
        "-5MiB",
        "0.0000001",
    ];
    let huge = [
        "18446744073709551615",
        "18446744073709551616",
        "1000000000",
        "100000",
        "9223372036854775807",
    ];
    let words = [
        "",
        " ",
        "all",
        "pow2",
        "undivided",
        "lru",
        "none",
        "capuchin",
        "smartpool",
        "dtr",
        "h100",
        "p100",
        "x.json",
        "héllo",
        "日本",
        "\u{202e}",
        "--",
        "-",
        "-o",
    ];
    let files = [t, log, trace, "/nonexistent/file", "/dev/null", "/"];
    // A valid command line of each subcommand, which the test then mutates.
    let bases: [(&str, Vec<&str>); 6] = [
        ("run", vec!["--sim"]),
        (
            "microbatch",
            vec!["--table", t, "--batch", "8", "--workspace", "1MiB"],
        ),
        ("import", vec!["dtr", log, "-o", out]),
        ("plan", vec![log, "--budget", "0.5"]),
        ("inspect", vec![trace]),
        ("sim-path", vec![]),
    ];
    let mut r = Rng(0x5eed_1234_abcd);
    let value = |r: &mut Rng| -> String {
        match r.next() % 5 {
            0 => r.pick(&huge).to_string(),
            1 | 2 => r.pick(&numbers).to_string(),
            3 => r.pick(&words).to_string(),
            _ => r.pick(&files).to_string(),
        }
    };
    // Runs that met a stated limit: the generator reaches them.
    let mut limits = 0;
    for _ in 0..400 {
        let (sub, base) = r.pick(&bases);
        let own = flags(sub);
        let mut args: Vec<String> = base.iter().map(|a| a.to_string()).collect();
        for _ in 0..1 + r.next() % 3 {
            let values: Vec<usize> = (0..args.len())
                .filter(|&k| !args[k].starts_with("--"))
                .collect();
            match r.next() % 4 {
                // Another value in place of one.
                0 | 1 if !values.is_empty() => {
                    let k = *r.pick(&values);
                    args[k] = value(&mut r);
                }
                // One of the command's own flags, with a value or without.
                1 if !own.is_empty() => {
                    let f = r.pick(&own).clone();
                    if f == "--sim" {
                        args.push(format!("--sim={}", value(&mut r)));
                    } else {
                        args.push(f);
                        if !r.next().is_multiple_of(4) {
                            args.push(value(&mut r));
                        }
                    }
                }
                // One argument fewer.
                _ if !args.is_empty() => {
                    let k = (r.next() % args.len() as u64) as usize;
                    args.remove(k);
                }
                _ => {}
            }
        }
        // Never write over the inputs.
        for k in 1..args.len() {
            if args[k - 1] == "-o" && files.contains(&args[k].as_str()) {
                args[k] = out.to_string();
            }
        }
        args.insert(0, sub.to_string());
        if *sub == "run" {
            args.push("--".into());
            args.push(r.pick(&["true", "false", "/nonexistent"]).to_string());
        }
        let o = Command::new(marmoset())
            .args(&args)
            .current_dir(&cwd)
            .env_remove("MARMOSET_POLICY")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(
            o.status.code().is_some(),
            "{args:?}: ended by a signal: {:?}\n{err}",
            o.status
        );
        assert!(
            !err.contains("panicked") && !err.contains("memory allocation"),
            "{args:?}:\n{err}"
        );
        if err.contains("at most") {
            limits += 1;
        }
        // `run -- false` fails with the program's status and says nothing of its own.
        let program_failed = *sub == "run" && args.last().is_some_and(|a| a == "false");
        if !o.status.success() && !program_failed {
            assert!(
                !err.trim().is_empty(),
                "{args:?}: exit {:?} without a message",
                o.status
            );
        }
    }
    assert!(limits >= 2, "only {limits} runs met a limit");
}
