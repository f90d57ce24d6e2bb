#!/usr/bin/env python3
"""Builds a periodic box of water molecules at 1 g/cm^3 from nothing but geometry.

Molecules sit on a lattice (64: simple cubic 4x4x4; 32: the fcc half of it), each with a random
orientation (seeded), redrawn until no two atoms of different molecules are closer than
--min-dist. The result is written as a DeePMD npy system (type.raw, type_map.raw,
set.000/coord.npy, set.000/box.npy) and, with --xyz, as an XYZ file (e.g. for CP2K).

usage: make_box.py --molecules {32,64} --seed S --out DIR [--xyz FILE] [--min-dist 1.7]
"""
import argparse
import math
import os
import random
import struct

AVOGADRO = 6.02214076e23
M_WATER = 18.01528  # g/mol
R_OH, ANGLE_HOH = 0.9572, math.radians(104.52)


def write_npy(path, shape, values):
    """float64 little-endian C-order .npy, without numpy."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }" % (
        ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%dd" % len(values), *values))


def random_rotation(rng):
    """Uniform random rotation matrix from a random unit quaternion."""
    q = [rng.gauss(0, 1) for _ in range(4)]
    n = math.sqrt(sum(x * x for x in q))
    w, x, y, z = (v / n for v in q)
    return [[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]


def build(n_mol, seed, min_dist):
    volume = n_mol * M_WATER / AVOGADRO / 1.0 * 1e24  # Å^3 at 1 g/cm^3
    length = volume ** (1.0 / 3.0)
    sites = [(i, j, k) for i in range(4) for j in range(4) for k in range(4)]
    if n_mol == 32:
        sites = [s for s in sites if sum(s) % 2 == 0]
    elif n_mol != 64:
        raise SystemExit("make_box.py: --molecules: expected 32 or 64, got %d" % n_mol)
    a = length / 4.0
    rng = random.Random(seed)
    # Molecule frame: O at origin, H in the xy plane.
    local = [(0.0, 0.0, 0.0),
             (R_OH * math.cos(ANGLE_HOH / 2), R_OH * math.sin(ANGLE_HOH / 2), 0.0),
             (R_OH * math.cos(ANGLE_HOH / 2), -R_OH * math.sin(ANGLE_HOH / 2), 0.0)]
    oxygens, hydrogens = [], []

    def min_image(d):
        return d - length * round(d / length)

    placed = []  # atoms of accepted molecules
    for (i, j, k) in sites:
        centre = (i * a + 0.25 * a, j * a + 0.25 * a, k * a + 0.25 * a)
        for _attempt in range(1000):
            rot = random_rotation(rng)
            atoms = [tuple(centre[c] + sum(rot[c][m] * p[m] for m in range(3)) for c in range(3)) for p in local]
            ok = all(math.sqrt(sum(min_image(x[c] - y[c]) ** 2 for c in range(3))) >= min_dist
                     for x in atoms for y in placed)
            if ok:
                break
        else:
            raise SystemExit("make_box.py: could not place a molecule without overlaps; lower --min-dist")
        placed.extend(atoms)
        oxygens.append(atoms[0])
        hydrogens.extend(atoms[1:])
    return length, oxygens, hydrogens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--molecules", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--xyz")
    ap.add_argument("--min-dist", type=float, default=1.7)
    args = ap.parse_args()
    length, ox, hy = build(args.molecules, args.seed, args.min_dist)
    atoms = ox + hy
    os.makedirs(os.path.join(args.out, "set.000"), exist_ok=True)
    with open(os.path.join(args.out, "type.raw"), "w") as f:
        f.write("\n".join(["0"] * len(ox) + ["1"] * len(hy)) + "\n")
    with open(os.path.join(args.out, "type_map.raw"), "w") as f:
        f.write("O\nH\n")
    write_npy(os.path.join(args.out, "set.000", "coord.npy"), (1, 3 * len(atoms)), [c for p in atoms for c in p])
    write_npy(os.path.join(args.out, "set.000", "box.npy"), (1, 9), [length, 0, 0, 0, length, 0, 0, 0, length])
    if args.xyz:
        with open(args.xyz, "w") as f:
            f.write("%d\nwater box %.6f A, seed %d\n" % (len(atoms), length, args.seed))
            for sym, p in [("O", p) for p in ox] + [("H", p) for p in hy]:
                f.write("%s %14.8f %14.8f %14.8f\n" % (sym, *p))
    print("wrote %d molecules, box %.4f A, to %s" % (len(ox), length, args.out))


if __name__ == "__main__":
    main()
