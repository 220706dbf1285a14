//! What a call does to each allocation it touches, from the trace's records.

use super::*;

#[test]
fn roles_from_the_trace() {
    let allocs: HashMap<u64, (u64, u64)> =
        [(1, (ptr(1), 64)), (2, (ptr(2), 64)), (3, (ptr(3), 32))].into();
    let conv = cudnn(
        "cudnnConvolutionForward",
        vec![
            tensor("x", ptr(1), Access::R),
            tensor("y", ptr(2), Access::W),
            tensor("workspace", ptr(3), Access::Rw),
        ],
        vec![
            touch(1, 64, Access::R),
            touch(2, 64, Access::W),
            touch(3, 32, Access::Rw),
        ],
    );
    assert_eq!(
        roles(&conv, &allocs),
        [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
    );
    // beta != 0: the output is read too.
    let acc = cudnn("cudnnAddTensor", vec![], vec![touch(2, 64, Access::Rw)]);
    assert_eq!(roles(&acc, &allocs), [(2, Role::Update)]);
    // In place (x and y the same allocation): the old contents are read.
    let inplace = cudnn(
        "cudnnActivationForward",
        vec![],
        vec![touch(2, 64, Access::R), touch(2, 64, Access::W)],
    );
    assert_eq!(roles(&inplace, &allocs), [(2, Role::Update)]);
    // A cuBLASLt workspace is scratch too (written before it is read, within the call).
    let gemm = Event::Cublas {
        api: "cublasLtMatmul".into(),
        stream: Some(0),
        m: 4,
        n: 4,
        k: 4,
        batch: 1,
        kernels: 1,
        tensors: vec![
            tensor("A", ptr(1), Access::R),
            tensor("D", ptr(2), Access::W),
            tensor("workspace", ptr(3), Access::Rw),
        ],
        touches: vec![
            touch(1, 64, Access::R),
            touch(2, 64, Access::W),
            touch(3, 32, Access::Rw),
        ],
        result: 0,
    };
    assert_eq!(
        roles(&gemm, &allocs),
        [(1, Role::Read), (2, Role::Overwrite), (3, Role::Scratch)]
    );
    // A write of part of an allocation keeps the rest: a new version of the old contents.
    let part = Event::Memset {
        api: "cudaMemsetAsync".into(),
        ptr: ptr(1),
        size: 32,
        stream: None,
        touches: vec![touch(1, 32, Access::W)],
        result: 0,
    };
    assert_eq!(roles(&part, &allocs), [(1, Role::Update)]);
    let d2d = copy(
        CopyDir::D2d,
        64,
        vec![touch(1, 64, Access::R), touch(2, 64, Access::W)],
    );
    assert_eq!(
        roles(&d2d, &allocs),
        [(1, Role::Read), (2, Role::Overwrite)]
    );
    // A kernel's pointer: read, and maybe written.
    let k = kernel(vec![touch(1, 0, Access::Rw)]);
    assert_eq!(roles(&k, &allocs), [(1, Role::Update)]);
    // Allocations the trace does not know are no touch at all.
    let unknown = kernel(vec![touch(9, 0, Access::Rw)]);
    assert!(roles(&unknown, &allocs).is_empty());
}
