//! The benchmark database: JSON lines in MARMOSET_CACHE_DIR/mucudnn.jsonl, the first line a
//! header. Appends take an exclusive lock and write one line at once; reads take a shared lock.
//! A later line for a key supersedes an earlier one: an entry is replaced by appending, so no
//! writer ever rewrites what others wrote. A file that is not ours is reported and left alone; a
//! corrupt line (not JSON, not UTF-8, not an entry) is reported and skipped, the others kept. An
//! entry the library does not stand by when it is used is dropped and measured again
//! (`microbatch::cached`).

use super::*;
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;

const HEADER: &str = r#"{"marmoset_cache":1,"kind":"mucudnn"}"#;

pub fn path() -> Option<std::path::PathBuf> {
    let dir = match &config().cache_dir {
        Some(d) => std::path::PathBuf::from(d),
        None => match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
            Some(x) => std::path::PathBuf::from(x).join("marmoset"),
            None => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".cache/marmoset"),
        },
    };
    Some(dir.join("mucudnn.jsonl"))
}

struct Lock<'a>(&'a std::fs::File);
impl<'a> Lock<'a> {
    fn new(f: &'a std::fs::File, exclusive: bool) -> Lock<'a> {
        // SAFETY: flock on an open file descriptor; released in Drop.
        unsafe {
            libc::flock(
                f.as_raw_fd(),
                if exclusive {
                    libc::LOCK_EX
                } else {
                    libc::LOCK_SH
                },
            )
        };
        Lock(f)
    }
}
impl Drop for Lock<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking the descriptor locked in new().
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Every entry of the database (the last line of a key wins), or nothing when it is absent or
/// not ours.
pub fn load() -> HashMap<String, Vec<Micro>> {
    let mut out = HashMap::new();
    let Some(p) = path() else { return out };
    let Ok(f) = std::fs::File::open(&p) else {
        return out;
    };
    let mut bytes = Vec::new();
    {
        let _l = Lock::new(&f, false);
        if let Err(e) = (&f).read_to_end(&mut bytes) {
            log(
                Level::Warn,
                &format!(
                    "{}: cannot be read ({e}); ignoring the benchmark cache",
                    p.display()
                ),
            );
            return out;
        }
    }
    if bytes.is_empty() {
        return out;
    }
    let mut lines = bytes.split(|&b| b == b'\n');
    match lines.next() {
        Some(h) if h.trim_ascii() == HEADER.as_bytes() => {}
        _ => {
            log(
                Level::Warn,
                &format!(
                    "{}: not a Marmoset benchmark cache; ignoring it and leaving it as it is",
                    p.display()
                ),
            );
            return out;
        }
    }
    let mut corrupt = 0;
    for line in lines.filter(|l| !l.trim_ascii().is_empty()) {
        match std::str::from_utf8(line).ok().and_then(parse) {
            Some((k, v)) => {
                out.insert(k, v);
            }
            None => corrupt += 1,
        }
    }
    if corrupt > 0 {
        log(
            Level::Warn,
            &format!("{}: ignoring {corrupt} corrupt line(s)", p.display()),
        );
    }
    out
}

/// Says that the entry `key` was dropped, naming the cache file and the entry.
pub fn dropped(key: &str, why: &str) {
    let file = path().map_or_else(|| "the benchmark cache".into(), |p| p.display().to_string());
    log(
        Level::Warn,
        &format!(
            "{file}: dropping the entry {key:?}: it records {why}; measuring the kernel again (the new measurement supersedes it)"
        ),
    );
}

fn parse(line: &str) -> Option<(String, Vec<Micro>)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let key = v.get("key")?.as_str()?.to_string();
    let mut micro = Vec::new();
    for m in v.get("micro")?.as_array()? {
        let a = m.as_array()?;
        micro.push(Micro {
            batch: a.first()?.as_u64()?,
            algo: a.get(1)?.as_i64()? as i32,
            time_ms: a.get(2)?.as_f64()?,
            workspace: a.get(3)?.as_u64()?,
        });
    }
    Some((key, micro))
}

/// Says once per process that the database cannot be written (measurements stay in memory).
fn cannot_write(p: &std::path::Path, e: &std::io::Error) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        log(
            Level::Warn,
            &format!(
                "cannot write the benchmark cache {} ({e}); measurements are kept for this process only (MARMOSET_CACHE_DIR)",
                p.display()
            ),
        )
    });
}

/// Appends an entry (creating the file with its header when needed).
pub fn append(key: &str, micro: &[Micro]) {
    let Some(p) = path() else { return };
    if let Some(dir) = p.parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return cannot_write(&p, &e);
    }
    let f = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&p)
    {
        Ok(f) => f,
        Err(e) => return cannot_write(&p, &e),
    };
    let _l = Lock::new(&f, true);
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut line = String::new();
    if len > 0 {
        // Never write into a file that is not ours.
        let mut first = vec![0u8; HEADER.len()];
        if (&f).read_exact(&mut first).is_err() || first != HEADER.as_bytes() {
            return;
        }
        // A last line cut short (a writer killed mid-line) stays one corrupt line, apart
        // from ours.
        let mut last = [0u8];
        if (&f).seek(std::io::SeekFrom::Start(len - 1)).is_ok()
            && (&f).read_exact(&mut last).is_ok()
            && last[0] != b'\n'
        {
            line.push('\n');
        }
    }
    let entry = serde_json::json!({
        "key": key,
        "micro": micro.iter().map(|m| serde_json::json!([m.batch, m.algo, m.time_ms, m.workspace])).collect::<Vec<_>>(),
    });
    if len == 0 {
        line.push_str(HEADER);
        line.push('\n');
    }
    line.push_str(&entry.to_string());
    line.push('\n');
    if let Err(e) = (&f).write_all(line.as_bytes()) {
        cannot_write(&p, &e);
    }
}
