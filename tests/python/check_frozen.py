"""Checks a frozen mlip model from Python (Debian's PyTorch), independently of mlip:

1. torch.jit.load works and the docs/deploy.md metadata is there;
2. energies and forces from an independent brute-force neighbour list (numpy, explicit
   images) equal the predictions `mlip test -d` wrote (1e-10 relative);
3. the ASE calculator (tools/mlip_ase.py) gives the same numbers, and its forces equal
   -dE/dx by central differences.

usage: check_frozen.py <model.pt> <system folder> <detail prefix> <tools folder>
"""
import itertools
import sys

import numpy as np
import torch

model_path, system, detail, tools = sys.argv[1:5]
sys.path.insert(0, tools)

extra = {k: "" for k in ["r_max", "type_names", "num_types", "model_dtype", "model_type", "mlip_version", "config", "units", "capabilities"]}
model = torch.jit.load(model_path, _extra_files=extra)
meta = {k: v.decode() for k, v in extra.items()}
assert meta["model_type"] in ("se_e2_a", "equivariant"), meta
assert meta["units"] == "eV Angstrom", meta
assert meta["num_types"] == "2" and meta["type_names"] == "O H", meta
r_max = float(meta["r_max"])
# What MD reads (docs/deploy.md "Capabilities"): it agrees with the other metadata.
caps = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in meta["capabilities"].splitlines() if line)
assert caps["model_type"] == meta["model_type"] and caps["dtype"] == meta["model_dtype"], caps
assert caps["type_map"] == meta["type_names"] and abs(float(caps["cutoff"]) - r_max) < 1e-5, caps
assert int(caps["message_layers"]) >= 1 and "cpu" in caps["devices"].split(), caps

types = np.loadtxt(f"{system}/type.raw", dtype=np.int64).reshape(-1)
coord = np.load(f"{system}/set.000/coord.npy").reshape(-1, len(types), 3)
box = np.load(f"{system}/set.000/box.npy").reshape(-1, 3, 3)
pred_e = np.loadtxt(f"{detail}.e.out")[:, 1]
pred_f = np.loadtxt(f"{detail}.f.out")[:, 3:].reshape(len(coord), len(types), 3)


def brute_force_edges(pos, cell):
    heights = abs(np.linalg.det(cell)) / np.linalg.norm(np.cross(cell[[1, 2, 0]], cell[[2, 0, 1]]), axis=1)
    reach = [int(np.ceil(r_max / h)) + 1 for h in heights]
    edges, shifts = [], []
    for s in itertools.product(*[range(-r, r + 1) for r in reach]):
        d = pos[None, :, :] - pos[:, None, :] + np.array(s) @ cell
        r = np.linalg.norm(d, axis=2)
        i, j = np.nonzero(r < r_max)
        keep = ~((i == j) & (np.array(s) == 0).all())
        edges.append(np.stack([i[keep], j[keep]]))
        shifts.append(np.tile(np.array(s, dtype=np.float64), (int(keep.sum()), 1)))
    return np.concatenate(edges, axis=1), np.concatenate(shifts)


for f in range(len(coord)):
    edge_index, shift = brute_force_edges(coord[f], box[f])
    out = model({"pos": torch.tensor(coord[f]), "atom_types": torch.tensor(types),
                 "edge_index": torch.tensor(edge_index), "cell": torch.tensor(box[f]),
                 "edge_cell_shift": torch.tensor(shift)})
    e = out["total_energy"].item()
    forces = out["forces"].numpy()
    assert abs(e - pred_e[f]) <= 1e-10 * abs(e), (f, e, pred_e[f])
    assert np.abs(forces - pred_f[f]).max() <= 1e-10 * max(1.0, np.abs(forces).max()), f
    assert out["atomic_energy"].shape == (len(types), 1) and out["virial"].shape == (1, 3, 3)
print(f"python: {len(coord)} frames of {system}: energies and forces equal mlip test's")

from ase import Atoms  # noqa: E402
from mlip_ase import MlipCalculator  # noqa: E402

names = meta["type_names"].split()
atoms = Atoms([names[t] for t in types], positions=coord[0], cell=box[0], pbc=True)
atoms.calc = MlipCalculator(model_path)
e0 = atoms.get_potential_energy()
assert abs(e0 - pred_e[0]) <= 1e-10 * abs(e0), (e0, pred_e[0])
forces = atoms.get_forces()
assert np.abs(forces - pred_f[0]).max() <= 1e-9, np.abs(forces - pred_f[0]).max()
h = 1e-5
for a, k in [(0, 0), (3, 1), (len(types) - 1, 2)]:
    p = atoms.positions.copy()
    p[a, k] += h
    atoms.positions = p
    ep = atoms.get_potential_energy()
    p[a, k] -= 2 * h
    atoms.positions = p
    em = atoms.get_potential_energy()
    p[a, k] += h
    atoms.positions = p
    fd = -(ep - em) / (2 * h)
    assert abs(fd - forces[a, k]) <= 1e-6 * max(1.0, abs(fd)), (a, k, fd, forces[a, k])
stress = atoms.get_stress()
assert stress.shape == (6,) and np.isfinite(stress).all()
print("python: ASE calculator agrees, forces = -dE/dx by finite differences")
