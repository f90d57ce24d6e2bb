#!/usr/bin/env python3
"""Converts a CP2K MD trajectory (XYZ print keys) to a DeePMD npy system.

Reads, for a CP2K run with PROJECT name P (as water_xtb_md.inp writes them):
  P-pos-1.xyz    positions in Å; comment line "i = <step>, time = <fs>, E = <Hartree>"
  P-frc-1.xyz    forces in Hartree/Bohr; same comment line
  P-1.cell       the cell per step, Å (MOTION/PRINT/CELL); or give --cell L for a fixed cubic box
  P-stress.out   optional: FORCE_EVAL/PRINT/STRESS_TENSOR blocks "Analytical stress tensor [GPa]",
                 one per written frame, in the order of the frames (the file has no step numbers)
Frames are matched by step index; frames before --skip-fs femtoseconds are dropped.

Writes DIR/type.raw, DIR/type_map.raw, DIR/set.000/{coord,box,energy,force[,virial]}.npy:
  coord [nf, 3N] Å, box [nf, 9] Å, energy [nf] eV, force [nf, 3N] eV/Å, virial [nf, 9] eV,
all float64, atoms in the order of the trajectory.

Units: 1 Hartree = 27.211386245988 eV; 1 Hartree/Bohr = 51.42208619083232 eV/Å;
1 eV/Å^3 = 160.21766208 GPa. CP2K's printed "stress tensor" is the pressure-like tensor
P = -(1/V) dE/d(strain) (positive when compressed; its 1/3 trace is the pressure), so the
DeePMD virial W = -dE/d(strain) = P * V. (In the "stress = +(1/V) dE/d(strain)" convention of ASE
and extxyz this is the usual virial = -stress * V.) The sign was checked against a finite
difference of the energy under a uniform strain of the box (see README.md).

usage: cp2k_to_deepmd.py --project PATH/P --out DIR [--skip-fs 50] [--cell L] [--no-virial]
"""
import argparse
import os
import re
import sys

import numpy as np

HARTREE_EV = 27.211386245988
HARTREE_BOHR_EV_A = 51.42208619083232
EV_A3_GPA = 160.21766208

COMMENT = re.compile(r"i\s*=\s*(-?\d+)\s*,\s*time\s*=\s*([-+0-9.eEdD]+)\s*,\s*E\s*=\s*([-+0-9.eEdD]+)")


def read_xyz_frames(path):
    """Returns {step: (time_fs, energy_hartree, symbols, array [N,3])} in file order."""
    frames = {}
    with open(path) as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        n = int(lines[i].split()[0])
        m = COMMENT.search(lines[i + 1])
        if not m:
            raise SystemExit("%s:%d: comment line without 'i = ..., time = ..., E = ...': %r"
                             % (path, i + 2, lines[i + 1]))
        step, time, energy = int(m.group(1)), float(m.group(2)), float(m.group(3).replace("D", "E"))
        block = lines[i + 2:i + 2 + n]
        if len(block) != n:
            raise SystemExit("%s: frame of step %d is truncated" % (path, step))
        symbols = [b.split()[0] for b in block]
        xyz = np.array([[float(v) for v in b.split()[1:4]] for b in block], dtype=np.float64)
        if step in frames:  # a restarted run may repeat a step: keep the last
            print("warning: %s: step %d appears twice; keeping the last" % (path, step), file=sys.stderr)
        frames[step] = (time, energy, symbols, xyz)
        i += 2 + n
    return frames


def read_cell_file(path):
    """CP2K MOTION/PRINT/CELL file: step time Ax Ay Az Bx By Bz Cx Cy Cz volume."""
    cells = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            v = line.split()
            cells[int(v[0])] = np.array([float(x) for x in v[2:11]], dtype=np.float64)
    return cells


