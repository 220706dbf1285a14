//! Moving a communicator's messages between the processes of one machine: a directory per
//! communicator under /dev/shm (else $TMPDIR, else /tmp), named from the unique id's random bytes.
//! A message is a file, published whole (written under a temporary name, then renamed), and read
//! by polling with a growing pause. A wait never lasts forever: a peer whose process has ended
//! is a remote error naming its rank, and `SIMGPU_NCCL_TIMEOUT` seconds (1800 unless set) end
//! any wait with a timeout.

use crate::{Fail, REMOTE_ERROR, SYSTEM_ERROR, TIMEOUT};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The directory that holds the communicators' directories.
pub fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && is_writable(shm) {
        return shm.to_path_buf();
    }
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

fn is_writable(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The wait limit from `SIMGPU_NCCL_TIMEOUT` (seconds), or what is wrong with it.
pub fn timeout_from_env() -> Result<Duration, String> {
    match std::env::var("SIMGPU_NCCL_TIMEOUT") {
        Err(_) => Ok(Duration::from_secs(1800)),
        Ok(s) => match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v)),
            _ => Err(format!(
                "SIMGPU_NCCL_TIMEOUT={s:?}: accepted is a number of seconds above 0"
            )),
        },
    }
}

/// Publishes `bytes` as `dir/name`: whole or not at all.
pub fn publish(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), Fail> {
    let tmp = dir.join(format!(".tmp.{}.{name}", std::process::id()));
    let fin = dir.join(name);
    std::fs::write(&tmp, bytes)
        .and_then(|_| std::fs::rename(&tmp, &fin))
        .map_err(|e| {
            Fail::new(
                SYSTEM_ERROR,
                "transport",
                format!("cannot write {}: {e}", fin.display()),
            )
        })
}

/// Whether process `pid` is running (a zombie has ended).
pub fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|c| c != 'Z' && c != 'X'),
        Err(_) => r == 0,
    }
}

/// What a wait is for, to name it in errors.
pub struct Waiting<'a> {
    /// The waiting rank.
    pub rank: usize,
    /// What it waits in, e.g. "all-reduce #12".
    pub what: &'a str,
    pub timeout: Duration,
}

/// Waits until every file of `want` (path, peer rank, peer pid if known) exists and returns
/// their contents in the same order.
pub fn wait_all(want: &[(PathBuf, usize, Option<i32>)], w: &Waiting) -> Result<Vec<Vec<u8>>, Fail> {
    let mut got: Vec<Option<Vec<u8>>> = vec![None; want.len()];
    let start = Instant::now();
    let mut pause = Duration::from_micros(20);
    let mut last_check = Instant::now();
    loop {
        let mut missing = false;
        for (i, (path, _, _)) in want.iter().enumerate() {
            if got[i].is_some() {
                continue;
            }
            match std::fs::read(path) {
                Ok(b) => got[i] = Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing = true,
                Err(e) => {
                    return Err(Fail::new(
                        SYSTEM_ERROR,
                        "transport",
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
            }
        }
        if !missing {
            return Ok(got.into_iter().map(Option::unwrap_or_default).collect());
        }
        if last_check.elapsed() > Duration::from_millis(50) {
            last_check = Instant::now();
            for (i, (path, peer, pid)) in want.iter().enumerate() {
                let Some(pid) = *pid else { continue };
                if got[i].is_none() && !alive(pid) {
                    // It may have published just before it ended.
                    if let Ok(b) = std::fs::read(path) {
                        got[i] = Some(b);
                        continue;
                    }
                    return Err(Fail::new(
                        REMOTE_ERROR,
                        "peer died",
                        format!(
                            "rank {peer} (pid {pid}) ended while rank {} waited for it in {}",
                            w.rank, w.what
                        ),
                    ));
                }
            }
            if start.elapsed() > w.timeout {
                let peers: Vec<String> = want
                    .iter()
                    .zip(&got)
                    .filter(|(_, g)| g.is_none())
                    .map(|((_, p, _), _)| p.to_string())
                    .collect();
                return Err(Fail::new(
                    TIMEOUT,
                    "timeout",
                    format!(
                        "rank {} waited {:.0} s in {} for rank(s) {} (SIMGPU_NCCL_TIMEOUT)",
                        w.rank,
                        w.timeout.as_secs_f64(),
                        w.what,
                        peers.join(", ")
                    ),
                ));
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// A message's fixed header, little-endian: what every rank states about the operation, so that
/// ranks that disagree are told so.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// 0: the operation went well locally; otherwise the NCCL status it failed with.
    pub status: i32,
    /// The operation's kind (ops::Kind as a number).
    pub kind: u32,
    pub count: u64,
    pub dtype: i32,
    pub root: i32,
    /// The last collective whose contributions this rank has finished reading.
    pub done_through: u64,
    /// When the operation could start on this rank's virtual clock.
    pub time: f64,
}

pub const HEADER_BYTES: usize = 4 + 4 + 4 + 8 + 4 + 4 + 8 + 8;
const MAGIC: u32 = 0x4e43_434c; // "NCCL"

impl Header {
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_BYTES + payload.len());
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&self.status.to_le_bytes());
        v.extend_from_slice(&self.kind.to_le_bytes());
        v.extend_from_slice(&self.count.to_le_bytes());
        v.extend_from_slice(&self.dtype.to_le_bytes());
        v.extend_from_slice(&self.root.to_le_bytes());
        v.extend_from_slice(&self.done_through.to_le_bytes());
        v.extend_from_slice(&self.time.to_le_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// The header and the payload of a message, or None when it is not one.
    pub fn decode(b: &[u8]) -> Option<(Header, &[u8])> {
        if b.len() < HEADER_BYTES || b[0..4] != MAGIC.to_le_bytes() {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Some((
            Header {
                status: u32_at(4) as i32,
                kind: u32_at(8),
                count: u64_at(12),
                dtype: u32_at(20) as i32,
                root: u32_at(24) as i32,
                done_through: u64_at(28),
                time: f64::from_bits(u64_at(36)),
            },
            &b[HEADER_BYTES..],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let h = Header {
            status: 0,
            kind: 3,
            count: 1 << 40,
            dtype: 9,
            root: -1,
            done_through: 17,
            time: 0.125,
        };
        let b = h.encode(&[1, 2, 3]);
        let (g, p) = Header::decode(&b).unwrap();
        assert_eq!(g, h);
        assert_eq!(p, &[1, 2, 3]);
        assert!(Header::decode(&b[..10]).is_none());
    }

    #[test]
    fn a_dead_peer_ends_the_wait_and_a_live_one_times_out() {
        let dir = std::env::temp_dir().join(format!("simgpu-nccl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as i32;
        child.wait().unwrap();
        let w = Waiting {
            rank: 0,
            what: "all-reduce #1",
            timeout: Duration::from_millis(300),
        };
        let e = wait_all(&[(dir.join("x"), 1, Some(dead))], &w).unwrap_err();
        assert_eq!(e.code, REMOTE_ERROR);
        assert!(
            e.msg.contains("rank 1") && e.msg.contains("all-reduce #1"),
            "{}",
            e.msg
        );
        let me = std::process::id() as i32;
        let e = wait_all(&[(dir.join("y"), 2, Some(me))], &w).unwrap_err();
        assert_eq!(e.code, TIMEOUT);
        assert!(e.msg.contains("rank(s) 2"), "{}", e.msg);
        publish(&dir, "z", b"hello").unwrap();
        let got = wait_all(&[(dir.join("z"), 1, Some(me))], &w).unwrap();
        assert_eq!(got, vec![b"hello".to_vec()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
