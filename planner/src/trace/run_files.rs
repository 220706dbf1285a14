//! The files of one run: the run id in each trace's header, and the traces other processes of the
//! run write beside the first one's path.

use super::{Event, Record};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A new run id: what the processes of one run write in their headers (see [`sibling_path`]).
/// Unique enough across runs of one host: the creating process's pid and the time.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{nanos:x}", std::process::id())
}

/// Where another process of the same run writes its trace, beside `base`: the tag before the
/// extension (`t.jsonl` -> `t.rank1.jsonl`, `t.4242.jsonl`, `t.4242-2.jsonl`; `t` -> `t.4242`).
/// Tags are `rank<R>` (the process's RANK, as torchrun sets it), `<pid>`, or `<pid>-<n>`.
pub fn sibling_path(base: &Path, tag: &str) -> PathBuf {
    let name = base.file_name().unwrap_or_default();
    let (stem, ext) = split_name(name.as_bytes());
    let mut n = Vec::with_capacity(name.len() + tag.len() + 1);
    n.extend_from_slice(stem);
    n.push(b'.');
    n.extend_from_slice(tag.as_bytes());
    n.extend_from_slice(ext);
    base.with_file_name(std::ffi::OsStr::from_bytes(&n))
}

/// A file name split before its last extension (`t.jsonl` -> `t`, `.jsonl`; `t` -> `t`, ``;
/// `.trace` -> `.trace`, ``).
fn split_name(name: &[u8]) -> (&[u8], &[u8]) {
    match name.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => name.split_at(i),
        _ => (name, &[]),
    }
}

/// Whether `tag` is one [`sibling_path`] makes.
fn is_sibling_tag(tag: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if let Some(r) = tag.strip_prefix(b"rank") {
        return digits(r);
    }
    match tag.iter().position(|&b| b == b'-') {
        Some(i) => digits(&tag[..i]) && digits(&tag[i + 1..]),
        None => digits(tag),
    }
}

/// The files beside `base` named as its siblings ([`sibling_path`]), of any run, sorted.
pub fn sibling_files(base: &Path) -> Vec<PathBuf> {
    let Some(name) = base.file_name() else {
        return Vec::new();
    };
    let (stem, ext) = split_name(name.as_bytes());
    let dir = match base.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.strip_prefix(stem)
                .and_then(|r| r.strip_prefix(b"."))
                .and_then(|r| r.strip_suffix(ext))
                .is_some_and(is_sibling_tag)
        })
        .map(|e| base.with_file_name(e.file_name()))
        .collect();
    out.sort();
    out
}

/// The run id in the header of the trace at `path`: None when it is not a regular file, does
/// not start with a header, or its header names no run. Reads the first line only.
pub fn run_of(path: &Path) -> Option<String> {
    use std::io::Read;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut first = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut first)
        .ok()?;
    run_in_header(&first)
}

/// The run id of a trace's first line (`text`: the file's first bytes).
pub fn run_in_header(text: &[u8]) -> Option<String> {
    let end = text.iter().position(|&b| b == b'\n')?;
    match serde_json::from_slice::<Record>(&text[..end]).ok()?.event {
        Event::Header { run, .. } => run,
        _ => None,
    }
}

/// The traces one run wrote at `base`: `base` first when it is that run's, then its siblings of
/// that run ([`sibling_files`]).
pub fn traces_of_run(base: &Path, run: &str) -> Vec<PathBuf> {
    std::iter::once(base.to_path_buf())
        .chain(sibling_files(base))
        .filter(|p| run_of(p).as_deref() == Some(run))
        .collect()
}
