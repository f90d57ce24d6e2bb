"""The active-learning example at a small size, as the test suite runs it (README.md "Checked by
the tests"): run.sh with a few training and MD steps, then its numbers:

- the committee's four members were trained and differ (max_devi_f > 0 at every output step);
- LAMMPS' model_devi.out has the steps 0, 10, ..., N and equals `mlip model-devi` on the
  dumped frames at the printed precision (6 digits after the point; float64 models);
- `--select LO HI` (levels placed inside the file's range, so that every class is non-empty
  where the data allows) counts what numpy counts on LAMMPS' file, and writes that many frames.

usage: check_example.py <mlip> <work dir>
"""
import os
import re
import subprocess
import sys

import numpy as np

mlip, work = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
TRAIN_STEPS, MD_STEPS, EVERY = 20, 60, 10
subprocess.run(["bash", os.path.join(here, "run.sh"), "--mlip", mlip, "--out", work, "--train-steps",
                str(TRAIN_STEPS), "--md-steps", str(MD_STEPS)], check=True)
failed = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failed.append(message)


def table(path):
    return np.array([[float(v) for v in line.split()] for line in open(path) if line.strip() and line[0] != "#"])


md = table(os.path.join(work, "md", "model_devi.out"))
frames = table(os.path.join(work, "model_devi.out"))
check(md.shape == (MD_STEPS // EVERY + 1, 7), f"md/model_devi.out: {md.shape[0]} rows of 7 columns")
check(list(md[:, 0]) == list(range(0, MD_STEPS + 1, EVERY)), f"md/model_devi.out's steps: {list(md[:, 0])}")
check(bool(np.all(md[:, 4] > 0)), f"the four members disagree: max_devi_f {md[:, 4]}")
same = frames.shape == (md.shape[0], 8) and np.allclose(frames[:, :7], md, rtol=1.5e-6, atol=0)
check(same, "LAMMPS' model_devi.out equals mlip model-devi on the dumped frames (1.5e-6 relative)")
# Levels inside the range: below the second-smallest max_devi_f, within up to the largest.
f = np.sort(md[:, 4])
lo, hi = (f[0] + f[1]) / 2, (f[-2] + f[-1]) / 2
candidates = os.path.join(work, "selected.extxyz")
proc = subprocess.run([mlip, "model-devi", "-m", *[os.path.join(work, "models", f"model_{k}.pt") for k in range(4)],
                       "-s", os.path.join(work, "md", "traj.dump"), "-f", str(EVERY), "-o",
                       os.path.join(work, "selected.out"), "--select", f"{lo:.17g}", f"{hi:.17g}", "--candidates", candidates],
                      capture_output=True, text=True, check=True)
printed = re.search(r"below \S+: (\d+) frame\(s\); in \[\S+, \S+\): (\d+), written to \S+; at or above \S+: (\d+)",
                    proc.stdout)
expected = (int(np.sum(md[:, 4] < lo)), int(np.sum((md[:, 4] >= lo) & (md[:, 4] < hi))), int(np.sum(md[:, 4] >= hi)))
check(printed is not None and tuple(int(g) for g in printed.groups()) == expected,
      f"--select {lo:.4g} {hi:.4g}: printed {printed.groups() if printed else proc.stdout!r}, numpy {expected}")
written = sum(1 for line in open(candidates) if line.startswith("Lattice=") or "Lattice=" in line)
check(written == expected[1], f"candidates: {written} frame(s) written, {expected[1]} selected")
if failed:
    print("FAILED:\n" + "\n".join(failed))
    sys.exit(1)
