//! `marmoset run`: a command under Marmoset (LD_PRELOAD and its settings) or on the simulated GPU.

use crate::{build_dir, sim_dir};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(clap::Args)]
pub struct RunArgs {
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
    /// μ-cuDNN WR: workspace limit per convolution kernel (MARMOSET_WORKSPACE_LIMIT).
    #[arg(long, value_name = "SIZE")]
    workspace_limit: Option<String>,
    /// μ-cuDNN WD: one workspace of this size shared by all kernels (MARMOSET_WORKSPACE_TOTAL).
    #[arg(long, value_name = "SIZE")]
    workspace_total: Option<String>,
    /// Micro-batch sizes benchmarked: all, pow2, undivided (MARMOSET_BATCH_SIZES).
    #[arg(long, value_name = "SIZES")]
    batch_sizes: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
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

/// The command's own exit status; a signal becomes 128 + its number, as shells report it.
fn exit_code(s: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::FAILURE,
    }
}
