# One rank of a communicator on the simulated GPU, driven through ctypes as a program linked
# against NCCL would drive it (tests/e2e/tests/nccl.rs starts several at once).
#
#   python3 nccl_rank.py SIM_DIR RANK NRANKS ID_FILE SCENARIO
#
# Scenarios: data (collectives and send/recv against references computed here, bit for bit),
# timing (the slowest rank sets the finish time), dead (rank 1 ends after init; rank 0's
# all-reduce must fail, not hang), duplicate (every rank on device 0).
# Prints "ok NAME" per check, "FAIL NAME ..." when a check fails, and key=value figures.
import ctypes
import os
import random
import struct
import sys
import time

d, rank, n, id_file, scenario = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
G = ctypes.RTLD_GLOBAL
cuda = ctypes.CDLL(d + "/libcuda.so.1", mode=G)
rt = ctypes.CDLL(d + "/libcudart.so.13", mode=G)
nccl = ctypes.CDLL(d + "/libnccl.so.2")
c_void_p, c_int, c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
nccl.ncclGetLastError.restype = ctypes.c_char_p
nccl.ncclGetLastError.argtypes = [c_void_p]
cuda.simgpu_stream_time.argtypes = [c_void_p, ctypes.POINTER(ctypes.c_double)]
cuda.simgpu_submit_link.argtypes = [c_void_p, ctypes.c_double, ctypes.c_double, c_int]
failed = False

# nccl.h: ncclDataType_t and ncclRedOp_t values.
INT32, INT64, FLOAT16, FLOAT32 = 2, 4, 6, 7
SUM, PROD, MAX, MIN, AVG = 0, 1, 2, 3, 4


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def ck(what, r):
    if r != 0:
        print("FAIL", what, r, (nccl.ncclGetLastError(None) or b"").decode())
        sys.stdout.flush()
        os._exit(1)


def check(name, got, want):
    global failed
    if got == want:
        print("ok", name)
    else:
        failed = True
        print("FAIL", name, "differs from the reference")


ck("cudaSetDevice", rt.cudaSetDevice(0 if scenario == "duplicate" else rank))

uid = UniqueId()
if rank == 0:
    ck("ncclGetUniqueId", nccl.ncclGetUniqueId(ctypes.byref(uid)))
    with open(id_file + ".tmp", "wb") as f:
        f.write(ctypes.string_at(ctypes.addressof(uid), 128))
    os.rename(id_file + ".tmp", id_file)
else:
    while not os.path.exists(id_file):
        time.sleep(0.005)
    ctypes.memmove(ctypes.addressof(uid), open(id_file, "rb").read(), 128)

comm = c_void_p()
r = nccl.ncclCommInitRank(ctypes.byref(comm), n, uid, rank)
if scenario == "duplicate":
    print("init", r)
    print("message", (nccl.ncclGetLastError(None) or b"").decode())
    sys.exit(0)
ck("ncclCommInitRank", r)
cnt, me = c_int(), c_int()
ck("ncclCommCount", nccl.ncclCommCount(comm, ctypes.byref(cnt)))
ck("ncclCommUserRank", nccl.ncclCommUserRank(comm, ctypes.byref(me)))
check("count_rank", (cnt.value, me.value), (n, rank))
stream = c_void_p(0)


def dev_alloc(nbytes):
    p = c_void_p()
    ck("cudaMalloc", rt.cudaMalloc(ctypes.byref(p), max(nbytes, 1)))
    return p


def upload(data):
    p = dev_alloc(len(data))
    ck("cudaMemcpy H2D", rt.cudaMemcpy(p, data, len(data), 1))
    return p


def download(p, nbytes):
    b = ctypes.create_string_buffer(nbytes)
    ck("cudaMemcpy D2H", rt.cudaMemcpy(b, p, nbytes, 2))
    return b.raw


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def values(r, k, count, rnd):
    g = random.Random(1000 * r + k)
    return [rnd(g.uniform(-100, 100)) for _ in range(count)]


def pack(fmt, vals):
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def stream_time():
    t = ctypes.c_double()
    ck("simgpu_stream_time", cuda.simgpu_stream_time(stream, ctypes.byref(t)))
    return t.value


