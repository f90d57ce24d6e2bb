"""Helpers of the LAMMPS tests (tests/lammps/): configurations, LAMMPS data files and inputs,
running `mlip lammps`, and reading what it printed. Units: eV, Angstrom (LAMMPS `units metal`)."""
import os
import subprocess

import numpy as np
from ase import Atoms

MASSES = {"O": 15.999, "H": 1.008, "Na": 22.990, "Cl": 35.453}
NKTV2P = 1.6021765e6  # LAMMPS metal units: pressure (bar) = NKTV2P * energy / volume


def water_frame(system, frame=0):
    """The frame of a DeePMD npy system (the example's water) as ASE Atoms."""
    names = open(os.path.join(system, "type_map.raw")).read().split()
    types = [int(t) for t in open(os.path.join(system, "type.raw")).read().split()]
    coord = np.load(os.path.join(system, "set.000", "coord.npy"))[frame].reshape(-1, 3)
    box = np.load(os.path.join(system, "set.000", "box.npy"))[frame].reshape(3, 3)
    return Atoms([names[t] for t in types], positions=coord, cell=box, pbc=True)


def lammps_cell(atoms):
    """The atoms with a cell in LAMMPS' lower-triangular form (a along x, b in the xy plane),
    rotated as a rigid body: the same system, so the same energy."""
    cell = np.asarray(atoms.cell.array)
    a, b, c = cell
    ax = np.linalg.norm(a)
    ahat = a / ax
    bx = b @ ahat
    by = np.linalg.norm(b - bx * ahat)
    cx = c @ ahat
    cy = (c @ b - bx * cx) / by
    cz = np.sqrt(max(c @ c - cx * cx - cy * cy, 0.0))
    new = np.array([[ax, 0, 0], [bx, by, 0], [cx, cy, cz]])
    rot = np.linalg.solve(cell, new)  # cell @ rot = new
    out = atoms.copy()
    out.set_cell(new)
    out.positions = atoms.positions @ rot
    return out


def configurations(water_system):
    """The configurations of docs/lammps.md's tests: the water example (periodic), a triclinic
    cell, a non-periodic cluster and a slab (periodic in x and y)."""
    water = water_frame(water_system)
    out = {"water": water}
    tri = water.copy()
    cell = np.asarray(tri.cell.array)
    shear = np.array([[1.0, 0.0, 0.0], [0.18, 1.0, 0.0], [-0.12, 0.21, 1.0]])
    tri.set_cell(shear @ cell, scale_atoms=True)
    out["triclinic"] = lammps_cell(tri)
    wrapped = water.copy()
    wrapped.wrap()
    centre = wrapped.cell.array.sum(0) / 2
    near = np.linalg.norm(wrapped.positions - centre, axis=1) < 6.5
    cluster = Atoms(np.array(wrapped.get_chemical_symbols())[near], positions=wrapped.positions[near], pbc=False)
    out["cluster"] = cluster
    slab = wrapped.copy()
    keep = (slab.positions[:, 2] > 2.0) & (slab.positions[:, 2] < 9.0)
    slab = slab[keep]
    slab.pbc = [True, True, False]
    out["slab"] = slab
    return out


