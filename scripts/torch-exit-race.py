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
# thread to pass that check just before finalization begins and take the GIL just after, which a
# loaded machine makes possible. This script forces that interleaving with scheduler locking:
#
#   LD_LIBRARY_PATH=target/release/simgpu SIMGPU_MODE=shape SIMGPU_PROFILE=h100 \
#     gdb -q -batch -x scripts/torch-exit-race.py --args .venv/bin/python examples/small_cnn.py --steps 1
#
# It ends with the abort and the device thread's stack, or says the main thread dropped the last
# GraphTask reference itself this time (another race, which the device thread won about one try
# in seven here: then there is nothing to force; run again).
import gdb

gdb.execute("set pagination off")
gdb.execute("set breakpoint pending on")
state = {"dev": None}


def frames(limit):
    f, out = gdb.newest_frame(), []
    while f is not None and len(out) < limit:
        out.append(f.name() or "??")
        f = f.older()
    return out


class DeviceThreadTakesGil(gdb.Breakpoint):
    """The device thread about to take the GIL inside ~ThreadLocalState (of a GraphTask)."""

    def stop(self):
        t = gdb.selected_thread()
        if state["dev"] is not None or t is None or t.name != "pt_autograd_0":
            return False
        if not any("ThreadLocalState::~ThreadLocalState" in n for n in frames(8)):
            return False
        state["dev"] = t.num
        return True


DeviceThreadTakesGil("PyEval_AcquireThread")
gdb.execute("run")
if state["dev"] is None:
    raise SystemExit("the main thread dropped the last GraphTask reference this time: run again")
print(f"=== holding the device thread ({state['dev']}) before it takes the GIL; main runs alone")
gdb.execute("set scheduler-locking on")
gdb.Breakpoint("_PyGC_CollectNoFail")  # inside Py_FinalizeEx, after CPython marks it finalizing
gdb.execute("thread 1")
gdb.execute("continue")
print("=== the interpreter is finalizing; the device thread goes on")
gdb.execute(f"thread {state['dev']}")
gdb.execute("continue")
gdb.execute("bt 20")
gdb.execute("set scheduler-locking off")
gdb.execute("continue")
