//! Running operations: groups, matching, the exchange of contributions and the results.
//!
//! Operations issued inside ncclGroupStart/ncclGroupEnd (nested: the outermost end counts) run
//! together at the end, in two passes: first every operation of the group posts this rank's part
//! (its contribution, or for a receive that it is ready), then each waits for its peers' parts
//! and completes. So a group whose sends and receives need each other never waits on itself.
//!
//! Collectives are numbered per communicator in issue order (NCCL requires every rank to issue
//! the same collectives in the same order); the k-th send from rank a to rank b meets the k-th
//! receive on b from a, as NCCL matches them.
//!
//! Timing: an operation starts on the links engine at the latest of its ranks' stream times, so
//! the slowest rank holds the others up and the ranks' clocks agree after it; it takes the
//! profile's `nccl` time for its bytes (simgpu_model::nccl).

use crate::comm::{Comm, PreMul};
use crate::driver::{Sim, sim};
use crate::reduce::{DataType, RedOp, reduce};
use crate::transport::{self, Header};
use crate::{Fail, INVALID_USAGE, REMOTE_ERROR, SYSTEM_ERROR, UNHANDLED_CUDA_ERROR};
use simgpu_model::nccl::Collective;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

/// What an operation is (its number travels in the messages' headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AllReduce = 1,
    Broadcast = 2,
    Reduce = 3,
    AllGather = 4,
    ReduceScatter = 5,
    AllToAll = 6,
    Gather = 7,
    Send = 8,
    Recv = 9,
    /// Host bytes from every rank (ncclCommSplit's colors and keys); no device work.
    Exchange = 10,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all-reduce",
            Kind::Broadcast => "broadcast",
            Kind::Reduce => "reduce",
            Kind::AllGather => "all-gather",
            Kind::ReduceScatter => "reduce-scatter",
            Kind::AllToAll => "all-to-all",
            Kind::Gather => "gather",
            Kind::Send => "send",
            Kind::Recv => "recv",
            Kind::Exchange => "split",
        }
    }

    fn collective(self) -> Collective {
        match self {
            Kind::AllReduce => Collective::AllReduce,
            Kind::Broadcast => Collective::Broadcast,
            Kind::Reduce => Collective::Reduce,
            Kind::AllGather => Collective::AllGather,
            Kind::ReduceScatter => Collective::ReduceScatter,
            Kind::AllToAll => Collective::AllToAll,
            Kind::Gather => Collective::Gather,
            Kind::Send | Kind::Recv | Kind::Exchange => Collective::SendRecv,
        }
    }

    fn is_p2p(self) -> bool {
        matches!(self, Kind::Send | Kind::Recv)
    }
}

/// The reduction operator as issued (a PreMulSum's device scalar is read when it runs).
#[derive(Debug, Clone)]
pub enum OpSpec {
    Builtin(RedOp),
    PreMul(PreMul),
}

/// One issued operation.
pub struct Pending {
    pub comm: Arc<Comm>,
    pub kind: Kind,
    pub send: u64,
    pub recv: u64,
    /// Elements: per rank for all-gather and gather, per rank's result for reduce-scatter, per
    /// peer for all-to-all, the message's for send and receive.
    pub count: usize,
    pub dt: DataType,
    pub op: OpSpec,
    /// The root of a rooted collective, the peer of a send or receive; -1 otherwise.
    pub root: i32,
    pub stream: usize,
}

impl Pending {
    fn n(&self) -> usize {
        self.comm.nranks
    }
    fn me(&self) -> usize {
        self.comm.rank
    }
    fn is_root(&self) -> bool {
        self.root as usize == self.me()
    }

    /// Elements this rank contributes from its send buffer.
    fn send_elems(&self) -> usize {
        match self.kind {
            Kind::AllReduce | Kind::Reduce | Kind::AllGather | Kind::Gather | Kind::Send => {
                self.count
            }
            Kind::Broadcast if self.is_root() => self.count,
            Kind::ReduceScatter | Kind::AllToAll => self.count * self.n(),
            _ => 0,
        }
    }

    /// Elements this rank receives into its receive buffer.
    pub fn recv_elems(&self) -> usize {
        match self.kind {
            Kind::AllReduce | Kind::Broadcast | Kind::ReduceScatter | Kind::Recv => self.count,
            Kind::Reduce if self.is_root() => self.count,
            Kind::AllGather | Kind::AllToAll => self.count * self.n(),
            Kind::Gather if self.is_root() => self.count * self.n(),
            _ => 0,
        }
    }

