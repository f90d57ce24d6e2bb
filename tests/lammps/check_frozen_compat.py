"""The frozen models kept from mlip 0.1.0 (tests/data/frozen_0.1, made before frozen models
carried their inference settings) run in LAMMPS (`mlip lammps`, pair_style mlip) and give the
energy, forces and virial their own TorchScript forward gave in plain PyTorch when they were made
(reference.json), on 1 or more ranks; the compressed one reports its pairs beyond the tables.

usage: check_frozen_compat.py <mlip> <fixture dir> <work dir> [ranks]
"""
import json
import os
import re
import sys

import numpy as np
from ase import Atoms

from lammps_util import NKTV2P, read_dump, read_thermo, run_mlip_lammps, write_data

mlip, fixture, work = sys.argv[1:4]
ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 1
reference = json.load(open(os.path.join(fixture, "reference.json")))
frame = reference["frame"]
atoms = Atoms(frame["symbols"], positions=np.array(frame["positions"]).reshape(-1, 3),
              cell=np.array(frame["cell"]).reshape(3, 3), pbc=True)
cell = atoms.cell.array
if abs(cell[np.triu_indices(3, 1)]).max() > 0 or abs(cell[np.tril_indices(3, -1)]).max() > 0:
    sys.exit("check_frozen_compat.py: the reference frame's cell is not orthorhombic (LAMMPS' data file below assumes it)")


def relative(a, b):
    scale = max(np.abs(b).max(), 1e-300)
    return np.abs(np.asarray(a) - np.asarray(b)).max() / scale


failed = []
for name, ref in reference["models"].items():
    tol = 1e-10 if ref["dtype"] == "float64" else 1e-4
    folder = os.path.join(work, f"{name}-np{ranks}")
    os.makedirs(folder, exist_ok=True)
    names = ["O", "H"]
    write_data(atoms, os.path.join(folder, "conf.data"), names)
    script = f"""units metal
atom_style atomic
boundary p p p
read_data conf.data
pair_style mlip {os.path.abspath(os.path.join(fixture, name + '.pt'))}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
compute vir all pressure NULL virial
thermo_style custom step pe vol c_vir[1] c_vir[2] c_vir[3] c_vir[4] c_vir[5] c_vir[6]
thermo_modify format float %.17g
dump d all custom 1 dump.txt id fx fy fz
dump_modify d format float %.17g sort id
run 0
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    log = open(os.path.join(folder, "log.lammps")).read()
    thermo = read_thermo(os.path.join(folder, "log.lammps"))
    dump = read_dump(os.path.join(folder, "dump.txt"))
    f_lmp = np.stack([dump["fx"], dump["fy"], dump["fz"]], 1)
    f_ref = np.array(ref["forces"]).reshape(-1, 3)
    v_ref = np.array(ref["virial"]).reshape(3, 3)
    v_ref6 = np.array([v_ref[0, 0], v_ref[1, 1], v_ref[2, 2], v_ref[0, 1], v_ref[0, 2], v_ref[1, 2]])
    v_lmp = np.array([thermo[f"c_vir[{k}]"][0] for k in range(1, 7)]) * thermo["Volume"][0] / NKTV2P
    errors = {"energy": abs(thermo["PotEng"][0] - ref["energy"]) / abs(ref["energy"]),
              "forces": relative(f_lmp, f_ref), "virial": relative(v_lmp, v_ref6)}
    print(f"{name}: {ref['dtype']}, {ranks} rank(s), E = {thermo['PotEng'][0]:.12f} eV (reference "
          f"{ref['energy']:.12f}): " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    for k, v in errors.items():
        if not v <= tol:
            failed.append(f"{name}: {k} differs from reference.json by {v:.2e} (relative) > {tol:g}")
    if name.endswith("c") and not re.search(r"pair_style mlip: \d+ pair\(s\) beyond the compressed model's tables "
                                            r"over the run", log):
        failed.append(f"{name}: no end-of-run count of the pairs beyond the tables in log.lammps")
if failed:
    print("FAILED:\n  " + "\n  ".join(failed))
    sys.exit(1)
print("OK: the frozen models of mlip 0.1.0 run in LAMMPS as they did")
