# A gdb script that forces the interleaving behind the rare abort at exit of PyTorch runs,
# "terminate called without an active exception" (torch 2.15 with CPython 3.11; no frame of
# Marmoset or of the simulated GPU takes part):
#
# 1. after backward has returned to Python, torch's autograd device thread (pt_autograd_0) drops
#    the last reference to the finished GraphTask; its at::ThreadLocalState holds a Python object
#    (c10::SafePyObject), whose release takes the GIL (pybind11::gil_scoped_acquire);
# 2. if the main thread has meanwhile finished the script and begun finalizing the interpreter,
#    CPython ends any other thread that takes the GIL with pthread_exit (take_gil ->
#    PyThread_exit_thread);
# 3. the forced unwind of pthread_exit reaches torch's noexcept destructor (~ThreadLocalState)
#    and the C++ runtime calls std::terminate: the message above, SIGABRT, exit status 134.
#
# Normally the device thread takes the GIL within milliseconds, or finds the interpreter already
# finalized (Py_IsInitialized() false) and leaks the object instead; the abort needs the device
# thread to hold the last GraphTask reference, pass that check just before finalization begins
# and take the GIL just after, which a loaded machine makes possible. This script forces that
# interleaving with gdb's scheduler locking (one thread runs at a time):
#
#   LD_LIBRARY_PATH=target/release/simgpu SIMGPU_MODE=shape SIMGPU_PROFILE=h100 \
#     gdb -q -batch -x scripts/torch-exit-race.py --args .venv/bin/python examples/small_cnn.py --steps 1
#
# and ends with the abort and the device thread's stack.
import gdb

gdb.execute("set pagination off")
gdb.execute("set breakpoint pending on")


def frames(limit):
    f, out = gdb.newest_frame(), []
    while f is not None and len(out) < limit:
        out.append(f.name() or "??")
        f = f.older()
    return out


def on_device():
    t = gdb.selected_thread()
    return t is not None and t.name == "pt_autograd_0"


class OnDevice(gdb.Breakpoint):
    def stop(self):
        return on_device()


class TakesGilInThreadLocalState(gdb.Breakpoint):
    """The device thread about to take the GIL inside ~ThreadLocalState (of the GraphTask)."""

    def stop(self):
        return on_device() and any("ThreadLocalState::~ThreadLocalState" in n for n in frames(8))


def alone(thread, what):
    print("=== " + what)
    gdb.execute(f"thread {thread}", to_string=True)
    gdb.execute("continue")


done = OnDevice("torch::autograd::GraphTask::mark_as_completed_and_run_post_processing")
gdb.execute("run")
if not on_device():
    raise SystemExit("no backward completed on the autograd device thread")
dev = gdb.selected_thread().num
done.enabled = False
gdb.execute("set scheduler-locking on")
# After completing, the device thread wakes the main thread (a task on its queue, then notify).
wake = OnDevice("std::condition_variable::notify_one")
alone(dev, "backward's GraphTask completes; the device thread wakes the main thread")
wake.enabled = False
gdb.execute("finish")
finalize = gdb.Breakpoint("Py_FinalizeEx")
alone(1, "the main thread alone: backward returns, the script ends")
finalize.enabled = False
TakesGilInThreadLocalState("PyEval_AcquireThread")
alone(dev, "the device thread drops the last GraphTask reference while Python is initialized")
gdb.Breakpoint("_PyGC_CollectNoFail")  # inside Py_FinalizeEx, after CPython marks it finalizing
alone(1, "it waits for the GIL; the main thread begins finalizing")
alone(dev, "the device thread takes the GIL during finalization")
gdb.execute("bt 20")
gdb.execute("set scheduler-locking off")
gdb.execute("continue")