    /// The bytes nccl-tests names for this operation (what its time is computed from).
    fn timed_bytes(&self) -> u64 {
        let per = match self.kind {
            Kind::AllGather | Kind::ReduceScatter | Kind::AllToAll | Kind::Gather => {
                self.count * self.n()
            }
            Kind::Exchange => 0,
            _ => self.count,
        };
        (per * self.dt.size()) as u64
    }

    fn what(&self, seq: u64) -> String {
        format!("{} #{seq}", self.kind.name())
    }

    fn header(&self, status: i32, done_through: u64, time: f64) -> Header {
        Header {
            status,
            kind: self.kind as u32,
            count: self.count as u64,
            dtype: self.dt as i32,
            root: if self.kind.is_p2p() { -1 } else { self.root },
            done_through,
            time,
        }
    }
}

/// Per-pair numbering of point-to-point operations: the sequence number the next operation of
/// `kind` with `peer` gets, as NCCL matches them.
pub fn next_p2p_seq(send_seq: &mut [u64], recv_seq: &mut [u64], kind: Kind, peer: usize) -> u64 {
    let c = if kind == Kind::Send {
        &mut send_seq[peer]
    } else {
        &mut recv_seq[peer]
    };
    *c += 1;
    *c
}

struct Group {
    depth: u32,
    pending: Vec<Pending>,
}

thread_local! {
    static GROUP: RefCell<Group> = const { RefCell::new(Group { depth: 0, pending: Vec::new() }) };
}

pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

pub fn group_end() -> Result<(), Fail> {
    let ops = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Fail::usage(
                "unbalanced",
                "ncclGroupEnd without a matching ncclGroupStart",
            ));
        }
        g.depth -= 1;
        Ok(if g.depth == 0 {
            std::mem::take(&mut g.pending)
        } else {
            Vec::new()
        })
    })?;
    run(ops)
}

/// Runs `p` now, or at the outermost ncclGroupEnd inside a group.
pub fn enqueue(p: Pending) -> Result<(), Fail> {
    p.comm.check_error()?;
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 {
            g.pending.push(p);
            None
        } else {
            Some(p)
        }
    });
    match queued {
        Some(p) => run(vec![p]),
        None => Ok(()),
    }
}

fn cuda(what: &str, r: i32) -> Fail {
    Fail::new(
        UNHANDLED_CUDA_ERROR,
        "cuda",
        format!("{what} failed with CUresult {r}"),
    )
}

fn driver() -> Result<&'static Sim, Fail> {
    sim().map_err(|e| Fail::new(SYSTEM_ERROR, "driver", e))
}

/// An operation after its first pass.
struct Posted {
    seq: u64,
    time: f64,
    /// This rank's contribution (empty where its send buffer holds no bytes: shape mode).
    payload: Vec<u8>,
    /// The local failure, already told to the peers.
    failed: Option<Fail>,
}

fn run(ops: Vec<Pending>) -> Result<(), Fail> {
    if ops.is_empty() {
        return Ok(());
    }
    let s = driver()?;
    let data = s.data_mode();
    let mut posted = Vec::with_capacity(ops.len());
    for p in &ops {
        posted.push(post(s, data, p)?);
    }
    let mut first: Option<Fail> = None;
    for (p, mut x) in ops.iter().zip(posted) {
        let r = match x.failed.take() {
            Some(f) => Err(f),
            None => complete(s, data, p, &x),
        };
        if let Err(f) = r {
            p.comm.note_error(&f);
            first.get_or_insert(f);
        }
    }
    first.map_or(Ok(()), Err)
}

