//! The call stream as the conversion reads it: what each call does to each allocation it touches
//! (its [`Role`]s), each allocation's life and uses, and from those the bytes allocated and the
//! bytes of live contents before each call.

use crate::iteration::{self, Call};
use crate::trace::{Access, Event, Record};
use std::collections::HashMap;

/// What one call does to one allocation, its touches merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Read only.
    Read,
    /// Written whole without being read: the old contents are dead before the call.
    Overwrite,
    /// Read and (or) partly written: a new version that depends on the old one.
    Update,
    /// A cuDNN workspace: written and read within the call only.
    Scratch,
}

impl Role {
    /// Whether the call needs the contents the allocation held before it.
    pub fn reads(self) -> bool {
        matches!(self, Role::Read | Role::Update)
    }
}

/// The roles of a call's touches, one per allocation, in the order first touched. `allocs`
/// gives each allocation's address and size.
pub fn roles(event: &Event, allocs: &HashMap<u64, (u64, u64)>) -> Vec<(u64, Role)> {
    let scratch: Vec<u64> = match event {
        Event::Cudnn { tensors, .. } | Event::Cublas { tensors, .. } => tensors
            .iter()
            .filter(|t| t.role == "workspace")
            .map(|t| t.ptr)
            .collect(),
        _ => Vec::new(),
    };
    // Per allocation: (reads, writes, a write covering it all, all touches are the workspace).
    let mut acc: Vec<(u64, bool, bool, bool, bool)> = Vec::new();
    for t in event.touches() {
        let Some(&(ptr, size)) = allocs.get(&t.alloc) else {
            continue;
        };
        let is_ws = scratch.contains(&(ptr + t.offset));
        let (r, w) = match t.access {
            Access::R => (true, false),
            Access::W => (false, true),
            Access::Rw => (true, true),
        };
        let full = w && t.access == Access::W && t.offset == 0 && t.bytes >= size;
        match acc.iter_mut().find(|a| a.0 == t.alloc) {
            Some(a) => {
                a.1 |= r;
                a.2 |= w;
                a.3 |= full;
                a.4 &= is_ws;
            }
            None => acc.push((t.alloc, r, w, full, is_ws)),
        }
    }
    acc.into_iter()
        .map(|(a, r, w, full, ws)| {
            let role = if ws {
                Role::Scratch
            } else if r && w {
                Role::Update
            } else if r {
                Role::Read
            } else if full {
                Role::Overwrite
            } else {
                Role::Update
            };
            (a, role)
        })
        .collect()
}

/// The calls of a trace with each call's record and the roles of its touches.
pub(super) struct Stream<'a> {
    pub(super) calls: Vec<Call>,
    pub(super) records: Vec<&'a Record>,
    pub(super) roles: Vec<Vec<(u64, Role)>>,
    /// Allocation id -> (call index of the allocation, call index of its free, size).
    pub(super) life: HashMap<u64, (usize, usize, u64)>,
    /// Allocation id -> the calls that touch it, with their roles, in order.
    pub(super) uses: HashMap<u64, Vec<(usize, Role)>>,
    /// Allocation id -> (address, size).
    pub(super) allocs: HashMap<u64, (u64, u64)>,
}

