"""A committee in LAMMPS (docs/lammps.md "A committee of models"): `pair_style mlip m0.pt m1.pt
... out_freq 5 out_file md.out` writes, for the frames LAMMPS dumps at the same steps, what
`mlip model-devi` computes from them (every column at the printed precision: 6 significant
digits, float64 models), `-np 2` writes the file `-np 1` writes, and the equivariant model's
features exchanged between ranks work for every member.

usage: check_committee.py <mlip> <models dir> <water npy system> <work dir>
"""
import os
import subprocess
import sys

import numpy as np

from lammps_util import run_mlip_lammps, water_frame, write_data

mlip, models, water, work = sys.argv[1:5]
models = os.path.abspath(models)
names = ["O", "H"]
STEPS, EVERY = 20, 5
os.makedirs(work, exist_ok=True)
write_data(water_frame(water), os.path.join(work, "conf.data"), names)


def md(name, members, keywords, ranks):
    """20 NVE steps from 600 K with the committee; returns the folder (md.out, traj.dump)."""
    folder = os.path.join(work, f"{name}-np{ranks}")
    os.makedirs(folder, exist_ok=True)
    paths = " ".join(os.path.join(models, m) for m in members)
    script = f"""units metal
atom_style atomic
boundary p p p
read_data {os.path.join(work, 'conf.data')}
pair_style mlip {paths} out_freq {EVERY} out_file md.out {keywords}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
velocity all create 600.0 4928459 loop geom
timestep 0.0005
fix nve all nve
dump frames all custom {EVERY} traj.dump id element x y z
dump_modify frames element {' '.join(names)} sort id format float %.17g
run {STEPS}
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    return folder


def rows(path):
    """The numbers of a model_devi.out file: one array per row."""
    return [np.array([float(v) for v in line.split()]) for line in open(path) if line.strip() and line[0] != "#"]


def same_at_printed_precision(a, b, digits_tolerance):
    # %19.6e keeps 7 significant digits: both round the same value to within one unit of the 7th.
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.all(np.abs(a - b) <= digits_tolerance * scale + 1e-300)


failed = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message)
    if not condition:
        failed.append(message)


# (name, members, pair_style keywords, model-devi options, ranks compared, tolerance)
cases = [
    ("se_e2_a", ["se64.pt", "nve.pt"], "atomic", ["--atomic"], True, 1.5e-6),
    ("se_e2_a-relative", ["se64.pt", "nve.pt"], "atomic relative 1.0 relative_v 0.5",
     ["--atomic", "--relative", "1.0", "--relative_v", "0.5"], False, 1.5e-6),
    ("equivariant", ["eq.pt", "eq2.pt"], "atomic", ["--atomic"], True, 1.5e-6),
    # A float32 member: its forces are good to float32's precision, and so are the deviations.
    ("mixed-precision", ["se64.pt", "se32.pt", "nve.pt"], "", [], False, 1e-4),
]
for name, members, keywords, options, compare_ranks, tolerance in cases:
    one = md(name, members, keywords, 1)
    md_rows = rows(os.path.join(one, "md.out"))
    header = open(os.path.join(one, "md.out")).readline()
    check(header.split()[:8] == ["#", "step", "max_devi_v", "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f",
                                 "avg_devi_f"], f"{name}: md.out's header: {header.strip()[:80]}")
    check([int(r[0]) for r in md_rows] == list(range(0, STEPS + 1, EVERY)),
          f"{name}: md.out has the steps 0, {EVERY}, ..., {STEPS}: {[int(r[0]) for r in md_rows]}")
    check(all(len(r) == (7 + 96 if "atomic" in keywords else 7) for r in md_rows),
          f"{name}: 7 columns (+ 96 atoms with atomic): {sorted(set(len(r) for r in md_rows))}")
    check(all(r[4] > 0 for r in md_rows), f"{name}: the members disagree (max_devi_f > 0)")
    out = os.path.join(one, "frames.out")
    cmd = [mlip, "model-devi", "-m", *[os.path.join(models, m) for m in members], "-s",
           os.path.join(one, "traj.dump"), "-f", str(EVERY), "-o", out, *options]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    check(proc.returncode == 0, f"{name}: mlip model-devi on the dump ({proc.stderr.strip()[-300:]})")
    if proc.returncode == 0:
        frame_rows = rows(out)
        check(len(frame_rows) == len(md_rows), f"{name}: model-devi has as many rows ({len(frame_rows)})")
        worst = 0.0
        ok = len(frame_rows) == len(md_rows)
        for m, f in zip(md_rows, frame_rows):
            # model-devi's rows have devi_e after the six deviations; LAMMPS' do not.
            f = np.concatenate([f[:7], f[8:]])
            ok = ok and len(f) == len(m) and m[0] == f[0] and same_at_printed_precision(m[1:], f[1:], tolerance)
            if len(f) == len(m):
                worst = max(worst, float(np.max(np.abs(m[1:] - f[1:]) / np.maximum(np.abs(m[1:]), 1e-300))))
        check(ok, f"{name}: md.out equals model-devi on the dumped frames (largest relative difference {worst:.1e},"
                  f" allowed {tolerance:g})")
    if compare_ranks:
        two = md(name, members, keywords, 2)
        a, b = open(os.path.join(one, "md.out")).read(), open(os.path.join(two, "md.out")).read()
        check(a == b, f"{name}: -np 2 writes the file -np 1 writes ({len(a)} bytes)")
        log = open(os.path.join(two, "log.lammps")).read()
        check("the committee's other 1 model(s) on 5 output step(s)" in log,
              f"{name}: the other member ran on the 5 output steps only")

if failed:
    print("FAILED:\n" + "\n".join(failed))
    sys.exit(1)