/// First pass: number the operation, take this rank's stream time and contribution, post them.
fn post(s: &Sim, data: bool, p: &Pending) -> Result<Posted, Fail> {
    let c = &p.comm;
    let mut st = c.lock();
    let seq = if p.kind.is_p2p() {
        let st = &mut *st;
        next_p2p_seq(&mut st.send_seq, &mut st.recv_seq, p.kind, p.root as usize)
    } else {
        st.coll_seq += 1;
        st.coll_seq
    };
    let mut failed = None;
    let time = match s.stream_time(p.stream as crate::driver::Handle) {
        Ok(t) => t,
        Err(r) => {
            failed = Some(cuda("simgpu_stream_time (the stream)", r));
            0.0
        }
    };
    let bytes = p.send_elems() * p.dt.size();
    let mut payload = Vec::new();
    if failed.is_none() && bytes > 0 {
        let r = if data || s.holds_bytes(p.send, bytes) {
            payload = vec![0u8; bytes];
            s.read(p.send, &mut payload, c"nccl sendbuff")
        } else {
            s.check(p.send, bytes, c"nccl sendbuff")
        };
        if r != 0 {
            failed = Some(cuda("reading sendbuff", r));
            payload.clear();
        }
    }
    let status = failed.as_ref().map_or(0, |f| f.code);
    let h = p.header(status, st.done_through, time);
    let (name, body) = match p.kind {
        Kind::Send => (format!("s{}.{}.{seq}", c.rank, p.root), h.encode(&payload)),
        Kind::Recv => (format!("r{}.{}.{seq}", p.root, c.rank), h.encode(&[])),
        _ => (format!("c{seq}.{}", c.rank), h.encode(&payload)),
    };
    transport::publish(&c.dir, &name, &body)?;
    if !p.kind.is_p2p() {
        st.posted.push_back((seq, c.dir.join(&name)));
    }
    Ok(Posted {
        seq,
        time,
        payload,
        failed,
    })
}

/// Checks a peer's header against this rank's view of the operation.
fn agree(p: &Pending, seq: u64, peer: usize, h: &Header, mine: &Header) -> Result<(), Fail> {
    if h.status != 0 {
        return Err(Fail::new(
            REMOTE_ERROR,
            "peer failed",
            format!(
                "rank {peer} failed in {} (status {}), so rank {} cannot complete it",
                p.what(seq),
                h.status,
                p.me()
            ),
        ));
    }
    if (h.kind, h.count, h.dtype, h.root) != (mine.kind, mine.count, mine.dtype, mine.root) {
        return Err(Fail::new(
            INVALID_USAGE,
            "mismatch",
            format!(
                "operation #{seq}: rank {peer} issued kind {} count {} datatype {} root {}, rank {} \
                 issued {} count {} datatype {} root {} (every rank must issue the same \
                 operations in the same order)",
                h.kind,
                h.count,
                h.dtype,
                h.root,
                p.me(),
                p.kind.name(),
                mine.count,
                mine.dtype,
                mine.root
            ),
        ));
    }
    Ok(())
}

/// Second pass: wait for the peers' parts, compute, write the result, place the time.
fn complete(s: &Sim, data: bool, p: &Pending, x: &Posted) -> Result<(), Fail> {
    let c = &p.comm;
    let what = p.what(x.seq);
    let mine = p.header(0, 0, x.time);
    let (start, result) = if p.kind.is_p2p() {
        let peer = p.root as usize;
        let name = match p.kind {
            Kind::Send => format!("r{}.{peer}.{}", c.rank, x.seq),
            _ => format!("s{peer}.{}.{}", c.rank, x.seq),
        };
        let path = c.dir.join(name);
        let got = transport::wait_all(
            &[(path.clone(), peer, Some(c.pids[peer]))],
            &c.waiting(&what),
        )?;
        // A point-to-point message has one reader, which removes it.
        let _ = std::fs::remove_file(&path);
        let (h, payload) = decode(&got[0], peer)?;
        let mut h2 = h.clone();
        // The two sides' kinds differ by design.
        h2.kind = mine.kind;
        agree(p, x.seq, peer, &h2, &mine)?;
        let bytes = p.recv_elems() * p.dt.size();
        let carried = data || (!payload.is_empty() && s.holds_bytes(p.recv, bytes));
        let out = (p.kind == Kind::Recv && carried).then(|| payload.to_vec());
        (x.time.max(h.time), out)
    } else {
        let want: Vec<(PathBuf, usize, Option<i32>)> = (0..p.n())
            .filter(|&r| r != c.rank)
            .map(|r| (c.dir.join(format!("c{}.{r}", x.seq)), r, Some(c.pids[r])))
            .collect();
        let got = transport::wait_all(&want, &c.waiting(&what))?;
        let mut parts: Vec<&[u8]> = vec![&x.payload; p.n()];
        let mut start = x.time;
        let mut done = u64::MAX;
        for ((_, r, _), b) in want.iter().zip(&got) {
            let (h, payload) = decode(b, *r)?;
            agree(p, x.seq, *r, &h, &mine)?;
            start = start.max(h.time);
            done = done.min(h.done_through);
            parts[*r] = payload;
        }
        {
            let mut st = c.lock();
            st.done_through = st.done_through.max(x.seq);
            // Every peer has read this rank's messages up to `done`: they may go.
            while st.posted.front().is_some_and(|(k, _)| *k <= done) {
                if let Some((_, f)) = st.posted.pop_front() {
                    let _ = std::fs::remove_file(f);
                }
            }
        }
        // In shape mode the result is exact where every part it needs was carried and the
        // receive buffer holds bytes (small buffers: sizes and flags checked across ranks).
        let needed: Vec<usize> = match p.kind {
            Kind::Broadcast => vec![p.root as usize],
            _ => (0..p.n()).collect(),
        };
        let carried = needed
            .iter()
            .all(|&r| parts.get(r).is_some_and(|b| !b.is_empty()))
            && s.holds_bytes(p.recv, p.recv_elems() * p.dt.size());
        let out = if data || carried {
            let op = resolve_op(s, p)?;
            Some(combine(p, &parts, &op)?)
        } else {
            None
        };
        (start, out)
    };
    let bytes = p.recv_elems() * p.dt.size();
    if bytes > 0 {
        let r = match &result {
            Some(b) => s.write(p.recv, &b[..bytes.min(b.len())], c"nccl recvbuff"),
            None => s.check(p.recv, bytes, c"nccl recvbuff"),
        };
        if r != 0 {
            return Err(cuda("writing recvbuff", r));
        }
    }
    let seconds = s
        .model
        .time(p.kind.collective(), p.timed_bytes(), p.n() as u32);
    match s.submit_link(p.stream as crate::driver::Handle, start, seconds) {
        0 => Ok(()),
        r => Err(cuda("simgpu_submit_link", r)),
    }
}