if scenario == "data":
    count = 1000
    # All-reduce, float32: every step rounded to float32, in rank order.
    ins = [values(r, 1, count, f32) for r in range(n)]
    inv = f32(1.0 / n)
    def fold(step, first=lambda x: x):
        out = []
        for i in range(count):
            acc = first(ins[0][i])
            for r in range(1, n):
                acc = step(acc, first(ins[r][i]))
            out.append(acc)
        return out

    for name, op, want in [
        ("allreduce_sum_f32", SUM, fold(lambda a, b: f32(a + b))),
        ("allreduce_max_f32", MAX, fold(max)),
        ("allreduce_avg_f32", AVG, fold(lambda a, b: f32(a + b), lambda x: f32(x * inv))),
    ]:
        send = upload(pack("f", ins[rank]))
        recv = dev_alloc(4 * count)
        ck(name, nccl.ncclAllReduce(send, recv, c_size_t(count), FLOAT32, op, comm, stream))
        check(name, download(recv, 4 * count), pack("f", want))

    # In place, float16: each step rounded to float16.
    h = [values(r, 2, count, f16) for r in range(n)]
    want = []
    for i in range(count):
        acc = h[0][i]
        for r in range(1, n):
            acc = f16(acc + h[r][i])
        want.append(acc)
    buf = upload(pack("e", h[rank]))
    ck("allreduce_f16", nccl.ncclAllReduce(buf, buf, c_size_t(count), FLOAT16, SUM, comm, stream))
    check("allreduce_sum_f16_in_place", download(buf, 2 * count), pack("e", want))

    # All-gather: rank r's part at r * count.
    ag = [values(r, 3, 257, f32) for r in range(n)]
    send = upload(pack("f", ag[rank]))
    recv = dev_alloc(4 * 257 * n)
    ck("allgather", nccl.ncclAllGather(send, recv, c_size_t(257), FLOAT32, comm, stream))
    check("allgather", download(recv, 4 * 257 * n), pack("f", [x for r in range(n) for x in ag[r]]))

    # Reduce-scatter: rank r gets the sum of everyone's r-th chunk.
    rc = 100
    rs = [values(r, 4, rc * n, f32) for r in range(n)]
    want = []
    for i in range(rank * rc, (rank + 1) * rc):
        acc = rs[0][i]
        for r in range(1, n):
            acc = f32(acc + rs[r][i])
        want.append(acc)
    send = upload(pack("f", rs[rank]))
    recv = dev_alloc(4 * rc)
    ck("reducescatter", nccl.ncclReduceScatter(send, recv, c_size_t(rc), FLOAT32, SUM, comm, stream))
    check("reducescatter", download(recv, 4 * rc), pack("f", want))

    # Broadcast from the last rank, int32.
    root = n - 1
    bc = [random.Random(77).randrange(-(2**31), 2**31) for _ in range(300)]
    send = upload(pack("i", bc if rank == root else [0] * 300))
    recv = dev_alloc(4 * 300)
    ck("broadcast", nccl.ncclBroadcast(send, recv, c_size_t(300), INT32, root, comm, stream))
    check("broadcast", download(recv, 4 * 300), pack("i", bc))

    # Int64 sum wraps.
    big = [2**62 + rank, -(2**63) + 5 * rank]
    want = [sum(2**62 + r for r in range(n)), sum(-(2**63) + 5 * r for r in range(n))]
    want = [((w + 2**63) % 2**64) - 2**63 for w in want]
    buf = upload(pack("q", big))
    ck("allreduce_i64", nccl.ncclAllReduce(buf, buf, c_size_t(2), INT64, SUM, comm, stream))
    check("allreduce_sum_i64", download(buf, 16), pack("q", want))

    # Send/receive around the ring inside a group (nested, as torch nests them).
    ring = [values(r, 5, 64, f32) for r in range(n)]
    send = upload(pack("f", ring[rank]))
    recv = dev_alloc(4 * 64)
    ck("groupstart", nccl.ncclGroupStart())
    ck("groupstart2", nccl.ncclGroupStart())
    ck("send", nccl.ncclSend(send, c_size_t(64), FLOAT32, (rank + 1) % n, comm, stream))
    ck("groupend2", nccl.ncclGroupEnd())
    ck("recv", nccl.ncclRecv(recv, c_size_t(64), FLOAT32, (rank - 1) % n, comm, stream))
    ck("groupend", nccl.ncclGroupEnd())
    check("sendrecv_ring", download(recv, 4 * 64), pack("f", ring[(rank - 1) % n]))

    # All-to-all: block j of rank r goes to rank j.
    a2 = [values(r, 6, 8 * n, f32) for r in range(n)]
    send = upload(pack("f", a2[rank]))
    recv = dev_alloc(4 * 8 * n)
    ck("alltoall", nccl.ncclAlltoAll(send, recv, c_size_t(8), FLOAT32, comm, stream))
    check("alltoall", download(recv, 4 * 8 * n), pack("f", [x for r in range(n) for x in a2[r][rank * 8:(rank + 1) * 8]]))

    # A bad argument is ncclInvalidArgument, not a crash.
    check("bad_datatype", nccl.ncclAllReduce(send, recv, c_size_t(1), 99, SUM, comm, stream), 4)
    check("bad_root", nccl.ncclBroadcast(send, recv, c_size_t(1), FLOAT32, n, comm, stream), 4)

elif scenario == "timing":
    # Rank 1 is busy for 0.5 s on its links first: everyone's all-reduce waits for it.
    if rank == 1:
        ck("simgpu_submit_link", cuda.simgpu_submit_link(stream, 0.0, 0.5, 0))
    count = 25_000_000  # 100 MB of float32
    send = dev_alloc(4 * count)
    recv = dev_alloc(4 * count)
    before = stream_time()
    ck("allreduce", nccl.ncclAllReduce(send, recv, c_size_t(count), FLOAT32, SUM, comm, stream))
    after = stream_time()
    print("before=%.9f after=%.9f" % (before, after))

elif scenario == "dead":
    if rank == 1:
        os._exit(3)
    buf = dev_alloc(4096)
    t = time.time()
    r = nccl.ncclAllReduce(buf, buf, c_size_t(1024), FLOAT32, SUM, comm, stream)
    print("allreduce", r)
    print("seconds=%.1f" % (time.time() - t))
    print("message", (nccl.ncclGetLastError(None) or b"").decode())
    err = c_int(-1)
    nccl.ncclCommGetAsyncError(comm, ctypes.byref(err))
    print("async", err.value)
    nccl.ncclCommAbort(comm)
    sys.exit(0)

ck("ncclCommDestroy", nccl.ncclCommDestroy(comm))
print("done", "FAILED" if failed else "clean")
