#!/usr/bin/env python3
"""Makes examples/ions/data: ions labelled by LAMMPS itself (README.md "The data").

Each frame: 32 cations (+1 e, "Na") and 32 anions (-1 e, "Cl") at random positions in a cubic
cell of edge 11.5-12.5 A, no two closer than 2.3 A. The energy, forces and virial are LAMMPS'
`pair_style lj/cut/coul/long` (Lennard-Jones, sigma 2.5 A, epsilon 0.02 eV, cut at 6 A and
shifted; Coulomb's law split at 6 A) plus `kspace_style ewald 1e-10`, in `units metal`, from the
LAMMPS library that `mlip lammps` runs. Random positions (the latent Ewald summation paper's
"random charges" test) keep every frame far from the screened order of a melt: the forces of
distant ions are large, which is what a model with a 5 A cutoff cannot see.

usage: make_data.py MLIP [OUT_DIR] [--frames N_TRAIN N_VALID N_TEST] [--seed S]
Writes DeePMD npy systems OUT_DIR/train, valid and test (type_map Na Cl; box, coord, energy,
force, virial). Needs numpy.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

NKTV2P = 1.6021765e6  # LAMMPS units metal: bar per eV/A^3
N_EACH = 32
MIN_DIST = 2.3


def random_frame(rng):
    """Positions [64, 3] and the cubic cell edge, no two atoms closer than MIN_DIST (periodic)."""
    edge = rng.uniform(11.5, 12.5)
    while True:
        pos = []
        for _ in range(100000):
            p = rng.uniform(0.0, edge, 3)
            ok = True
            for q in pos:
                d = p - q
                d -= edge * np.round(d / edge)
                if d @ d < MIN_DIST * MIN_DIST:
                    ok = False
                    break
            if ok:
                pos.append(p)
                if len(pos) == 2 * N_EACH:
                    return np.array(pos), edge


def write_data_file(path, pos, edge):
    with open(path, "w") as f:
        f.write("ions (examples/ions/make_data.py)\n\n%d atoms\n2 atom types\n\n" % len(pos))
        f.write("0 %.17g xlo xhi\n0 %.17g ylo yhi\n0 %.17g zlo zhi\n\n" % (edge, edge, edge))
        f.write("Masses\n\n1 22.98977\n2 35.453\n\nAtoms # charge\n\n")
        for i, p in enumerate(pos):
            t = 1 if i < N_EACH else 2
            q = 1.0 if t == 1 else -1.0
            f.write("%d %d %.1f %.17g %.17g %.17g\n" % (i + 1, t, q, p[0], p[1], p[2]))


LAMMPS_INPUT = """label frame
variable i loop {count}
units metal
atom_style charge
boundary p p p
read_data data.$i
pair_style lj/cut/coul/long 6.0
pair_coeff * * 0.02 2.5
pair_modify shift yes
kspace_style ewald 1e-10
compute virial all pressure NULL virial
thermo_style custom step pe c_virial[1] c_virial[2] c_virial[3] c_virial[4] c_virial[5] c_virial[6] vol
thermo_modify format float %.17g
run 0
print "$i $(pe:%.17g) $(c_virial[1]:%.17g) $(c_virial[2]:%.17g) $(c_virial[3]:%.17g) $(c_virial[4]:%.17g) $(c_virial[5]:%.17g) $(c_virial[6]:%.17g) $(vol:%.17g)" append energies.txt screen no
write_dump all custom forces.$i id fx fy fz modify format float %.17g sort id
clear
next i
jump SELF frame
"""


def label(mlip, frames):
    """LAMMPS' energies [n], forces [n, 64, 3] and virials [n, 9] of the frames [(pos, edge)]."""
    with tempfile.TemporaryDirectory() as work:
        for k, (pos, edge) in enumerate(frames):
            write_data_file(os.path.join(work, "data.%d" % (k + 1)), pos, edge)
        with open(os.path.join(work, "in.lmp"), "w") as f:
            f.write(LAMMPS_INPUT.format(count=len(frames)))
        run = subprocess.run([mlip, "lammps", "-in", "in.lmp", "-log", "none", "-screen", "none"], cwd=work,
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("make_data.py: mlip lammps failed:\n" + run.stdout + run.stderr)
        rows = np.loadtxt(os.path.join(work, "energies.txt"), ndmin=2)
        if len(rows) != len(frames):
            sys.exit("make_data.py: LAMMPS labelled %d of %d frames" % (len(rows), len(frames)))
        energies = rows[:, 1]
        virials = np.zeros((len(frames), 9))
        for k in range(len(frames)):
            # pressure (bar) x volume / nktv2p = the virial sum r (x) f, eV; LAMMPS' order xx yy zz xy xz yz.
            xx, yy, zz, xy, xz, yz = rows[k, 2:8] * rows[k, 8] / NKTV2P
            virials[k] = [xx, xy, xz, xy, yy, yz, xz, yz, zz]
        forces = np.zeros((len(frames), 2 * N_EACH, 3))
        for k in range(len(frames)):
            with open(os.path.join(work, "forces.%d" % (k + 1))) as f:
                lines = f.read().splitlines()
            start = next(i for i, line in enumerate(lines) if line.startswith("ITEM: ATOMS")) + 1
            table = np.array([[float(v) for v in line.split()] for line in lines[start:]])
            forces[k] = table[np.argsort(table[:, 0]), 1:4]
        return energies, forces, virials


def write_system(path, frames, energies, forces, virials):
    os.makedirs(os.path.join(path, "set.000"), exist_ok=True)
    with open(os.path.join(path, "type.raw"), "w") as f:
        f.write("\n".join(["0"] * N_EACH + ["1"] * N_EACH) + "\n")
    with open(os.path.join(path, "type_map.raw"), "w") as f:
        f.write("Na\nCl\n")
    n = len(frames)
    box = np.array([np.diag([edge] * 3).reshape(9) for _, edge in frames])
    coord = np.array([pos.reshape(-1) for pos, _ in frames])
    for name, values in (("box", box), ("coord", coord), ("energy", energies), ("force", forces.reshape(n, -1)),
                         ("virial", virials)):
        np.save(os.path.join(path, "set.000", name + ".npy"), values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mlip", help="the mlip executable (its `mlip lammps` labels the frames)")
    parser.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    parser.add_argument("--frames", nargs=3, type=int, default=[400, 50, 100], metavar=("TRAIN", "VALID", "TEST"))
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    args.mlip = os.path.abspath(args.mlip)
    rng = np.random.default_rng(args.seed)
    for name, count in zip(("train", "valid", "test"), args.frames):
        if count == 0:
            continue
        frames = [random_frame(rng) for _ in range(count)]
        energies, forces, virials = label(args.mlip, frames)
        write_system(os.path.join(args.out, name), frames, energies, forces, virials)
        print("%s: %d frames, energy %.3f .. %.3f eV, largest force %.2f eV/A" %
              (name, count, energies.min(), energies.max(), np.abs(forces).max()))


if __name__ == "__main__":
    main()