fn decode(b: &[u8], peer: usize) -> Result<(Header, &[u8]), Fail> {
    Header::decode(b).ok_or_else(|| {
        Fail::new(
            SYSTEM_ERROR,
            "transport",
            format!("rank {peer}'s message is not one of this library's"),
        )
    })
}

fn resolve_op(s: &Sim, p: &Pending) -> Result<RedOp, Fail> {
    Ok(match &p.op {
        OpSpec::Builtin(op) => op.clone(),
        OpSpec::PreMul(PreMul::Host(b, _)) => RedOp::PreMulSum(b.clone()),
        OpSpec::PreMul(PreMul::Device(ptr, dt)) => {
            let mut b = vec![0u8; dt.size()];
            match s.read(*ptr, &mut b, c"nccl premulsum scalar") {
                0 => RedOp::PreMulSum(b),
                r => return Err(cuda("reading the PreMulSum scalar", r)),
            }
        }
    })
}

/// This rank's result from every rank's contribution (`parts`, in rank order).
fn combine(p: &Pending, parts: &[&[u8]], op: &RedOp) -> Result<Vec<u8>, Fail> {
    let sz = p.dt.size();
    let n = p.n();
    let me = p.me();
    let chunk = p.count * sz;
    let short = |r: usize, need: usize| {
        Fail::new(
            SYSTEM_ERROR,
            "transport",
            format!(
                "rank {r}'s contribution has {} bytes, {need} expected",
                parts[r].len()
            ),
        )
    };
    let need = p.send_elems() * sz;
    for (r, part) in parts.iter().enumerate() {
        let expected = if p.kind == Kind::Broadcast {
            if r == p.root as usize { chunk } else { 0 }
        } else {
            need
        };
        if part.len() < expected {
            return Err(short(r, expected));
        }
    }
    let mut out = vec![0u8; p.recv_elems() * sz];
    match p.kind {
        Kind::AllReduce => reduce(p.dt, op, parts, &mut out, p.count),
        Kind::Reduce if p.is_root() => reduce(p.dt, op, parts, &mut out, p.count),
        Kind::ReduceScatter => {
            let mine: Vec<&[u8]> = parts
                .iter()
                .map(|b| &b[me * chunk..(me + 1) * chunk])
                .collect();
            reduce(p.dt, op, &mine, &mut out, p.count);
        }
        Kind::Broadcast => out.copy_from_slice(&parts[p.root as usize][..chunk]),
        Kind::AllGather => {
            for (r, b) in parts.iter().enumerate() {
                out[r * chunk..(r + 1) * chunk].copy_from_slice(&b[..chunk]);
            }
        }
        Kind::Gather if p.is_root() => {
            for (r, b) in parts.iter().enumerate() {
                out[r * chunk..(r + 1) * chunk].copy_from_slice(&b[..chunk]);
            }
        }
        Kind::AllToAll => {
            for (r, b) in parts.iter().enumerate() {
                out[r * chunk..(r + 1) * chunk].copy_from_slice(&b[me * chunk..(me + 1) * chunk]);
            }
        }
        _ => {}
    }
    debug_assert!(n == parts.len());
    Ok(out)
}

