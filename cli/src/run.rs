//! `marmoset run`: a command under Marmoset (LD_PRELOAD and its settings) or on the simulated GPU.
//!
//! Every flag that configures libmarmoset.so is one row of [`RunArgs::settings`]: its variable
//! and the check of its value (the library's own rules, from `planner::settings`), so a flag
//! cannot be accepted and then lost. SIGINT, SIGTERM and SIGHUP sent to marmoset go on to the
//! program, and marmoset ends as the program does.

use crate::{build_dir, sim_dir};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Run on the simulated GPU with this device profile (h100, p100, or a profile .json); `xN`
    /// after it makes a machine of N such devices (h100x2: SIMGPU_DEVICES).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "h100", value_name = "PROFILE")]
    sim: Option<String>,
    /// Run without libmarmoset.so (plain CUDA, or the plain simulated GPU).
    #[arg(long)]
    no_shim: bool,
    /// Marmoset's policy (MARMOSET_POLICY): none, lru (passive), or a planner policy run by
    /// measured and guided execution: auto (the portfolio; what --memory-limit alone gets),
    /// capuchin, swap, recompute, dtr, vdnn-all, vdnn-conv, autoswap, hybrid.
    #[arg(long, value_name = "P")]
    policy: Option<String>,
    /// Write a trace of every call (MARMOSET_TRACE).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Memory budget, a size (at most 16 EiB) or a fraction of the device in (0, 1]
    /// (MARMOSET_MEMORY_LIMIT).
    #[arg(long, value_name = "SIZE")]
    memory_limit: Option<String>,
    /// μ-cuDNN WR: workspace limit per convolution kernel, a size (MARMOSET_WORKSPACE_LIMIT).
    #[arg(long, value_name = "SIZE")]
    workspace_limit: Option<String>,
    /// μ-cuDNN WD: one workspace of this size shared by all kernels (MARMOSET_WORKSPACE_TOTAL).
    #[arg(long, value_name = "SIZE")]
    workspace_total: Option<String>,
    /// Micro-batch sizes benchmarked: all, pow2, undivided (MARMOSET_BATCH_SIZES).
    #[arg(long, value_name = "SIZES")]
    batch_sizes: Option<String>,
    /// Under --memory-limit with no workspace limit or total, convolutions run the fastest
    /// configuration whose workspace the budget has spare: on (the default) or off, the
    /// framework's own engines and workspaces (MARMOSET_JOINT_WORKSPACE).
    #[arg(long, value_name = "on|off")]
    joint_workspace: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

/// A value's check: Err is what is accepted.
type Check = fn(&str) -> Result<(), String>;

fn size(v: &str) -> Result<(), String> {
    planner::parse_size(v).map(|_| ())
}

fn limit(v: &str) -> Result<(), String> {
    planner::settings::parse_limit(v)
        .map(|_| ())
        .ok_or_else(|| format!("{v:?}: accepted is {}", planner::settings::limit_accepted()))
}

fn policy(v: &str) -> Result<(), String> {
    if planner::settings::RUNTIME_POLICIES.contains(&v) {
        return Ok(());
    }
    Err(format!(
        "unknown policy {v:?}: accepted are {}",
        planner::settings::RUNTIME_POLICIES.join(", ")
    ))
}

fn batch_sizes(v: &str) -> Result<(), String> {
    use planner::microbatch::Sizes;
    Sizes::parse(v)
        .map(|_| ())
        .ok_or_else(|| format!("{v:?}: accepted are {}", Sizes::ACCEPTED))
}

fn on_off(v: &str) -> Result<(), String> {
    match v {
        "on" | "off" | "1" | "0" | "true" | "false" | "yes" | "no" => Ok(()),
        _ => Err(format!("{v:?}: accepted are on, off")),
    }
}

fn path(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Err("an empty path".into());
    }
    Ok(())
}

