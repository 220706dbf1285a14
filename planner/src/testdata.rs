//! Where the tests find DTR's logs: `MARMOSET_DATA/dtr-logs`, else where scripts/fetch-data.sh
//! puts them by default (`$XDG_CACHE_HOME/marmoset/data/dtr-logs`, else
//! `~/.cache/marmoset/data/dtr-logs`). The logs have no licence to
//! redistribute, so the repository does not carry them: without them a comparison says so in one
//! loud line and does not run; everything else does.

use std::path::PathBuf;

/// The directory of DTR's four logs, if present.
pub fn dtr_log_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("MARMOSET_DATA").map(|d| PathBuf::from(d).join("dtr-logs")),
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("marmoset/data/dtr-logs")),
    ];
    let found = candidates.into_iter().flatten().find(|d| {
        d.join(".").is_dir() && std::fs::read_dir(d).is_ok_and(|mut r| r.next().is_some())
    });
    if found.is_none() {
        eprintln!(
            "*** DTR's logs not found (MARMOSET_DATA/dtr-logs, ~/.cache/marmoset/data/dtr-logs): the comparisons on them do not run; scripts/fetch-data.sh downloads them ***"
        );
    }
    found
}

/// The `.log` files in [`dtr_log_dir`], sorted by name (empty without the data).
pub fn dtr_logs() -> Vec<PathBuf> {
    let Some(dir) = dtr_log_dir() else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "log"));
    v.sort();
    v
}