/// Every rank's `mine` (host bytes), through one collective of `comm`, with the collective's
/// sequence number; no device work and no time.
pub fn exchange(c: &Arc<Comm>, mine: &[u8]) -> Result<(Vec<Vec<u8>>, u64), Fail> {
    c.check_error()?;
    let (seq, done) = {
        let mut st = c.lock();
        st.coll_seq += 1;
        st.splits += 1;
        (st.coll_seq, st.done_through)
    };
    let h = Header {
        status: 0,
        kind: Kind::Exchange as u32,
        count: mine.len() as u64,
        dtype: 0,
        root: -1,
        done_through: done,
        time: 0.0,
    };
    let name = format!("c{seq}.{}", c.rank);
    transport::publish(&c.dir, &name, &h.encode(mine))?;
    c.lock().posted.push_back((seq, c.dir.join(&name)));
    let want: Vec<(PathBuf, usize, Option<i32>)> = (0..c.nranks)
        .filter(|&r| r != c.rank)
        .map(|r| (c.dir.join(format!("c{seq}.{r}")), r, Some(c.pids[r])))
        .collect();
    let what = format!("split #{seq}");
    let got = transport::wait_all(&want, &c.waiting(&what)).inspect_err(|f| c.note_error(f))?;
    let mut all = vec![mine.to_vec(); c.nranks];
    for ((_, r, _), b) in want.iter().zip(&got) {
        let (ph, payload) = decode(b, *r)?;
        if ph.kind != Kind::Exchange as u32 {
            return Err(Fail::usage(
                "mismatch",
                format!(
                    "operation #{seq}: rank {r} issued another operation where rank {} split the communicator",
                    c.rank
                ),
            ));
        }
        all[*r] = payload.to_vec();
    }
    c.lock().done_through = seq;
    Ok((all, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The k-th send from a to b meets the k-th receive on b from a, whatever else either
    /// rank's group holds and in whatever order.
    #[test]
    fn sends_and_receives_match_in_order_per_pair() {
        // Rank 0's group: send to 1, receive from 1, send to 1, send to 2.
        let (mut s0, mut r0) = (vec![0; 3], vec![0; 3]);
        let g0: Vec<(Kind, usize, u64)> = [
            (Kind::Send, 1),
            (Kind::Recv, 1),
            (Kind::Send, 1),
            (Kind::Send, 2),
        ]
        .iter()
        .map(|&(k, p)| (k, p, next_p2p_seq(&mut s0, &mut r0, k, p)))
        .collect();
        // Rank 1's group, in another order: receive from 0 twice, then send to 0.
        let (mut s1, mut r1) = (vec![0; 3], vec![0; 3]);
        let g1: Vec<(Kind, usize, u64)> = [(Kind::Recv, 0), (Kind::Send, 0), (Kind::Recv, 0)]
            .iter()
            .map(|&(k, p)| (k, p, next_p2p_seq(&mut s1, &mut r1, k, p)))
            .collect();
        // The files the two ranks name for each operation meet pairwise.
        let name = |me: usize, (k, peer, seq): (Kind, usize, u64)| match k {
            Kind::Send => format!("s{me}.{peer}.{seq}"),
            _ => format!("s{peer}.{me}.{seq}"),
        };
        let sends0: Vec<String> = g0
            .iter()
            .filter(|o| o.0 == Kind::Send && o.1 == 1)
            .map(|&o| name(0, o))
            .collect();
        let recvs1: Vec<String> = g1
            .iter()
            .filter(|o| o.0 == Kind::Recv)
            .map(|&o| name(1, o))
            .collect();
        assert_eq!(sends0, recvs1);
        assert_eq!(sends0, vec!["s0.1.1", "s0.1.2"]);
        assert_eq!(
            name(0, g0[1]),
            name(1, g1[1]),
            "rank 1's send meets rank 0's receive"
        );
        // The send to rank 2 is that pair's first.
        assert_eq!(g0[3].2, 1);
    }
}