impl RunArgs {
    /// (flag, variable, value, check) of every flag that configures libmarmoset.so.
    fn settings(&self) -> [(&'static str, &'static str, Option<String>, Check); 7] {
        [
            ("--policy", "MARMOSET_POLICY", self.policy.clone(), policy),
            (
                "--trace",
                "MARMOSET_TRACE",
                self.trace
                    .as_ref()
                    .map(|t| t.to_string_lossy().into_owned()),
                path,
            ),
            (
                "--memory-limit",
                "MARMOSET_MEMORY_LIMIT",
                self.memory_limit.clone(),
                limit,
            ),
            (
                "--workspace-limit",
                "MARMOSET_WORKSPACE_LIMIT",
                self.workspace_limit.clone(),
                size,
            ),
            (
                "--workspace-total",
                "MARMOSET_WORKSPACE_TOTAL",
                self.workspace_total.clone(),
                size,
            ),
            (
                "--batch-sizes",
                "MARMOSET_BATCH_SIZES",
                self.batch_sizes.clone(),
                batch_sizes,
            ),
            (
                "--joint-workspace",
                "MARMOSET_JOINT_WORKSPACE",
                self.joint_workspace.clone(),
                on_off,
            ),
        ]
    }
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let mut cmd = Command::new(&a.cmd[0]);
    // Every process of the program writes its own trace, each naming this run in its header:
    // the first at the path, the others beside it (planner::trace::sibling_path).
    let run_id = planner::trace::new_run_id();
    let trace = a
        .trace
        .as_ref()
        .map(|t| std::path::absolute(t).unwrap_or_else(|_| t.clone()));
    cmd.args(&a.cmd[1..]);
    let settings = a.settings();
    for (flag, _, value, check) in &settings {
        if let Some(v) = value {
            check(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
        }
    }
    if a.no_shim {
        let given: Vec<&str> = settings
            .iter()
            .filter(|s| s.2.is_some())
            .map(|s| s.0)
            .collect();
        if !given.is_empty() {
            bail!("{} need(s) the shim: drop --no-shim", given.join(", "));
        }
    } else {
        let lib = build_dir()?.join("libmarmoset.so");
        if !lib.is_file() {
            bail!(
                "{} is missing (build it with `cargo build --release --workspace`)",
                lib.display()
            );
        }
        let mut preload = lib.into_os_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
        cmd.env("LD_PRELOAD", preload);
        for (_, var, value, _) in &settings {
            if let Some(v) = value {
                cmd.env(var, v);
            }
        }
        // The trace's own path (it may not be valid UTF-8), absolute, so that a process of the
        // program that changes directory writes beside the others.
        if let Some(t) = &trace {
            clear_previous(t);
            cmd.env("MARMOSET_TRACE", t).env("MARMOSET_RUN_ID", &run_id);
            // A trace is for planning and reports, which need each call's device time: timed
            // unless the user said otherwise (MARMOSET_TRACE_TIMING=0).
            if std::env::var_os("MARMOSET_TRACE_TIMING").is_none_or(|v| v.is_empty()) {
                cmd.env("MARMOSET_TRACE_TIMING", "1");
            }
        }
    }
    if let Some(sim) = &a.sim {
        let (profile, devices) = machine(sim)?;
        let known = planner::sim::profiles();
        if !known.contains(&profile) && !profile.ends_with(".json") {
            bail!(
                "unknown profile {profile:?}: accepted are {} or a profile .json, each with xN \
                 for N devices",
                known.join(", ")
            );
        }
        if let Some(n) = devices {
            cmd.env("SIMGPU_DEVICES", n.to_string());
        }
        let dir = sim_dir()?;
        let mut path = dir.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", path)
            .env("SIMGPU_PROFILE", profile);
        let virtual_env = std::env::var_os("VIRTUAL_ENV").map(PathBuf::from);
        let old = std::env::var("XLA_FLAGS").ok();
        if let Some(flags) = xla_flags(&a.cmd[0], virtual_env.as_deref(), old.as_deref()) {
            cmd.env("XLA_FLAGS", flags);
        }
        // On the simulated GPU a step takes far less host time than planning, so a program
        // that did not wait would end before its plan could guide it (on a real GPU the plan is
        // ready by the next step): under a planner policy it waits, unless the user said
        // otherwise (MARMOSET_PLAN_WAIT=0). The library's own default stays 0, for real GPUs.
        if !a.no_shim && std::env::var_os("MARMOSET_PLAN_WAIT").is_none_or(|v| v.is_empty()) {
            cmd.env("MARMOSET_PLAN_WAIT", "1");
        }
    }
    let devices = a
        .sim
        .as_deref()
        .and_then(|s| machine(s).ok())
        .and_then(|m| m.1)
        .unwrap_or(1);
    let sim_report = a.sim.as_ref().and_then(|_| SimReport::before(devices));
    let status = match signals::run(cmd, &a.cmd[0])? {
        Ok(status) => status,
        Err(not_started) => return Ok(not_started),
    };
    if let Some(r) = sim_report {
        r.check(&status);
    }
    if let Some(t) = trace.as_ref().filter(|_| !a.no_shim) {
        let written = planner::trace::traces_of_run(t, &run_id);
        if written.len() > 1 {
            let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "marmoset: {} traces, one per process: {}",
                written.len(),
                names.join(", ")
            );
        }
    }
    Ok(signals::end_as(status))
}

