"""ctest (docs/data.md "Files that change during training"): through the real CLI, a training that
streams its frames from disk (training.cache_mb: 0, so every step reads its frame again) stops
when a training file is changed under it --
  * replaced by a file of the same shape with other values,
  * replaced by a file with more frames,
  * replaced by a FIFO (which no one writes: a read that waited on it would hang the run; here
    the frames are made by a worker thread, data_workers: 1);
each time with exit 1 and a message naming the file, the frame and what changed, before the run
could finish; the newest checkpoint written before the error loads and tests (`mlip test`).
usage: check_streamed_changes.py <mlip> <examples/water/data> <work dir>"""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_util import LEAKS, expect_success, fail, ok, run, small_input

mlip, data, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

STEPS = 1000000  # far more than any case runs: each must end by the error
SAVE_FREQ = 10


def lcurve_step(folder):
    """The last step in folder/lcurve.out (0 before its first line)."""
    try:
        lines = [l for l in open(os.path.join(folder, "lcurve.out")) if l.strip() and not l.startswith("#")]
        return int(lines[-1].split()[0]) if lines else 0
    except (OSError, ValueError, IndexError):
        return 0


def checkpoints(folder):
    """The steps of the checkpoints in folder, ascending."""
    steps = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        m = re.fullmatch(r"model\.ckpt-(\d+)\.pt", name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def write_frames(path, frames, shift):
    """Writes coord.npy of the example's shape with `frames` frames, values shifted by `shift` Å
    (float64, C order, as numpy writes it)."""
    subprocess.run([sys.executable, "-c",
                    "import sys, numpy as np; a = np.load(sys.argv[1]); n = int(sys.argv[3]); "
                    "b = np.resize(a, (n, a.shape[1])) + float(sys.argv[4]); np.save(sys.argv[2], b)",
                    path, path + ".new.npy", str(frames), str(shift)], check=True)
    return path + ".new.npy"


def case(name, change, needles, workers=0):
    """Starts a streamed training on a fresh copy of the data, waits for its progress, applies
    `change` to the copy's train/set.000/coord.npy, and checks how the run ends."""
    copy = os.path.abspath(f"{name}_data")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data, copy)
    out = f"{name}_run"
    small_input(f"{name}.yaml", copy, steps=STEPS, save_freq=SAVE_FREQ, disp_freq=1,
                extra_training="  cache_mb: 0\n")
    text = open(f"{name}.yaml").read().replace("data_workers: 0", f"data_workers: {workers}")
    open(f"{name}.yaml", "w").write(text)
    err_path = f"{name}.err"
    with open(err_path, "w") as err_file:
        p = subprocess.Popen([mlip, "train", f"{name}.yaml", "-o", out], stdout=subprocess.DEVNULL, stderr=err_file)
        # Wait until training runs and one checkpoint is written; then change the file.
        deadline = time.time() + 300
        while p.poll() is None and not (lcurve_step(out) >= SAVE_FREQ + 2 and checkpoints(out)):
            if time.time() > deadline:
                p.kill()
                fail(f"{name}: the training showed no progress in 300 s")
            time.sleep(0.05)
        if p.poll() is not None:
            fail(f"{name}: the training ended (exit {p.returncode}) before the file was changed:\n" +
                 open(err_path).read())
        coord = os.path.join(copy, "train", "set.000", "coord.npy")
        step_at_change = lcurve_step(out)
        change(coord)
        try:
            p.wait(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            fail(f"{name}: the training went on for 240 s after {coord} was changed (hung, or read on)")
    err = open(err_path).read()
    if p.returncode != 1:
        fail(f"{name}: expected exit 1 after the change, got {p.returncode}\nstderr: {err[-3000:]}")
    for needle in [coord] + needles:
        if needle not in err:
            fail(f"{name}: the message lacks {needle!r}:\n{err}")
    if not re.search(r": frame \d+ \(row \d+ of " + re.escape(os.path.join(copy, "train", "set.000")) + r"\)", err):
        fail(f"{name}: the message names no frame and row:\n{err}")
    for leak in LEAKS:
        if leak in err:
            fail(f"{name}: the output shows {leak!r}:\n{err}")
    last = lcurve_step(out)
    if last >= STEPS:
        fail(f"{name}: the training finished instead of stopping at the change")
    # The newest checkpoint (written before the change, or after it by a step that read no changed
    # frame) is whole: it loads and tests.
    steps = checkpoints(out)
    if not steps:
        fail(f"{name}: no checkpoint was written")
    newest = os.path.join(out, f"model.ckpt-{steps[-1]}.pt")
    expect_success(run(mlip, "test", "-m", newest, "-s", os.path.join(data, "valid"), "-n", "2"),
                   f"{name}: mlip test on the newest checkpoint {newest}")
    ok(f"{name}: changed at step {step_at_change}, stopped at step {last} with exit 1: "
       f"{err.strip().splitlines()[-1][:400]}; {newest} tests")


def same_shape(coord):
    os.replace(write_frames(coord, 190, 0.01), coord)


def more_frames(coord):
    os.replace(write_frames(coord, 200, 0.0), coord)


def fifo(coord):
    # Made beside it and renamed over it: one atomic step, so that a read in between cannot find
    # the file missing instead (a removal then mkfifo left that gap, and a run once fell into it).
    os.mkfifo(coord + ".fifo")
    os.replace(coord + ".fifo", coord)


case("same_shape", same_shape, ["changed since it was opened at start (replaced by another file",
                                 "data files must not change during a run"])
case("more_frames", more_frames, ["changed since it was opened at start (", "size 437888 -> 460928 bytes"])
case("fifo", fifo, ["changed since it was opened at start (now a FIFO (named pipe), was a regular file)"], workers=1)
print("ok: every change to a streamed training file stops the run with its name")
