"""Several MPI ranks give the same trajectory as one: 100 NVE steps of the water example with
pair_style mlip under `mpirun -np K`, positions after the run equal those of one rank to 1e-8 Å
(float64).

usage: check_ranks.py <mlip> <frozen.pt> <water npy system> <work dir> <ranks> [<ranks> ...] [-- <pair_style keywords>]
(e.g. `-- exchange no`: the equivariant model with ghosts out to L · r_max instead of features
exchanged between ranks)
"""
import os
import sys

import numpy as np

from lammps_util import read_dump, run_mlip_lammps, water_frame, write_data

mlip, model_path, water, work = sys.argv[1:5]
args = sys.argv[5:]
keywords = " ".join(args[args.index("--") + 1:]) if "--" in args else ""
rank_counts = [int(k) for k in (args[:args.index("--")] if "--" in args else args)]
TOL = 1e-8  # Å
names = ["O", "H"]
atoms = water_frame(water)


def trajectory(ranks):
    folder = os.path.join(work, f"nve-np{ranks}")
    os.makedirs(folder, exist_ok=True)
    write_data(atoms, os.path.join(folder, "conf.data"), names)
    script = f"""units metal
atom_style atomic
boundary p p p
read_data conf.data
pair_style mlip {os.path.abspath(model_path)} {keywords}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
velocity all create 300.0 4928459 loop geom
timestep 0.0005
fix nve all nve
thermo 50
thermo_style custom step pe ke etotal press
thermo_modify format float %.15g
run 100
write_dump all custom final.txt id x y z modify format float %.17g sort id
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    d = read_dump(os.path.join(folder, "final.txt"))
    return np.stack([d["x"], d["y"], d["z"]], 1)


reference = trajectory(1)
failed = False
for k in rank_counts:
    x = trajectory(k)
    diff = np.abs(x - reference).max()
    print(f"{model_path} {keywords}: -np {k} vs -np 1 after 100 steps: max |dx| = {diff:.2e} Å")
    if not diff <= TOL:
        print(f"FAILED: -np {k} differs from -np 1 by {diff:.2e} Å > {TOL:g}")
        failed = True
sys.exit(1 if failed else 0)
