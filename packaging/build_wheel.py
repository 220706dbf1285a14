#!/usr/bin/env python3
"""Builds Marmoset's wheel (a zip with a RECORD, PEP 427) from a build tree, with the standard
library only. The wheel holds the Python package `marmoset`:

    marmoset/__init__.py, __main__.py   the `marmoset` console entry: execs bin/marmoset
    marmoset/bin/marmoset               the Rust command
    marmoset/lib/libmarmoset.so         the preload library
    marmoset/lib/simgpu/NAME            the simulated GPU: one file per name a program loads

usage: build_wheel.py BUILD_DIR SIM_DIR VERSION OUT_DIR
SIM_DIR is what `marmoset sim-path` prints in the build tree: every entry there (links to the
built files) becomes a plain file, so the wheel serves whatever names the simulator has.
"""
import base64, hashlib, os, re, stat, subprocess, sys, zipfile

build, sim, version, out = sys.argv[1:5]
name = "marmoset"

ENTRY = '''"""The `marmoset` command: the Rust binary shipped in this package."""
import os, sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "marmoset")
    if not os.access(exe, os.X_OK):
        os.chmod(exe, 0o755)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
'''


def glibc_floor(paths):
    """The newest GLIBC_2.N symbol version the binaries need: the manylinux_2_N tag."""
    newest = 17
    for p in paths:
        text = subprocess.run(["objdump", "-T", p], check=True, capture_output=True, text=True).stdout
        for m in re.finditer(r"GLIBC_2\.(\d+)", text):
            newest = max(newest, int(m.group(1)))
    return newest


def stripped(path):
    """The file without its debug sections (the build keeps line tables; users need none)."""
    tmp = path + ".strip.tmp"
    subprocess.run(["objcopy", "--strip-debug", path, tmp], check=True)
    with open(tmp, "rb") as f:
        data = f.read()
    os.remove(tmp)
    return data


files = []  # (archive name, bytes, executable)
files.append((f"{name}/__init__.py", f'__version__ = "{version}"\n'.encode(), False))
files.append((f"{name}/__main__.py", ENTRY.encode(), False))
exe = os.path.join(build, "marmoset")
files.append((f"{name}/bin/marmoset", stripped(exe), True))
shim = os.path.join(build, "libmarmoset.so")
files.append((f"{name}/lib/libmarmoset.so", stripped(shim), True))
sim_entries = sorted(os.listdir(sim))
if not sim_entries:
    sys.exit(f"build_wheel.py: {sim} is empty")
cache = {}
for entry in sim_entries:
    real = os.path.realpath(os.path.join(sim, entry))
    if real not in cache:
        cache[real] = stripped(real)
    files.append((f"{name}/lib/simgpu/{entry}", cache[real], True))

tag = f"manylinux_2_{glibc_floor([exe, shim] + list(cache))}_x86_64"
dist = f"{name}-{version}.dist-info"
files.append((f"{dist}/METADATA", f"""Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: Get more out of a GPU's memory without touching the training code (LD_PRELOAD for CUDA and cuDNN)
License: Apache-2.0
Requires-Python: >=3.8

Marmoset runs unmodified PyTorch (and other CUDA) programs under a memory policy: micro-batched
convolutions (mu-cuDNN), tensor swapping and recomputation within a budget, traces and reports.
`marmoset run --policy P --memory-limit SIZE -- python train.py`; `marmoset run --sim -- ...`
runs on the simulated GPU this package ships.
""".encode(), False))
files.append((f"{dist}/WHEEL", f"""Wheel-Version: 1.0
Generator: marmoset packaging/build_wheel.py
Root-Is-Purelib: false
Tag: py3-none-{tag}
""".encode(), False))
files.append((f"{dist}/entry_points.txt", b"[console_scripts]\nmarmoset = marmoset.__main__:main\n", False))

record = []
for arc, data, _ in files:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{arc},sha256={digest},{len(data)}")
record.append(f"{dist}/RECORD,,")
files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode(), False))

os.makedirs(out, exist_ok=True)
wheel = os.path.join(out, f"{name}-{version}-py3-none-{tag}.whl")
with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
    for arc, data, executable in files:
        info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
        mode = 0o755 if executable else 0o644
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, data)
print(wheel)
