#!/usr/bin/python3
"""Training, validation and test sets from 3BPA for bench/finetune_bench.sh.

usage: /usr/bin/python3 bench/make_3bpa_sets.py OUT [--seed 0] [--data ../shared/data/3bpa]
                                                [--drop-key dihedrals ...]

From DATA/train_300K.xyz (500 frames of one 27-atom molecule, 300 K MD), one seeded permutation
of its frames gives, all disjoint:
  OUT/train200.xyz   frames 0-199 of the permutation
  OUT/train50.xyz    the first 50 of train200.xyz (same frames, same order)
  OUT/valid.xyz      the next 50
  OUT/test.xyz       the remaining 250
and
  OUT/test_mixedT.xyz  DATA/train_mixedT.xyz (300, 600 and 1200 K) less every frame whose
                       positions equal those of a frame of train_300K.xyz within 1e-6 Å (any
                       coordinate; same species in the same order)
  OUT/iso_atoms.xyz    DATA/iso_atoms.xyz copied (the isolated C, H, N, O atoms: the reference
                       energies, model.e0s: {isolated: OUT/iso_atoms.xyz})

Frames are written as read, line for line (Lattice, Properties, energy=, pbc="F F F", the
forces column), so energies and forces keep every digit of the source. mlip's extended XYZ
reader takes the source files as they are, their `dihedrals="_JSON [...]"` key included;
--drop-key NAME removes a key from the comment lines all the same. The files are checked by
reading them back with ASE (energy, forces and positions equal the source's). Prints the
number of frames of each set and the isolated-atom energies.
"""
import argparse
import os
import re
import shlex
import shutil
import sys

import numpy as np

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "3bpa")


def read_frames(path):
    """Returns a list of (lines, species, positions): a frame's lines as read (count, comment,
    atoms), its species and its positions (float64 [n, 3])."""
    with open(path) as f:
        lines = f.read().splitlines()
    frames, k = [], 0
    while k < len(lines):
        if not lines[k].strip():
            k += 1
            continue
        n = int(lines[k])
        comment = lines[k + 1]
        props = dict(t.split("=", 1) for t in shlex.split(comment) if "=" in t)["Properties"]
        spec = props.split(":")
        cols, c = {}, 0
        for name, _, width in zip(spec[0::3], spec[1::3], spec[2::3]):
            cols[name] = (c, int(width))
            c += int(width)
        rows = [line.split() for line in lines[k + 2:k + 2 + n]]
        if len(rows) != n:
            sys.exit(f"{path}: line {k + 1}: frame of {n} atoms cut short")
        s0, _ = cols["species"]
        p0, pw = cols["pos"]
        species = [r[s0] for r in rows]
        pos = np.array([[float(x) for x in r[p0:p0 + pw]] for r in rows])
        frames.append((lines[k:k + 2 + n], species, pos))
        k += n + 2
    return frames


def drop_keys(comment, keys):
    for key in keys:
        # key="..." (quoted, possibly with spaces) or key=value
        comment = re.sub(r'(^|\s)' + re.escape(key) + r'=("[^"]*"|\S+)', "", comment)
    return comment.strip()


def write(path, frames, keys):
    with open(path, "w") as f:
        for lines, _, _ in frames:
            f.write(lines[0] + "\n")
            f.write(drop_keys(lines[1], keys) + "\n")
            f.write("\n".join(lines[2:]) + "\n")


def check_with_ase(path, frames):
    """Reads the file back with ASE: energy, forces and positions as in the source lines."""
    import ase.io
    atoms = ase.io.read(path, ":")
    if len(atoms) != len(frames):
        sys.exit(f"{path}: ASE reads {len(atoms)} frames, {len(frames)} written")
    for a, (lines, species, pos) in zip(atoms, frames):
        if a.get_chemical_symbols() != species or np.abs(a.positions - pos).max() > 0:
            sys.exit(f"{path}: ASE reads other positions or species than written")
        energy = float(dict(t.split("=", 1) for t in shlex.split(lines[1]) if "=" in t)["energy"])
        e = a.calc.results.get("energy", a.info.get("energy")) if a.calc is not None else a.info.get("energy")
        if e is None or float(e) != energy:
            sys.exit(f"{path}: ASE reads the energy {e}, the source has {energy}")
        forces = a.calc.results.get("forces") if a.calc is not None else a.arrays.get("forces")
        if forces is None or forces.shape != pos.shape:
            sys.exit(f"{path}: ASE reads no forces")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--drop-key", action="append", default=[], metavar="NAME")
    args = parser.parse_args()

    src = read_frames(os.path.join(args.data, "train_300K.xyz"))
    mixed = read_frames(os.path.join(args.data, "train_mixedT.xyz"))
    if len(src) < 300:
        sys.exit(f"train_300K.xyz: {len(src)} frames, expected 500")

    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(src))
    sets = {
        "train200": order[:200],
        "train50": order[:50],
        "valid": order[200:250],
        "test": order[250:],
    }
    assert not set(sets["train200"]) & set(sets["valid"])
    assert not set(sets["train200"]) & set(sets["test"])
    assert not set(sets["valid"]) & set(sets["test"])
    assert len(set(sets["train200"]) | set(sets["valid"]) | set(sets["test"])) == len(src)

    # mixedT frames that are frames of train_300K (same species order, positions within 1e-6 Å).
    kept, duplicates = [], 0
    src_pos = np.stack([p for _, _, p in src]) if len({len(s) for _, s, _ in src}) == 1 else None
    for frame in mixed:
        _, species, pos = frame
        same = False
        if src_pos is not None and pos.shape == src_pos.shape[1:]:
            close = np.abs(src_pos - pos[None]).max(axis=(1, 2)) <= 1e-6
            same = any(close[j] and src[j][1] == species for j in np.nonzero(close)[0])
        else:
            same = any(s == species and p.shape == pos.shape and np.abs(p - pos).max() <= 1e-6
                       for _, s, p in src)
        if same:
            duplicates += 1
        else:
            kept.append(frame)

    os.makedirs(args.out, exist_ok=True)
    for name, rows in sets.items():
        path = os.path.join(args.out, f"{name}.xyz")
        write(path, [src[j] for j in rows], args.drop_key)
        check_with_ase(path, [src[j] for j in rows])
        print(f"{name}.xyz: {len(rows)} frames")
    path = os.path.join(args.out, "test_mixedT.xyz")
    write(path, kept, args.drop_key)
    check_with_ase(path, kept)
    print(f"test_mixedT.xyz: {len(kept)} frames ({len(mixed)} in train_mixedT.xyz, "
          f"{duplicates} equal to frames of train_300K.xyz removed)")

    iso = os.path.join(args.out, "iso_atoms.xyz")
    shutil.copyfile(os.path.join(args.data, "iso_atoms.xyz"), iso)
    energies = []
    for lines, species, _ in read_frames(iso):
        info = dict(t.split("=", 1) for t in shlex.split(lines[1]) if "=" in t)
        energies.append(f"{species[0]} {float(info['energy']):.10f}")
    print("isolated atoms (iso_atoms.xyz), eV: " + ", ".join(energies))
    print(f"seed {args.seed}; written to {os.path.abspath(args.out)}")


if __name__ == "__main__":
    main()