/// The directory `scripts/setup-tf.sh` puts libdevice in, relative to a virtual environment.
const CUDA_DATA: &str = "cuda-data";

/// XLA_FLAGS for a TensorFlow program on the simulated GPU: TensorFlow compiles some kernels at
/// run time and reads libdevice from `<dir>/nvvm/libdevice/libdevice.10.bc`, `dir` given by
/// `--xla_gpu_cuda_data_dir`. When the program is a virtual environment's executable (its
/// `bin/` directory, the program named with a path) or `VIRTUAL_ENV` names one, and that
/// environment has `cuda-data/` with libdevice, the flag names it, added to the user's flags;
/// flags that already name a data directory are left as they are (None).
fn xla_flags(
    program: &str,
    virtual_env: Option<&std::path::Path>,
    old: Option<&str>,
) -> Option<String> {
    if old.is_some_and(|f| f.contains("--xla_gpu_cuda_data_dir")) {
        return None;
    }
    let program = std::path::Path::new(program);
    let from_program = program
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && d.file_name().is_some_and(|n| n == "bin"))
        .and_then(|bin| bin.parent())
        .map(|venv| venv.join(CUDA_DATA));
    let dir = from_program
        .into_iter()
        .chain(virtual_env.map(|v| v.join(CUDA_DATA)))
        .find(|d| d.join("nvvm/libdevice/libdevice.10.bc").is_file())?;
    let dir = dir.canonicalize().unwrap_or(dir);
    let flag = format!("--xla_gpu_cuda_data_dir={}", dir.display());
    Some(match old.filter(|f| !f.trim().is_empty()) {
        Some(f) => format!("{f} {flag}"),
        None => flag,
    })
}

/// A `--sim` value: the profile, and the machine's device count when it names one (`h100x4`).
fn machine(sim: &str) -> Result<(&str, Option<u32>)> {
    let Some((profile, n)) = sim.rsplit_once('x') else {
        return Ok((sim, None));
    };
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || profile.is_empty() {
        return Ok((sim, None));
    }
    match n.parse::<u32>() {
        Ok(n) if (1..=16).contains(&n) => Ok((profile, Some(n))),
        _ => bail!("--sim={sim}: a machine has 1 to 16 simulated devices"),
    }
}

/// The simulator's report (SIMGPU_REPORT), as it stood before the program ran: the simulated
/// GPU writes it at exit and on an abort, but a program killed outright (SIGKILL) or that never
/// started the device leaves it unwritten, and a file from an earlier run may lie there. After
/// the program, a report that is missing or unchanged (the same file, size and modification
/// time) is said in one line, so that nobody reads an earlier run's figures as this one's.
/// A file's identity and state: (device, inode, modification seconds and nanoseconds, size).
type Stamp = (u64, u64, i64, i64, u64);

struct SimReport {
    /// The report's paths: SIMGPU_REPORT, or on a machine of several devices one per device.
    paths: Vec<PathBuf>,
    before: Vec<Option<Stamp>>,
}

impl SimReport {
    fn before(devices: u32) -> Option<SimReport> {
        let base = std::env::var_os("SIMGPU_REPORT").filter(|v| !v.is_empty())?;
        let paths: Vec<PathBuf> = if devices <= 1 {
            vec![PathBuf::from(base)]
        } else {
            let base = base.to_string_lossy();
            (0..devices)
                .map(|d| PathBuf::from(simgpu_model::per_device_report(&base, d)))
                .collect()
        };
        let before = paths.iter().map(|p| Self::stamp(p)).collect();
        Some(SimReport { paths, before })
    }

    /// (device, inode, modification seconds and nanoseconds, size) of the file, if there is one.
    fn stamp(path: &std::path::Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some((m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()))
    }

