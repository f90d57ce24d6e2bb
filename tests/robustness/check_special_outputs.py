"""ctest (docs/robustness.md "Special files" and "Messages about inputs"), through the real CLI:
  * outputs never replace a device or a FIFO: models, checkpoints and lcurve.out refuse them
    (exit 1, naming the option and path, before any work); --step-times and test -d detail files
    are written into them as streams; /dev/null stays a character device, a FIFO stays a FIFO;
  * `mlip lammps --help` prints mlip's help, other bad `mlip lammps` arguments mlip's message;
  * neighbor-stat with a radius whose neighbour list cannot fit in memory is refused by estimate,
    naming the radius, in seconds, without Kokkos' text;
  * input files that are /dev/zero, a FIFO, a folder or absurdly large are refused naming the
    file, without hanging.
usage: check_special_outputs.py <mlip> <examples/water/data> <work dir>"""
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_util import LEAKS, expect_error, expect_success, fail, ok, small_input

mlip, data, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

# Library text that must not reach the user here, besides robust_util's LEAKS.
RAW = ("Invalid command-line argument", "Traceback", "Kokkos", "std::bad_alloc")


def run(*args, timeout=120):
    """`mlip args...` with a time limit (a hang is a failure); returns (exit code, stdout, stderr, seconds)."""
    start = time.monotonic()
    try:
        p = subprocess.run([mlip, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        fail(f"mlip {' '.join(map(str, args))}: still running after {timeout} s (a hang)")
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def refused(result, *needles, what):
    rc, out, err, _ = result
    expect_error((rc, out, err), *needles, what=what)
    for raw in RAW:
        if raw in out + err:
            fail(f"{what}: the output shows {raw!r}:\n{err}")


def still_char_device(path, what):
    if not stat.S_ISCHR(os.lstat(path).st_mode):
        fail(f"{what}: {path} is no longer a character device")


def still_fifo(path, what):
    if not stat.S_ISFIFO(os.lstat(path).st_mode):
        fail(f"{what}: {path} is no longer a FIFO")


class FifoReader:
    """Reads a FIFO on a thread until its writer closes it (the writer's open waits for a reader)."""

    def __init__(self, path):
        self.path, self.text = path, None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.path) as f:
            self.text = f.read()

    def result(self, what):
        self.thread.join(timeout=60)
        if self.thread.is_alive():
            # Nothing opened the FIFO for writing: unblock the reader, then fail.
            os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            fail(f"{what}: nothing was written into the FIFO {self.path}")
        return self.text


# ---- a trained model, its step times streamed into a FIFO
small_input("input.yaml", data)
os.mkfifo("steps.fifo")
reader = FifoReader("steps.fifo")
rc, out, err, _ = run("train", "input.yaml", "-o", "run", "--step-times", "steps.fifo", timeout=500)
expect_success((rc, out, err), "train --step-times <fifo>")
steps = reader.result("train --step-times <fifo>")
still_fifo("steps.fifo", "train --step-times <fifo>")
lines = [l for l in steps.splitlines() if l and not l.startswith("#")]
if not steps.startswith("# step ms") or len(lines) != 20 or [int(l.split()[0]) for l in lines] != list(range(1, 21)):
    fail("train --step-times <fifo>: expected the header and steps 1..20 through the FIFO, got:\n" + steps[:2000])
if any(".mlip-tmp-" in n for n in os.listdir(".")):
    fail("train --step-times <fifo> left a temporary file: " + str(os.listdir(".")))
ok("train --step-times <fifo>: the 20 step times were streamed through the FIFO, which is still a FIFO")

small_input("tiny.yaml", data, steps=2, save_freq=2, disp_freq=1)
expect_success(run("train", "tiny.yaml", "-o", "tiny", "--step-times", "/dev/null")[:3], "train --step-times /dev/null")
still_char_device("/dev/null", "train --step-times /dev/null")
ok("train --step-times /dev/null: trained, /dev/null is still a character device")

# ---- models, checkpoints and lcurve.out refuse special files, before any work
result = run("freeze", "-c", "run", "-o", "/dev/null")
refused(result, "freeze -o /dev/null: is a character device, not a regular file; mlip writes the frozen model to regular "
        "files only", what="freeze -o /dev/null")
still_char_device("/dev/null", "freeze -o /dev/null")
os.mkfifo("model.fifo")
refused(run("freeze", "-c", "run", "-o", "model.fifo"),
        "freeze -o model.fifo: is a FIFO, not a regular file; mlip writes the frozen model to regular files only",
        what="freeze -o <fifo>")
still_fifo("model.fifo", "freeze -o <fifo>")

os.makedirs("fifo_run")
os.mkfifo("fifo_run/lcurve.out")
result = run("train", "input.yaml", "-o", "fifo_run", timeout=60)
refused(result, "fifo_run/lcurve.out: is a FIFO, not a regular file; mlip writes the learning curve to regular "
        "files only", what="train with lcurve.out a FIFO")
still_fifo("fifo_run/lcurve.out", "train with lcurve.out a FIFO")
if sorted(os.listdir("fifo_run")) != ["lcurve.out"]:
    fail("train with lcurve.out a FIFO wrote into the folder: " + str(os.listdir("fifo_run")))
os.makedirs("dev_run")
os.symlink("/dev/null", "dev_run/checkpoint")
refused(run("train", "input.yaml", "-o", "dev_run", timeout=60),
        "dev_run/checkpoint: is a character device, not a regular file", what="train with 'checkpoint' -> /dev/null")
still_char_device("/dev/null", "train with 'checkpoint' -> /dev/null")
refused(run("train", "input.yaml", "-o", "refused", "--step-times", "run", timeout=60),
        "--step-times run: cannot write the step times (a folder of that name exists", what="train --step-times <folder>")

# ---- test -d: detail files stream into FIFOs and devices
os.mkfifo("detail.f.out")
reader = FifoReader("detail.f.out")
rc, out, err, _ = run("test", "-m", "run", "-s", f"{data}/valid", "-n", "2", "-d", "detail")
expect_success((rc, out, err), "test -d with detail.f.out a FIFO")
forces = reader.result("test -d with detail.f.out a FIFO")
still_fifo("detail.f.out", "test -d with detail.f.out a FIFO")
force_lines = [l for l in forces.splitlines() if l and not l.startswith("#")]
if not forces.startswith("# data_fx") or not force_lines or any(len(l.split()) != 6 for l in force_lines):
    fail("test -d: the forces streamed through the FIFO are not the detail file:\n" + forces[:1000])
if not os.path.isfile("detail.e.out") or any(".mlip-tmp-" in n for n in os.listdir(".")):
    fail("test -d: detail.e.out missing or a temporary file left: " + str(os.listdir(".")))
ok(f"test -d: {len(force_lines)} force lines streamed through detail.f.out (still a FIFO), detail.e.out a file")

# ---- mlip lammps: mlip's help and messages, not LAMMPS' raw text
rc, out, err, _ = run("lammps", "--help", timeout=60)
has_lammps = "built without LAMMPS" not in err
if not has_lammps:
    print("note: this mlip was built without LAMMPS: its help must still come (with exit 1), then the argument checks")
if rc != (0 if has_lammps else 1) or "usage: mlip lammps" not in out or "pair_style mlip" not in out or "-in" not in out:
    fail(f"mlip lammps --help: expected mlip's help (exit 0 with LAMMPS), got {rc}:\n{out}\n{err}")
if "Invalid command-line argument" in out + err:
    fail("mlip lammps --help shows LAMMPS' raw text:\n" + out + err)
ok(f"mlip lammps --help: mlip's help, exit {rc}")
rc, out, err, _ = run("lammps", "--bogus", timeout=60)
if rc != 2 or "mlip: lammps: unknown option '--bogus'" not in err or "usage: mlip lammps" not in err:
    fail(f"mlip lammps --bogus: expected mlip's usage error (exit 2), got {rc}:\n{out}\n{err}")
if any(raw in out + err for raw in RAW):
    fail("mlip lammps --bogus shows a library's text:\n" + out + err)
ok("mlip lammps --bogus: " + err.splitlines()[0])
rc, out, err, _ = run("lammps", "-in", timeout=60)
if rc != 2 or "-in: expected 1 value" not in err:
    fail(f"mlip lammps -in (no file): expected mlip's usage error, got {rc}:\n{err}")
refused(run("lammps", "-in", "/dev/zero", "-log", "none", timeout=60),
        "/dev/zero: cannot read the LAMMPS input script (it is a character device", what="mlip lammps -in /dev/zero")

# ---- neighbor-stat: a radius whose neighbour list cannot fit is refused by estimate
for radius in ("100000", "2000"):
    result = run("neighbor-stat", "-s", f"{data}/train", "-r", radius, timeout=60)
    refused(result, f"-r {radius}: the neighbour list of", "would need about", "Is the radius right",
            what=f"neighbor-stat -r {radius}")
    if result[3] > 30:
        fail(f"neighbor-stat -r {radius}: took {result[3]:.0f} s to refuse (expected an estimate, not an attempt)")
expect_success(run("neighbor-stat", "-s", f"{data}/train", "-r", "6")[:3], "neighbor-stat -r 6")

# ---- inputs that are not regular files, or absurdly large
refused(run("train", "/dev/zero", timeout=60),
        "/dev/zero: cannot read the training input (it is a character device, not a regular file", what="train /dev/zero")
os.mkfifo("input.fifo")
refused(run("train", "input.fifo", timeout=60), "input.fifo: cannot read the training input (it is a FIFO",
        what="train <fifo>")
os.makedirs("input_folder.yaml")
refused(run("train", "input_folder.yaml", timeout=60),
        "input_folder.yaml: cannot read the training input (it is a folder", what="train <folder>")
with open("huge.yaml", "wb") as f:
    f.truncate(200 << 20)  # sparse: takes no disk space
refused(run("train", "huge.yaml", timeout=60), "huge.yaml: cannot read the training input (it is 200.0 MiB",
        "at most 64.0 MiB", what="train <200 MiB file>")
refused(run("test", "-m", "/dev/zero", "-s", f"{data}/valid", timeout=60),
        "/dev/zero: cannot read the model (it is a character device", what="test -m /dev/zero")
refused(run("neighbor-stat", "-s", "input.fifo", timeout=60), "input.fifo: cannot read the system (it is a FIFO",
        what="neighbor-stat -s <fifo>")
refused(run("train", "input.yaml", "-o", "restarted", "--restart", "/dev/zero", timeout=60),
        "/dev/zero: cannot read the checkpoint to restart from", what="train --restart /dev/zero")
os.makedirs("pointer_run")
os.mkfifo("pointer_run/checkpoint")
refused(run("test", "-m", "pointer_run", "-s", f"{data}/valid", timeout=60),
        "pointer_run/checkpoint: cannot read the pointer to the newest checkpoint (it is a FIFO",
        what="test -m <folder whose pointer is a FIFO>")
still_char_device("/dev/null", "the whole test")
print("ok: every special-file case holds")
