//! The collective, point-to-point, group and reduction-operator entry points (prototypes from
//! nccl.h of NCCL 2.32.3). Arguments are checked when the call is made; a bad one is
//! ncclInvalidArgument with a message.

use crate::comm::{self, CommHandle, PreMul};
use crate::ops::{self, Kind, OpSpec, Pending};
use crate::reduce::{DataType, RedOp};
use crate::{Fail, NcclResult, guard, out};
use std::ffi::{c_int, c_void};

/// `ncclScalarResidence_t` (nccl.h): ncclScalarDevice = 0, ncclScalarHostImmediate = 1.
const SCALAR_DEVICE: c_int = 0;
const SCALAR_HOST_IMMEDIATE: c_int = 1;

fn dtype(v: c_int) -> Result<DataType, Fail> {
    DataType::from_raw(v).ok_or_else(|| {
        Fail::arg(
            "datatype",
            format!("datatype {v} is not an ncclDataType_t (0..=11)"),
        )
    })
}

/// The arguments of one call, checked and queued.
struct Call {
    comm: CommHandle,
    kind: Kind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: c_int,
    op: Option<c_int>,
    root: c_int,
    stream: *mut c_void,
}

fn issue(c: Call) -> Result<(), Fail> {
    let comm = comm::get(c.comm)?;
    let dt = dtype(c.dt)?;
    let n = comm.nranks;
    let me = comm.rank;
    let rooted = matches!(c.kind, Kind::Broadcast | Kind::Reduce | Kind::Gather);
    let peer = matches!(c.kind, Kind::Send | Kind::Recv);
    if (rooted || peer) && (c.root < 0 || c.root as usize >= n) {
        let what = if peer { "peer" } else { "root" };
        return Err(Fail::arg(
            what,
            format!(
                "{what} {} is not a rank of the communicator (0..{n})",
                c.root
            ),
        ));
    }
    let op = match c.op {
        None => OpSpec::Builtin(RedOp::Sum),
        Some(v) => match RedOp::builtin(v) {
            Some(op) => OpSpec::Builtin(op),
            None => {
                let st = comm.lock();
                match st.premul.get(&v) {
                    Some(PreMul::Host(_, t) | PreMul::Device(_, t)) if *t != dt => {
                        return Err(Fail::arg(
                            "op datatype",
                            format!("reduction operator {v} was made for another datatype"),
                        ));
                    }
                    Some(pm) => OpSpec::PreMul(pm.clone()),
                    None => {
                        return Err(Fail::arg(
                            "op",
                            format!(
                                "reduction operator {v} is neither built in nor live on this communicator"
                            ),
                        ));
                    }
                }
            }
        },
    };
    let p = Pending {
        comm: comm.clone(),
        kind: c.kind,
        send: c.send as u64,
        recv: c.recv as u64,
        count: c.count,
        dt,
        op,
        root: if rooted || peer { c.root } else { -1 },
        stream: c.stream as usize,
    };
    // The buffers' sizes fit in memory, and the buffers a rank uses are given.
    let elems = c
        .count
        .checked_mul(n)
        .and_then(|e| e.checked_mul(dt.size()));
    if elems.is_none() {
        return Err(Fail::arg(
            "count",
            format!("count {} is too large", c.count),
        ));
    }
    let is_root = rooted && c.root as usize == me;
    let send_needed = c.count > 0
        && match c.kind {
            Kind::Broadcast => is_root,
            Kind::Recv => false,
            _ => true,
        };
    if send_needed && c.send.is_null() {
        return Err(Fail::arg("null buffer", "sendbuff is NULL"));
    }
    if p.recv_elems() > 0 && c.recv.is_null() {
        return Err(Fail::arg("null buffer", "recvbuff is NULL"));
    }
    ops::enqueue(p)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclAllReduce", || {
        issue(Call {
            comm,
            kind: Kind::AllReduce,
            send: sendbuff,
            recv: recvbuff,
            count,
            dt: datatype,
            op: Some(op),
            root: -1,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclBroadcast", || {
        issue(Call {
            comm,
            kind: Kind::Broadcast,
            send: sendbuff,
            recv: recvbuff,
            count,
            dt: datatype,
            op: None,
            root,
            stream,
        })
    })
}

