"""A compressed se_e2_a model (mlip compress) in LAMMPS (docs/lammps.md "Compressed models"):
its energy and forces against the model it was made from on the water frame (float64: within
1e-7 eV/atom and 1e-5 eV/Å, the default grid); and a model compressed for pairs no closer than
1.2 Å without a coarse part, whose O-H bonds lie beyond its tables: pair_style mlip warns every
-f steps and sums them up at the end, and the energies still equal the uncompressed model's (the
pairs beyond the tables go through the exact nets).

usage: check_compressed.py <mlip> <frozen.pt> <compressed.pt> <narrow.pt> <water npy system> <work dir>
"""
import os
import re
import sys

import numpy as np

from lammps_util import read_dump, read_thermo, run_mlip_lammps, water_frame, write_data

mlip, plain, compressed, narrow, water, work = sys.argv[1:7]
atoms = water_frame(water)
n = len(atoms)


def run(model, name, steps=0):
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    write_data(atoms, os.path.join(folder, "conf.data"), ["O", "H"])
    script = f"""units metal
atom_style atomic
boundary p p p
read_data conf.data
pair_style mlip {os.path.abspath(model)}
pair_coeff * * O H
thermo_style custom step pe
thermo_modify format float %.15g
dump d all custom 1000 dump.txt id type x y z fx fy fz
dump_modify d format float %.15g
velocity all create 300.0 87287 loop geom
timestep 0.0005
fix nve all nve
run {steps}
"""
    run_mlip_lammps(mlip, folder, script, threads=2)
    log = open(os.path.join(folder, "log.lammps")).read()
    if steps > 0:  # the count of pairs beyond the tables is what is looked at
        return None, None, log
    return read_thermo(os.path.join(folder, "log.lammps"))["PotEng"][0], read_dump(os.path.join(folder, "dump.txt")), log


failed = False
e_plain, d_plain, _ = run(plain, "plain")
for model, name in ((compressed, "compressed"), (narrow, "narrow")):
    e, d, log = run(model, name)
    de = abs(e - e_plain) / n
    df = max(np.abs(d[c] - d_plain[c]).max() for c in ("fx", "fy", "fz"))
    print(f"{name}: |dE|/N {de:.2e} eV/atom, max |dF| {df:.2e} eV/Å against {os.path.basename(plain)}")
    if not (de <= 1e-7 and df <= 1e-5):
        print(f"FAILED: {name} differs from the uncompressed model beyond 1e-7 eV/atom / 1e-5 eV/Å")
        failed = True
    total = re.findall(r"pair_style mlip: (\d+) pair\(s\) beyond the compressed model's tables over the run", log)
    if not total:
        print(f"FAILED: {name}: no end-of-run count of the pairs beyond the tables in log.lammps")
        failed = True
    elif (int(total[-1]) > 0) != (name == "narrow"):
        print(f"FAILED: {name}: {total[-1]} pairs beyond the tables over the run")
        failed = True

# The narrow model over 20 steps, -f 10: a warning at steps 10 and 20 (counts over the steps since
# the last one), and the sum at the end.
_, _, log = run(narrow, "narrow-run", steps=20)
warnings = re.findall(r"WARNING: pair_style mlip: steps (\d+)-(\d+): (\d+) pair\(s\) beyond", log)
print(f"narrow, 20 steps: warnings {warnings}")
if [(int(a), int(b)) for a, b, _ in warnings] != [(0, 10), (11, 20)] or any(int(c) == 0 for _, _, c in warnings):
    print("FAILED: expected a warning with a count at steps 10 (for 0-10) and 20 (for 11-20)")
    failed = True
total = re.findall(r"pair_style mlip: (\d+) pair\(s\) beyond the compressed model's tables over the run", log)
if not total or int(total[-1]) != sum(int(c) for _, _, c in warnings):
    print(f"FAILED: the end-of-run total {total} is not the sum of the warnings' counts")
    failed = True
sys.exit(1 if failed else 0)
