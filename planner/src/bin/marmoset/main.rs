//! `marmoset`: run programs under Marmoset (or on the simulated GPU) and work with its traces.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[derive(Parser)]
#[command(
    name = "marmoset",
    version,
    about = "Get more out of a GPU's memory without touching the training code"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the directory holding the simulated GPU's libraries (libcuda.so.1, libcudart.so.12,
    /// libcudart.so.13, libcudnn.so.9).
    SimPath,
    /// Run a command under Marmoset (or without it, --no-shim), on the simulated GPU with --sim.
    Run(RunArgs),
    /// Summarise a trace: calls by kind and API, allocations, peak memory load, device time.
    Inspect {
        /// A trace written with MARMOSET_TRACE / --trace.
        trace: PathBuf,
        /// The summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Run on the simulated GPU with this device profile (h100, p100, or a profile .json).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "h100", value_name = "PROFILE")]
    sim: Option<String>,
    /// Run without libmarmoset.so (plain CUDA, or the plain simulated GPU).
    #[arg(long)]
    no_shim: bool,
    /// Marmoset's policy (MARMOSET_POLICY): none.
    #[arg(long, value_name = "P")]
    policy: Option<String>,
    /// Write a trace of every call (MARMOSET_TRACE).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Memory budget, a size or a fraction of the device (MARMOSET_MEMORY_LIMIT).
    #[arg(long, value_name = "SIZE")]
    memory_limit: Option<String>,
    /// Convolution workspace limit (MARMOSET_WORKSPACE_LIMIT).
    #[arg(long, value_name = "SIZE")]
    workspace_limit: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::SimPath => sim_dir().map(|d| {
            println!("{}", d.display());
            ExitCode::SUCCESS
        }),
        Cmd::Run(a) => run(a),
        Cmd::Inspect { trace, json } => inspect(&trace, json),
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("marmoset: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Where cargo put the built libraries: next to this executable (target/<profile>/), or
/// MARMOSET_BUILD_DIR.
fn build_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("MARMOSET_BUILD_DIR") {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe().context("cannot find the marmoset executable")?;
    Ok(exe
        .parent()
        .context("the executable has no directory")?
        .to_path_buf())
}

/// The simulated-GPU directory: links with the real sonames to the built files, (re)made when
/// missing or stale.
fn sim_dir() -> Result<PathBuf> {
    let build = build_dir()?;
    for f in planner::sim::built_files() {
        if !build.join(f).is_file() {
            bail!(
                "the simulated GPU is not built: {} is missing (build it with `cargo build --release --workspace`)",
                build.join(f).display()
            );
        }
    }
    let dir = build.join("simgpu");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (name, file) in planner::sim::LIBRARIES {
        let link = dir.join(name);
        let target = Path::new("..").join(file);
        if std::fs::read_link(&link).ok().as_deref() == Some(target.as_path()) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)
            .with_context(|| format!("cannot link {}", link.display()))?;
    }
    Ok(dir)
}

fn run(a: RunArgs) -> Result<ExitCode> {
    let mut cmd = Command::new(&a.cmd[0]);
    cmd.args(&a.cmd[1..]);
    if a.no_shim {
        if a.policy.is_some()
            || a.trace.is_some()
            || a.memory_limit.is_some()
            || a.workspace_limit.is_some()
        {
            bail!(
                "--policy, --trace, --memory-limit and --workspace-limit need the shim: drop --no-shim"
            );
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
        if let Some(p) = &a.policy {
            cmd.env("MARMOSET_POLICY", p);
        }
        if let Some(t) = &a.trace {
            cmd.env("MARMOSET_TRACE", t);
        }
        for (flag, var, value) in [
            ("--memory-limit", "MARMOSET_MEMORY_LIMIT", &a.memory_limit),
            (
                "--workspace-limit",
                "MARMOSET_WORKSPACE_LIMIT",
                &a.workspace_limit,
            ),
        ] {
            if let Some(v) = value {
                let fraction = v
                    .parse::<f64>()
                    .ok()
                    .filter(|f| *f > 0.0 && *f <= 1.0 && v.contains('.'));
                if fraction.is_none() || var == "MARMOSET_WORKSPACE_LIMIT" {
                    planner::parse_size(v).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
                }
                cmd.env(var, v);
            }
        }
    }
    if let Some(profile) = &a.sim {
        let known = planner::sim::profiles();
        if !known.contains(&profile.as_str()) && !profile.ends_with(".json") {
            bail!(
                "unknown profile {profile:?}: accepted are {} or a profile .json",
                known.join(", ")
            );
        }
        let dir = sim_dir()?;
        let mut path = dir.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", path)
            .env("SIMGPU_PROFILE", profile);
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", a.cmd[0]))?;
    Ok(exit_code(status))
}

fn inspect(path: &Path, json: bool) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let records =
        planner::trace::read(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let s = planner::inspect::summarize(&records);
    if json {
        let v = serde_json::json!({
            "records": s.records,
            "by_kind": s.by_kind,
            "by_api": s.by_api,
            "failed_calls": s.failed_calls,
            "allocations": s.allocations,
            "bytes_allocated": s.bytes_allocated,
            "peak_load_bytes": s.peak_load,
            "peak_at_seq": s.peak_at.map(|p| p.0),
            "largest": s.largest.iter().map(|(b, api, seq)| serde_json::json!({"bytes": b, "api": api, "seq": seq})).collect::<Vec<_>>(),
            "device_ms": s.device_ms,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The command's own exit status; a signal becomes 128 + its number, as shells report it.
fn exit_code(s: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::FAILURE,
    }
}
