//! The shim's traces as planner input: roles, lineage and replayability, against hand-made
//! records. The record builders they share are here; the tests, one file per subject.

mod chains;
mod conversion;
mod replay;
mod roles;

use super::*;
use crate::trace::{Access, CopyDir, TensorArg, Touch};

fn touch(alloc: u64, bytes: u64, access: Access) -> Touch {
    Touch {
        alloc,
        offset: 0,
        bytes,
        access,
    }
}
fn tensor(role: &str, ptr: u64, access: Access) -> TensorArg {
    TensorArg {
        role: role.into(),
        ptr,
        dims: vec![1, 1, 1, 1],
        strides: vec![1, 1, 1, 1],
        access,
        uid: None,
    }
}
fn cudnn(api: &str, tensors: Vec<TensorArg>, touches: Vec<Touch>) -> Event {
    Event::Cudnn {
        api: api.into(),
        stream: Some(0),
        algo: Some(1),
        workspace: Some(0),
        tensors,
        touches,
        result: 0,
    }
}
fn alloc(id: u64, size: u64) -> Event {
    Event::Alloc {
        api: "cudaMallocAsync".into(),
        alloc: id,
        ptr: ptr(id),
        size,
        stream: Some(0),
        result: 0,
    }
}
fn free(id: u64) -> Event {
    Event::Free {
        api: "cudaFreeAsync".into(),
        ptr: ptr(id),
        alloc: Some(id),
        size: None,
        stream: Some(0),
        result: 0,
        pooled: false,
    }
}
fn ptr(id: u64) -> u64 {
    0x1000_0000 * id
}
fn copy(dir: CopyDir, size: u64, touches: Vec<Touch>) -> Event {
    Event::Copy {
        api: "cudaMemcpyAsync".into(),
        dst: 0,
        src: 0,
        size,
        dir,
        stream: Some(0),
        touches,
        result: 0,
    }
}
fn kernel(touches: Vec<Touch>) -> Event {
    Event::Launch {
        api: "cudaLaunchKernel".into(),
        func: 0x40,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        stream: Some(0),
        touches,
        result: 0,
    }
}
/// Records with sequence numbers, each call that touches memory followed by its timing.
fn records(events: Vec<Event>, timed: bool) -> Vec<Record> {
    let mut out = Vec::new();
    let mut seq = 0;
    for e in events {
        let has_touches = !e.touches().is_empty();
        out.push(Record {
            seq,
            t_ns: 0,
            tid: 1,
            event: e,
        });
        if has_touches && timed {
            out.push(Record {
                seq: seq + 1,
                t_ns: 0,
                tid: 1,
                event: Event::Timing {
                    of: seq,
                    device_ms: 1.0,
                },
            });
        }
        seq += 2;
    }
    out
}
