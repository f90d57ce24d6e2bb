"""MD speed through the ASE calculator (tools/mlip_ase.py): the frozen model called from Python
once per step, velocity Verlet in ASE, on the same box bench/md_bench.sh gives LAMMPS.

usage: md_ase.py <frozen.pt> <lammps data file of the example box> <nx> <ny> <nz> <steps> <tools dir>
Prints one line: `ase <atoms> <steps> <seconds per step>`.
"""
import sys
import time

import numpy as np
from ase import Atoms, units
from ase.md.verlet import VelocityVerlet
from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

model, data, nx, ny, nz, steps, tools = sys.argv[1:8]
nx, ny, nz, steps = int(nx), int(ny), int(nz), int(steps)
sys.path.insert(0, tools)
from mlip_ase import MlipCalculator  # noqa: E402


def read_data(path):
    """The box and atoms of a LAMMPS data file as bench/md_bench.sh writes it (orthogonal box)."""
    lines = open(path).read().splitlines()
    lo_hi = {}
    for l in lines:
        parts = l.split()
        if len(parts) == 4 and parts[2].endswith("lo"):
            lo_hi[parts[2][0]] = float(parts[1]) - float(parts[0])
    k = next(i for i, l in enumerate(lines) if l.startswith("Atoms"))
    masses_at = next(i for i, l in enumerate(lines) if l.startswith("Masses"))
    rows = [l.split() for l in lines[k + 2:] if l.strip()]
    type_names = {1: "O", 2: "H"}
    del masses_at
    symbols = [type_names[int(r[1])] for r in rows]
    pos = np.array([[float(v) for v in r[2:5]] for r in rows])
    return Atoms(symbols, positions=pos, cell=np.diag([lo_hi["x"], lo_hi["y"], lo_hi["z"]]), pbc=True)


atoms = read_data(data).repeat((nx, ny, nz))
atoms.calc = MlipCalculator(model)
MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=np.random.default_rng(1))
dyn = VelocityVerlet(atoms, 0.5 * units.fs)
dyn.run(1)  # warm-up: TorchScript's first calls optimise the graph
start = time.perf_counter()
dyn.run(steps)
elapsed = time.perf_counter() - start
print(f"ase {len(atoms)} {steps} {elapsed / steps:.6f}")