    /// Says so when no report was written: on a machine of several devices, a report of any
    /// device is this run's (a process works on each device it uses).
    fn check(&self, status: &std::process::ExitStatus) {
        use std::os::unix::process::ExitStatusExt;
        let now: Vec<_> = self.paths.iter().map(|p| Self::stamp(p)).collect();
        if now
            .iter()
            .zip(&self.before)
            .any(|(n, b)| n.is_some() && n != b)
        {
            return;
        }
        let why = match status.signal() {
            Some(libc::SIGKILL) => {
                "the program was killed by SIGKILL, which ends a process before it can write anything"
                    .to_string()
            }
            Some(sig) => format!("the program was killed by signal {sig}"),
            None => "the program ended without starting the simulated device, or in a way it cannot see"
                .to_string(),
        };
        let what = if now.iter().any(Option::is_some) {
            "the file there is an earlier run's"
        } else {
            "there is no file"
        };
        let names: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "marmoset: the simulated GPU's report SIMGPU_REPORT={} was not written ({what}): {why}",
            names.join(", ")
        );
    }
}

/// Removes the traces the previous run left at `base` (the file there and its siblings of that
/// run), so that what lies there after this run is this run's. A file a live process still
/// writes (it holds its lock) is left alone, and so is anything that is not a trace with a run.
fn clear_previous(base: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let Some(previous) = planner::trace::run_of(base) else {
        return;
    };
    for p in planner::trace::traces_of_run(base, &previous) {
        let Ok(f) = std::fs::File::open(&p) else {
            continue;
        };
        // SAFETY: flock on a descriptor this function owns; the lock ends when `f` closes.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Running the program with SIGINT, SIGTERM and SIGHUP forwarded to it.
mod signals {
    use std::process::{Command, ExitCode};
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

    const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    /// The program's pid once it runs (0 before).
    static CHILD: AtomicI32 = AtomicI32::new(0);

    /// Whether the program runs in its own process group (set before it starts).
    static OWN_GROUP: AtomicBool = AtomicBool::new(false);

    extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // In marmoset's group, a signal the terminal sent to the whole foreground group reached
        // the program too; only what a process sent to marmoset alone goes on (as sudo does).
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        if !OWN_GROUP.load(Ordering::Acquire)
            && !info.is_null()
            && unsafe { (*info).si_code } == libc::SI_KERNEL
        {
            return;
        }
        let pid = CHILD.load(Ordering::Acquire);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe; pid is our own child's.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// Blocks (true) or unblocks the forwarded signals in this thread (async-signal-safe: it
    /// runs in the child between fork and exec too).
    fn mask(block: bool) {
        // SAFETY: a sigset_t built with sigemptyset/sigaddset, for this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in FORWARDED {
                libc::sigaddset(&mut set, s);
            }
            let how = if block {
                libc::SIG_BLOCK
            } else {
                libc::SIG_UNBLOCK
            };
            libc::pthread_sigmask(how, &set, std::ptr::null_mut());
        }
    }

    /// Whether marmoset is the foreground job of its controlling terminal: then the terminal's
    /// signals (Ctrl-C) reach the whole group, the program included, and the program must stay
    /// in that group to read the terminal.
    fn terminal_foreground() -> bool {
        // SAFETY: opening the controlling terminal (if any) read-only, asking its foreground
        // group, and closing it; no memory is shared.
        unsafe {
            let fd = libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return false;
            }
            let fg = libc::tcgetpgrp(fd);
            libc::close(fd);
            fg > 0 && fg == libc::getpgrp()
        }
    }

    /// Runs the program. As the foreground job of a terminal, it shares marmoset's process
    /// group (the terminal's signals reach it directly; marmoset forwards only what a process
    /// sent to marmoset). Otherwise it gets a group of its own, so that a signal sent to
    /// marmoset's group reaches it once, through marmoset, and it dies with marmoset
    /// (PR_SET_PDEATHSIG) as it would have with the group.
    /// Returns how the program ended, or (Err) the exit code of a program that could not start.
    pub fn run(
        mut cmd: Command,
        name: &str,
    ) -> anyhow::Result<Result<std::process::ExitStatus, ExitCode>> {
        use std::os::unix::process::CommandExt;
        let own_group = !terminal_foreground();
        OWN_GROUP.store(own_group, Ordering::Release);
        // Blocked until the pid is known, so none is lost in between; the program itself starts
        // with them unblocked.
        mask(true);
        if own_group {
            cmd.process_group(0);
        }
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure only calls pthread_sigmask, prctl, getppid and _exit, which are
        // async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if own_group {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                    // marmoset died before the line above: nobody would forward or wait.
                    if libc::getppid() != parent {
                        libc::_exit(128 + libc::SIGKILL);
                    }
                }
                mask(false);
                Ok(())
            })
        };
        let child = cmd.spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                mask(false);
                eprintln!("marmoset: cannot run {name}: {e}");
                // As shells: 127 not found, 126 found but not runnable.
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                return Ok(Err(ExitCode::from(code)));
            }
        };
        CHILD.store(child.id() as i32, Ordering::Release);
        for s in FORWARDED {
            // SAFETY: installing an SA_SIGINFO handler that only calls kill.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = forward as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                libc::sigaction(s, &act, std::ptr::null_mut());
            }
        }
        mask(false);
        let status = child.wait();
        match status {
            Ok(s) => Ok(Ok(s)),
            Err(e) => anyhow::bail!("waiting for {name}: {e}"),
        }
    }

    /// Ends as the program did: its exit status, or killed by the same signal (a signal that
    /// would dump marmoset's core instead gives 128 + its number, as shells report it).
    pub fn end_as(s: std::process::ExitStatus) -> ExitCode {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c as u8),
            (None, Some(sig)) => {
                let dumps = [
                    libc::SIGQUIT,
                    libc::SIGILL,
                    libc::SIGTRAP,
                    libc::SIGABRT,
                    libc::SIGBUS,
                    libc::SIGFPE,
                    libc::SIGSEGV,
                    libc::SIGXCPU,
                    libc::SIGXFSZ,
                    libc::SIGSYS,
                ];
                if !dumps.contains(&sig) {
                    // SAFETY: restoring the default action and raising the signal on ourselves.
                    unsafe {
                        libc::signal(sig, libc::SIG_DFL);
                        let mut set: libc::sigset_t = std::mem::zeroed();
                        libc::sigemptyset(&mut set);
                        libc::sigaddset(&mut set, sig);
                        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                        libc::raise(sig);
                    }
                }
                ExitCode::from((128 + sig) as u8)
            }
            _ => ExitCode::FAILURE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{machine, xla_flags};

    #[test]
    fn xla_flags_name_a_venvs_libdevice_unless_the_user_named_a_data_dir() {
        let venv = std::env::temp_dir().join(format!("marmoset-xla-{}", std::process::id()));
        let lib = venv.join("cuda-data/nvvm/libdevice");
        std::fs::create_dir_all(&lib).unwrap();
        let python = venv.join("bin/python");
        let python = python.to_str().unwrap();
        // No libdevice yet: nothing to say.
        assert_eq!(xla_flags(python, None, None), None);
        std::fs::write(lib.join("libdevice.10.bc"), b"bc").unwrap();
        let dir = venv.join("cuda-data").canonicalize().unwrap();
        let flag = format!("--xla_gpu_cuda_data_dir={}", dir.display());
        assert_eq!(xla_flags(python, None, None), Some(flag.clone()));
        assert_eq!(
            xla_flags(python, None, Some("--xla_dump_to=/d")),
            Some(format!("--xla_dump_to=/d {flag}"))
        );
        assert_eq!(
            xla_flags(python, None, Some("--xla_gpu_cuda_data_dir=/x")),
            None
        );
        // A bare name: the activated environment's.
        assert_eq!(xla_flags("python", Some(&venv), None), Some(flag));
        assert_eq!(xla_flags("python", None, None), None);
        std::fs::remove_dir_all(&venv).unwrap();
    }

    #[test]
    fn a_sim_value_names_a_profile_and_maybe_a_device_count() {
        assert_eq!(machine("h100").unwrap(), ("h100", None));
        assert_eq!(machine("h100x2").unwrap(), ("h100", Some(2)));
        assert_eq!(machine("my.jsonx4").unwrap(), ("my.json", Some(4)));
        assert_eq!(machine("/p/x100.json").unwrap(), ("/p/x100.json", None));
        assert!(machine("h100x0").is_err());
        assert!(machine("h100x17").is_err());
    }
}
