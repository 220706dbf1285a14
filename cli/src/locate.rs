//! Where `marmoset` finds its libraries (`libmarmoset.so` and the simulated GPU) in each of the
//! layouts it runs from:
//!
//! * `MARMOSET_LIB_DIR` (or the older `MARMOSET_BUILD_DIR`): that directory, as given;
//! * the build tree: `target/<profile>/marmoset` beside the built libraries;
//! * the installed wheel: `marmoset/bin/marmoset` with `marmoset/lib/libmarmoset.so` and
//!   `marmoset/lib/simgpu/` holding one file per name a program loads.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

/// The directory holding `libmarmoset.so`.
pub fn lib_dir() -> Result<PathBuf> {
    for var in ["MARMOSET_LIB_DIR", "MARMOSET_BUILD_DIR"] {
        if let Some(d) = std::env::var_os(var).filter(|d| !d.is_empty()) {
            return Ok(PathBuf::from(d));
        }
    }
    let exe = std::env::current_exe().context("cannot find the marmoset executable")?;
    let exe_dir = exe
        .parent()
        .context("the executable has no directory")?
        .to_path_buf();
    Ok(lib_dir_for(&exe_dir))
}

/// The library directory for an executable in `exe_dir`: beside it (build tree), else
/// `../lib` (installed), else beside it anyway so that the messages name the build tree.
fn lib_dir_for(exe_dir: &Path) -> PathBuf {
    let installed = exe_dir.join("../lib");
    if !exe_dir.join("libmarmoset.so").is_file() && installed.join("libmarmoset.so").is_file() {
        return installed.canonicalize().unwrap_or(installed);
    }
    exe_dir.to_path_buf()
}

/// The simulated GPU's directory: one entry per name in `planner::sim::LIBRARIES`. Installed,
/// it ships complete (plain files); in a build tree it is made of links to the built files, and
/// remade when missing or stale.
pub fn sim_dir() -> Result<PathBuf> {
    let lib = lib_dir()?;
    let dir = lib.join("simgpu");
    let shipped = planner::sim::LIBRARIES.iter().all(|(name, _)| {
        std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.file_type().is_file())
    });
    if shipped {
        return Ok(dir);
    }
    for f in planner::sim::built_files() {
        if !lib.join(f).is_file() {
            bail!(
                "the simulated GPU is not built: {} is missing (build it with `cargo build --release --workspace`, or set MARMOSET_LIB_DIR)",
                lib.join(f).display()
            );
        }
    }
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
    // Links a former list made and this one no longer has go (the wheel ships what is here).
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let known = planner::sim::LIBRARIES
            .iter()
            .any(|(n, _)| std::ffi::OsStr::new(n) == name);
        if !known && e.file_type().is_ok_and(|t| t.is_symlink()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_tree_first_then_the_installed_layout() {
        let root = std::env::temp_dir().join(format!("marmoset-locate-{}", std::process::id()));
        let bin = root.join("marmoset/bin");
        let lib = root.join("marmoset/lib");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        // Neither layout: beside the executable, so the error names the build tree.
        assert_eq!(lib_dir_for(&bin), bin);
        std::fs::write(lib.join("libmarmoset.so"), b"").unwrap();
        assert_eq!(lib_dir_for(&bin), lib.canonicalize().unwrap());
        std::fs::write(bin.join("libmarmoset.so"), b"").unwrap();
        assert_eq!(lib_dir_for(&bin), bin);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