impl<'a> Stream<'a> {
    pub(super) fn new(records: &'a [Record]) -> Stream<'a> {
        let calls = iteration::calls(records);
        let mut allocs: HashMap<u64, (u64, u64)> = HashMap::new();
        // A pooled free is no call: its allocation's life ends at the next call.
        let mut ends_at: HashMap<u64, usize> = HashMap::new();
        for r in records {
            if let Event::Free {
                alloc: Some(a),
                result: 0,
                pooled: true,
                ..
            } = r.event
            {
                ends_at.insert(a, calls.partition_point(|c| c.seq < r.seq));
            }
        }
        let mut life = HashMap::new();
        let records: Vec<&Record> = records
            .iter()
            .filter(|r| iteration::is_call(&r.event))
            .collect();
        debug_assert_eq!(calls.len(), records.len());
        let mut uses: HashMap<u64, Vec<(usize, Role)>> = HashMap::new();
        let mut all = Vec::with_capacity(calls.len());
        for (i, r) in records.iter().enumerate() {
            match r.event {
                Event::Alloc {
                    alloc,
                    ptr,
                    size,
                    result: 0,
                    ..
                } => {
                    allocs.insert(alloc, (ptr, size));
                    let freed = ends_at.get(&alloc).copied().unwrap_or(usize::MAX);
                    life.insert(alloc, (i, freed, size));
                }
                Event::Free {
                    alloc: Some(a),
                    result: 0,
                    ..
                } => {
                    if let Some(l) = life.get_mut(&a) {
                        l.1 = i;
                    }
                }
                _ => {}
            }
            let ro = if r.event.result() == 0 {
                roles(&r.event, &allocs)
            } else {
                Vec::new()
            };
            for &(a, role) in &ro {
                uses.entry(a).or_default().push((i, role));
            }
            all.push(ro);
        }
        hidden_workspaces(&life, &mut uses, &mut all);
        Stream {
            calls,
            records,
            roles: all,
            life,
            uses,
            allocs,
        }
    }

    /// Whether allocation `a` holds contents someone will read, just before call `pos`: it
    /// exists, was touched before, and its next touch reads (or there is none and it is never
    /// freed: kept, to be safe).
    pub(super) fn live_at(&self, a: u64, pos: usize) -> bool {
        let Some(&(made, freed, _)) = self.life.get(&a) else {
            return false;
        };
        if made >= pos || freed < pos {
            return false;
        }
        let u = self.uses.get(&a).map_or(&[][..], |v| &v[..]);
        let k = u.partition_point(|&(i, _)| i < pos);
        if k == 0 {
            return false;
        }
        match u.get(k) {
            Some(&(_, role)) => role.reads(),
            None => freed == usize::MAX,
        }
    }

    /// Bytes allocated just before each call (index n: after the last).
    pub(super) fn allocated_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for &(made, freed, size) in self.life.values() {
            diff[made + 1] += size as i128;
            diff[freed.min(n) + 1] -= size as i128;
        }
        prefix(&diff[..=n])
    }

    /// Bytes of live contents just before each call (index n: after the last).
    pub(super) fn live_bytes(&self) -> Vec<u64> {
        let n = self.calls.len();
        let mut diff = vec![0i128; n + 2];
        for (a, u) in &self.uses {
            let (_, freed, size) = self.life[a];
            for w in u.windows(2) {
                if w[1].1.reads() {
                    // Live just before calls w[0].0 + 1 ..= w[1].0.
                    diff[w[0].0 + 1] += size as i128;
                    diff[w[1].0 + 1] -= size as i128;
                }
            }
            if freed == usize::MAX
                && let Some(&(last, _)) = u.last()
            {
                diff[last + 1] += size as i128;
            }
        }
        prefix(&diff[..=n])
    }
}

/// An allocation no recorded call touches between its allocation and its free is a library's
/// workspace reached through a pointer no record names (cuBLAS's, set by the program with
/// `cublasSetWorkspace`, allocated and freed around each GEMM by PyTorch): the allocator maps
/// it for that whole life, so the operation within it holds it, as its scratch. Only where one
/// operation lies within that life: the scratch goes after its operation (the executor may
/// release it then), and a later operation could still use it through the pointer no record
/// names, which nothing would map back first.
fn hidden_workspaces(
    life: &HashMap<u64, (usize, usize, u64)>,
    uses: &mut HashMap<u64, Vec<(usize, Role)>>,
    all: &mut [Vec<(u64, Role)>],
) {
    let mut hidden: Vec<(u64, usize, usize)> = life
        .iter()
        .filter(|&(a, &(_, freed, _))| freed != usize::MAX && !uses.contains_key(a))
        .map(|(&a, &(made, freed, _))| (a, made, freed))
        .collect();
    hidden.sort_unstable();
    for (a, made, freed) in hidden {
        // The operations only: calls that touch something.
        let mut ops = (made + 1..freed).filter(|&i| !all[i].is_empty());
        if let (Some(i), None) = (ops.next(), ops.next()) {
            all[i].push((a, Role::Scratch));
            uses.entry(a).or_default().push((i, Role::Scratch));
        }
    }
}

/// Running sums of a difference array.
fn prefix(diff: &[i128]) -> Vec<u64> {
    let mut cur = 0i128;
    diff.iter()
        .map(|d| {
            cur += d;
            cur.max(0) as u64
        })
        .collect()
}