def write_data(atoms, path, type_names, charge=False):
    """A LAMMPS data file (atom_style atomic, or charge with every q zero); non-periodic
    directions get a box around the atoms with room to spare (LAMMPS' `f` boundaries)."""
    pos = np.asarray(atoms.positions, dtype=np.float64)
    cell = np.asarray(atoms.cell.array, dtype=np.float64)
    lo = np.zeros(3)
    hi = np.zeros(3)
    tilt = [0.0, 0.0, 0.0]
    for d in range(3):
        if atoms.pbc[d]:
            hi[d] = cell[d, d]
        else:
            lo[d] = pos[:, d].min() - 10.0
            hi[d] = pos[:, d].max() + 10.0
    if atoms.pbc.all():
        tilt = [cell[1, 0], cell[2, 0], cell[2, 1]]
    lines = ["mlip test configuration", "", f"{len(atoms)} atoms", f"{len(type_names)} atom types",
             f"{lo[0]:.17g} {hi[0]:.17g} xlo xhi", f"{lo[1]:.17g} {hi[1]:.17g} ylo yhi",
             f"{lo[2]:.17g} {hi[2]:.17g} zlo zhi"]
    if any(t != 0.0 for t in tilt):
        lines.append(f"{tilt[0]:.17g} {tilt[1]:.17g} {tilt[2]:.17g} xy xz yz")
    lines += ["", "Masses", ""]
    lines += [f"{k + 1} {MASSES[n]}" for k, n in enumerate(type_names)]
    lines += ["", "Atoms # charge" if charge else "Atoms # atomic", ""]
    symbols = atoms.get_chemical_symbols()
    q = " 0" if charge else ""
    for i in range(len(atoms)):
        lines.append(f"{i + 1} {type_names.index(symbols[i]) + 1}{q} {pos[i, 0]:.17g} {pos[i, 1]:.17g} {pos[i, 2]:.17g}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def boundary(atoms):
    return " ".join("p" if p else "f" for p in atoms.pbc)


def run_mlip_lammps(mlip, folder, script, ranks=1, threads=1, extra=(), check=True):
    """Runs `[mpirun -np ranks] mlip lammps -in in.lammps` in `folder`; returns the process."""
    with open(os.path.join(folder, "in.lammps"), "w") as f:
        f.write(script)
    cmd = [mlip, "lammps", "-in", "in.lammps", "-log", "log.lammps", "-screen", "screen.txt", *extra]
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), *cmd]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        screen = os.path.join(folder, "screen.txt")
        text = open(screen).read() if os.path.exists(screen) else ""
        raise RuntimeError(f"mlip lammps failed ({proc.returncode}) in {folder}:\n{proc.stdout}\n{proc.stderr}\n{text[-3000:]}")
    return proc


def static_evaluation(mlip, folder, data_path, pair_style, coeffs, ranks=1):
    """`run 0` of the periodic atoms of a data file with a pair style: the energy (eV), the
    pressure (bar) and the forces [N, 3] (eV/Å, by atom id)."""
    os.makedirs(folder, exist_ok=True)
    script = f"""units metal
atom_style atomic
boundary p p p
read_data {data_path}
pair_style {pair_style}
{coeffs}
neighbor 1.0 bin
thermo_style custom step pe press
thermo_modify format float %.17g
run 0
write_dump all custom forces.txt id fx fy fz modify format float %.17g sort id
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    thermo = read_thermo(os.path.join(folder, "log.lammps"))
    d = read_dump(os.path.join(folder, "forces.txt"))
    return thermo["PotEng"][-1], thermo["Press"][-1], np.stack([d["fx"], d["fy"], d["fz"]], 1)


def read_dump(path):
    """A `dump custom ... id type x y z fx fy fz c_pe c_stress[1..6]` file of one snapshot,
    sorted by id: a dict of arrays."""
    lines = open(path).read().splitlines()
    k = lines.index([l for l in lines if l.startswith("ITEM: ATOMS")][-1])
    cols = lines[k].split()[2:]
    rows = np.array([[float(v) for v in l.split()] for l in lines[k + 1:] if l.strip()])
    rows = rows[np.argsort(rows[:, 0])]
    return {c: rows[:, i] for i, c in enumerate(cols)}


def read_thermo(log_path):
    """The thermo table of a LAMMPS log: dict column -> array (the last run)."""
    lines = open(log_path).read().splitlines()
    starts = [i for i, l in enumerate(lines) if l.split()[:1] == ["Step"]]
    if not starts:
        raise RuntimeError(f"{log_path}: no thermo output")
    head = lines[starts[-1]].split()
    rows = []
    for l in lines[starts[-1] + 1:]:
        parts = l.split()
        if len(parts) != len(head):
            break
        try:
            rows.append([float(v) for v in parts])
        except ValueError:
            break
    rows = np.array(rows)
    return {c: rows[:, i] for i, c in enumerate(head)}