def read_stress_blocks(path):
    """FORCE_EVAL/PRINT/STRESS_TENSOR output: the 3x3 'Analytical stress tensor [GPa]' blocks."""
    blocks = []
    with open(path) as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if "stress tensor [GPa]" in line and "Eigenvectors" not in line:
            rows = []
            for r in lines[i + 2:i + 5]:
                v = r.split()
                rows.append([float(x) for x in v[-3:]])
            blocks.append(np.array(rows, dtype=np.float64))
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", required=True, help="path prefix of the CP2K output files (PROJECT)")
    ap.add_argument("--out", required=True, help="DeePMD system folder to write")
    ap.add_argument("--skip-fs", type=float, default=50.0,
                    help="drop frames with time < this many fs (equilibration; default 50)")
    ap.add_argument("--cell", type=float, help="edge of a fixed cubic box, Å (default: read PROJECT-1.cell)")
    ap.add_argument("--type-map", default="O,H", help="element order of the types (default O,H)")
    ap.add_argument("--no-virial", action="store_true", help="do not write virial.npy")
    args = ap.parse_args()

    pos = read_xyz_frames(args.project + "-pos-1.xyz")
    frc = read_xyz_frames(args.project + "-frc-1.xyz")
    cells = None
    if args.cell is None:
        cells = read_cell_file(args.project + "-1.cell")
    stress_path = args.project + "-stress.out"
    stress = None
    if not args.no_virial and os.path.exists(stress_path):
        blocks = read_stress_blocks(stress_path)
        if len(blocks) != len(pos):
            raise SystemExit("%s: %d stress blocks but %d position frames: cannot match them "
                             "(use --no-virial)" % (stress_path, len(blocks), len(pos)))
        stress = dict(zip(pos.keys(), blocks))  # in file order: the k-th block is the k-th frame

    type_map = args.type_map.split(",")
    steps = sorted(s for s in pos if pos[s][0] >= args.skip_fs - 1e-9)
    missing = [s for s in steps if s not in frc or (cells is not None and s not in cells)]
    if missing:
        print("warning: %d kept position frames have no forces/cell (steps %s...); dropped"
              % (len(missing), missing[:5]), file=sys.stderr)
        steps = [s for s in steps if s not in missing]
    if not steps:
        raise SystemExit("no frames left after --skip-fs %g" % args.skip_fs)

    symbols = pos[steps[0]][2]
    try:
        types = [type_map.index(s) for s in symbols]
    except ValueError as e:
        raise SystemExit("element not in --type-map %s: %s" % (args.type_map, e))
    nat = len(symbols)

    coord, box, energy, force, virial = [], [], [], [], []
    for s in steps:
        t, e_pos, sym_p, x = pos[s]
        _, e_frc, sym_f, f = frc[s]
        if sym_p != symbols or sym_f != symbols:
            raise SystemExit("step %d: atoms differ from the first kept frame" % s)
        if abs(e_pos - e_frc) > 1e-8:
            raise SystemExit("step %d: energy %.10f in positions but %.10f in forces" % (s, e_pos, e_frc))
        b = cells[s] if cells is not None else np.diag([args.cell] * 3).reshape(9)
        coord.append(x.reshape(-1))
        box.append(b)
        energy.append(e_pos * HARTREE_EV)
        force.append(f.reshape(-1) * HARTREE_BOHR_EV_A)
        if stress is not None:
            volume = abs(np.linalg.det(b.reshape(3, 3)))
            virial.append((stress[s] * volume / EV_A3_GPA).reshape(-1))

    setdir = os.path.join(args.out, "set.000")
    os.makedirs(setdir, exist_ok=True)
    with open(os.path.join(args.out, "type.raw"), "w") as fh:
        fh.write("\n".join(str(t) for t in types) + "\n")
    with open(os.path.join(args.out, "type_map.raw"), "w") as fh:
        fh.write("\n".join(type_map) + "\n")
    np.save(os.path.join(setdir, "coord.npy"), np.array(coord, dtype=np.float64))
    np.save(os.path.join(setdir, "box.npy"), np.array(box, dtype=np.float64))
    np.save(os.path.join(setdir, "energy.npy"), np.array(energy, dtype=np.float64))
    np.save(os.path.join(setdir, "force.npy"), np.array(force, dtype=np.float64))
    vpath = os.path.join(setdir, "virial.npy")
    if virial:
        np.save(vpath, np.array(virial, dtype=np.float64))
    elif os.path.exists(vpath):
        os.remove(vpath)
    print("%s: %d frames (steps %d..%d, %.1f..%.1f fs), %d atoms, virial: %s"
          % (args.out, len(steps), steps[0], steps[-1], pos[steps[0]][0], pos[steps[-1]][0], nat,
             "yes" if virial else "no"))


if __name__ == "__main__":
    main()
