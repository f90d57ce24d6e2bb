"""Writes reference.json (make_fixture.sh): frame 0 of a DeePMD npy water system and, for each
frozen model of this folder, its energy (eV), forces (eV/Å, [N, 3]) and virial (eV, [3, 3],
row-major) on that frame from the model's TorchScript forward in plain PyTorch (tools/mlip_ase.py),
every number to 17 significant digits (Python's repr of a float64).

usage: reference.py <npy system> <tools dir> <fixture dir>
"""
import json
import os
import sys

import numpy as np

system, tools, here = sys.argv[1:4]
sys.path.insert(0, tools)
from mlip_ase import MlipCalculator  # noqa: E402
from ase import Atoms  # noqa: E402

names = open(os.path.join(system, "type_map.raw")).read().split()
types = [int(t) for t in open(os.path.join(system, "type.raw")).read().split()]
coord = np.load(os.path.join(system, "set.000", "coord.npy"))[0].reshape(-1, 3)
box = np.load(os.path.join(system, "set.000", "box.npy"))[0].reshape(3, 3)
atoms = Atoms([names[t] for t in types], positions=coord, cell=box, pbc=True)
out = {"made_by": "mlip 0.1.0, commit 5f1dc93 (make_fixture.sh)",
       "frame": {"symbols": atoms.get_chemical_symbols(), "cell": box.reshape(9).tolist(),
                 "positions": coord.reshape(-1).tolist()},
       "models": {}}
for name in ("se64", "se64c", "eq32"):
    calc = MlipCalculator(os.path.join(here, name + ".pt"))
    a = atoms.copy()
    a.calc = calc
    energy = float(a.get_potential_energy())
    forces = a.get_forces()
    stress = a.get_stress(voigt=False)  # -virial / volume
    virial = -stress * a.get_volume()
    out["models"][name] = {"dtype": str(calc.dtype).replace("torch.", ""), "energy": energy,
                           "forces": forces.reshape(-1).tolist(), "virial": virial.reshape(-1).tolist()}
    print(f"{name}: {calc.dtype}, energy {energy!r} eV")
with open(os.path.join(here, "reference.json"), "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
