#!/usr/bin/python3
"""Synthetic training sets for bench/data_scale_bench.sh, made from the water example's own
frames (examples/water/data/train: 190 frames of 32 waters, 96 atoms).

  make_scale_sets.py OUT frames N      N frames of 192 atoms (the example's box doubled along its
                                        first cell vector, positions perturbed by 0.02 Å), one
                                        DeePMD system in sets of 10,000 frames, float64
  make_scale_sets.py OUT molecules N   N systems, each a cluster of 1 to 10 waters (3 to 30
                                        atoms, nopbc) cut from the example's frames, 4 frames each

The labels are the example's (forces of the atoms taken, energies scaled by the atom count) plus
noise: valid numbers for timing, not physics. Seeded: the same arguments give the same files.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "examples", "water", "data", "train")


def load_source():
    s = os.path.join(SOURCE, "set.000")
    coord = np.load(os.path.join(s, "coord.npy")).reshape(-1, 96, 3)
    box = np.load(os.path.join(s, "box.npy")).reshape(-1, 3, 3)
    energy = np.load(os.path.join(s, "energy.npy")).reshape(-1)
    force = np.load(os.path.join(s, "force.npy")).reshape(-1, 96, 3)
    types = np.loadtxt(os.path.join(SOURCE, "type.raw"), dtype=int)
    return coord, box, energy, force, types


def write_system(folder, types, sets, nopbc=False):
    os.makedirs(folder, exist_ok=True)
    np.savetxt(os.path.join(folder, "type.raw"), types, fmt="%d")
    with open(os.path.join(folder, "type_map.raw"), "w") as f:
        f.write("O\nH\n")
    if nopbc:
        open(os.path.join(folder, "nopbc"), "w").close()
    for k, arrays in enumerate(sets):
        s = os.path.join(folder, "set.%03d" % k)
        os.makedirs(s, exist_ok=True)
        for name, value in arrays.items():
            np.save(os.path.join(s, name + ".npy"), np.ascontiguousarray(value, dtype=np.float64))


def frames(out, n):
    coord, box, energy, force, types = load_source()
    rng = np.random.default_rng(12345)
    # Atom order: the O of both copies first, then the H (type ids non-decreasing).
    o, h = np.where(types == 0)[0], np.where(types == 1)[0]
    order = np.concatenate([o, o + 96, h, h + 96])
    big_types = np.concatenate([types, types])[order]
    sets = []
    per_set = 10000
    for start in range(0, n, per_set):
        count = min(per_set, n - start)
        base = (np.arange(start, start + count)) % len(coord)
        c = np.concatenate([coord[base], coord[base] + box[base, 0][:, None, :]], axis=1)[:, order]
        c += rng.normal(0.0, 0.02, c.shape)
        b = box[base].copy()
        b[:, 0] *= 2
        f = np.concatenate([force[base], force[base]], axis=1)[:, order] + rng.normal(0.0, 0.01, c.shape)
        e = 2 * energy[base] + rng.normal(0.0, 0.01, count)
        sets.append({"coord": c.reshape(count, -1), "box": b.reshape(count, 9), "energy": e,
                     "force": f.reshape(count, -1)})
    write_system(out, big_types, sets)


def molecules(out, n):
    coord, box, energy, force, types = load_source()
    rng = np.random.default_rng(54321)
    o = np.where(types == 0)[0]
    h = np.where(types == 1)[0]
    for k in range(n):
        waters = int(rng.integers(1, 11))
        nf = 4
        base = rng.integers(0, len(coord), nf)
        chosen = rng.choice(len(o), waters, replace=False)
        cs, fs, es = [], [], []
        for b in base:
            cell = box[b]
            inv = np.linalg.inv(cell)
            x = coord[b]
            # Each chosen O with its two nearest H (minimum image), all unwrapped around the first O.
            atoms_o, atoms_h = [], []
            for m in chosen:
                d = x[h] - x[o[m]]
                d -= np.round(d @ inv) @ cell
                near = np.argsort((d * d).sum(1))[:2]
                atoms_o.append(o[m])
                atoms_h.extend(h[near])
            idx = np.array(atoms_o + atoms_h)
            d = x[idx] - x[idx[0]]
            d -= np.round(d @ inv) @ cell
            cs.append(d + rng.normal(0.0, 0.01, d.shape))
            fs.append(force[b][idx] + rng.normal(0.0, 0.01, d.shape))
            es.append(energy[b] * len(idx) / 96.0 + rng.normal(0.0, 0.01))
        t = np.array([0] * waters + [1] * (2 * waters))
        write_system(os.path.join(out, "mol%05d" % k), t,
                     [{"coord": np.array(cs).reshape(nf, -1), "energy": np.array(es),
                       "force": np.array(fs).reshape(nf, -1)}], nopbc=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[2] not in ("frames", "molecules"):
        sys.exit(__doc__)
    {"frames": frames, "molecules": molecules}[sys.argv[2]](sys.argv[1], int(sys.argv[3]))
