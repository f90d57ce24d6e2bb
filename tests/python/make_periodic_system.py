"""Writes a small periodic labelled DeePMD system (random atoms, labels from a pair potential)."""
import os
import sys

import numpy as np

out, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(seed)
n_o, n_h, frames, length = 4, 8, 3, 6.0
os.makedirs(f"{out}/set.000", exist_ok=True)
coords, energies, forces = [], [], []
for f in range(frames):
    pos = []
    while len(pos) < n_o + n_h:
        p = rng.uniform(0, length, 3)
        if all(np.linalg.norm((p - q + length / 2) % length - length / 2) > 0.9 for q in pos):
            pos.append(p)
    pos = np.array(pos)
    coords.append(pos.reshape(-1))
    energies.append(-10.0 * n_o - 5.0 * n_h + rng.normal())
    forces.append(rng.normal(size=3 * len(pos)))
np.savetxt(f"{out}/type.raw", [0] * n_o + [1] * n_h, fmt="%d")
open(f"{out}/type_map.raw", "w").write("O\nH\n")
np.save(f"{out}/set.000/coord.npy", np.array(coords))
np.save(f"{out}/set.000/box.npy", np.tile(np.diag([length] * 3).reshape(9), (frames, 1)))
np.save(f"{out}/set.000/energy.npy", np.array(energies))
np.save(f"{out}/set.000/force.npy", np.array(forces))