/// The in-place broadcast of NCCL 1's API.
#[unsafe(no_mangle)]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclBcast", || {
        issue(Call {
            comm,
            kind: Kind::Broadcast,
            send: buff,
            recv: buff,
            count,
            dt: datatype,
            op: None,
            root,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclReduce", || {
        issue(Call {
            comm,
            kind: Kind::Reduce,
            send: sendbuff,
            recv: recvbuff,
            count,
            dt: datatype,
            op: Some(op),
            root,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclAllGather", || {
        issue(Call {
            comm,
            kind: Kind::AllGather,
            send: sendbuff,
            recv: recvbuff,
            count: sendcount,
            dt: datatype,
            op: None,
            root: -1,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclReduceScatter", || {
        issue(Call {
            comm,
            kind: Kind::ReduceScatter,
            send: sendbuff,
            recv: recvbuff,
            count: recvcount,
            dt: datatype,
            op: Some(op),
            root: -1,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclAlltoAll", || {
        issue(Call {
            comm,
            kind: Kind::AllToAll,
            send: sendbuff,
            recv: recvbuff,
            count,
            dt: datatype,
            op: None,
            root: -1,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclGather", || {
        issue(Call {
            comm,
            kind: Kind::Gather,
            send: sendbuff,
            recv: recvbuff,
            count,
            dt: datatype,
            op: None,
            root,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclSend", || {
        issue(Call {
            comm,
            kind: Kind::Send,
            send: sendbuff,
            recv: std::ptr::null_mut(),
            count,
            dt: datatype,
            op: None,
            root: peer,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: CommHandle,
    stream: *mut c_void,
) -> NcclResult {
    guard("ncclRecv", || {
        issue(Call {
            comm,
            kind: Kind::Recv,
            send: std::ptr::null(),
            recv: recvbuff,
            count,
            dt: datatype,
            op: None,
            root: peer,
            stream,
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    guard("ncclGroupStart", || {
        ops::group_start();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> NcclResult {
    guard("ncclGroupEnd", ops::group_end)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    datatype: c_int,
    residence: c_int,
    comm: CommHandle,
) -> NcclResult {
    guard("ncclRedOpCreatePreMulSum", || {
        let c = comm::get(comm)?;
        let dt = dtype(datatype)?;
        if op.is_null() || scalar.is_null() {
            return Err(Fail::arg("null", "op or scalar is NULL"));
        }
        let pm = match residence {
            SCALAR_HOST_IMMEDIATE => {
                // SAFETY: a host scalar of the datatype's size, by the API's contract.
                let b = unsafe { std::slice::from_raw_parts(scalar as *const u8, dt.size()) };
                PreMul::Host(b.to_vec(), dt)
            }
            SCALAR_DEVICE => PreMul::Device(scalar as u64, dt),
            r => {
                return Err(Fail::arg(
                    "residence",
                    format!("residence {r} is not an ncclScalarResidence_t"),
                ));
            }
        };
        let mut st = c.lock();
        let id = st.next_op;
        st.next_op += 1;
        st.premul.insert(id, pm);
        out(op, id, "op")
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpDestroy(op: c_int, comm: CommHandle) -> NcclResult {
    guard("ncclRedOpDestroy", || {
        let c = comm::get(comm)?;
        match c.lock().premul.remove(&op) {
            Some(_) => Ok(()),
            None => Err(Fail::arg(
                "op",
                format!(
                    "reduction operator {op} was not made by ncclRedOpCreatePreMulSum on this communicator"
                ),
            )),
        }
    })
}
