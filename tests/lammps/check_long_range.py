"""A model with charges (model.long_range) in LAMMPS across ranks (docs/lammps.md "Long range
across ranks"): pair_style mlip at 1, 2 and 4 ranks against the frozen model called from Python
through the ASE calculator (tools/mlip_ase.py, the forward `mlip test` runs) on ions in a cubic
and a triclinic periodic box and on a cluster without periodicity (boundary f f f and s s s):
energy, forces, virial, per-atom energies and the charges LAMMPS writes into q; the per-atom
virials summing to the virial; the particle mesh (`kspace mesh`) against the k-vector sum and
across ranks; NPT at 2 ranks against 1 rank while the box changes; the refusals (a slab, the
TorchScript forward).

usage: check_long_range.py <mlip> <frozen.pt> <ions npy system> <work dir> <tools dir>
"""
import os
import sys

import numpy as np
import torch
from ase import Atoms

from lammps_util import NKTV2P, lammps_cell, read_dump, read_thermo, run_mlip_lammps, water_frame, write_data

mlip, model_path, ions, work, tools = sys.argv[1:6]
sys.path.insert(0, tools)
from mlip_ase import MlipCalculator  # noqa: E402

calc = MlipCalculator(model_path)
names = calc.type_names
if calc.dtype != torch.float64:
    sys.exit(f"{model_path}: expected a float64 model")
TOL = 1e-10  # relative, float64
# The default mesh against the k-vector sum: its accuracy as docs/long_range.md "On a mesh" states
# it (energy and virial relative, forces of the largest), which a model with charges near ±1 e
# reaches (a model with small charges stays far inside).
MESH_TOL = {"energy": 5.6e-5, "forces": 2.9e-5, "virial": 2.2e-4}
failed = []


def relative(a, b):
    scale = max(np.abs(np.asarray(b)).max(), 1e-300)
    return np.abs(np.asarray(a) - np.asarray(b)).max() / scale


def check(label, errors, tol):
    print(f"{label}: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    for k, v in errors.items():
        if not v <= tol:
            failed.append(f"{label}: {k} differs by {v:.2e} (relative) > {tol:g}")


def configurations():
    periodic = water_frame(ions)
    out = {"cubic": (periodic, "p p p")}
    tri = periodic.copy()
    shear = np.array([[1.0, 0.0, 0.0], [0.15, 1.0, 0.0], [-0.1, 0.2, 1.0]])
    tri.set_cell(shear @ np.asarray(tri.cell.array), scale_atoms=True)
    out["triclinic"] = (lammps_cell(tri), "p p p")
    wrapped = periodic.copy()
    wrapped.wrap()
    centre = wrapped.cell.array.sum(0) / 2
    near = np.linalg.norm(wrapped.positions - centre, axis=1) < 5.5
    cluster = Atoms(np.array(wrapped.get_chemical_symbols())[near], positions=wrapped.positions[near], pbc=False)
    out["cluster"] = (cluster, "f f f")
    out["shrink"] = (cluster, "s s s")
    return out


def run_static(name, atoms, bound, ranks, keywords="", per_atom_virial=True):
    folder = os.path.join(work, f"{name}-np{ranks}{'-' + keywords.replace(' ', '-') if keywords else ''}")
    os.makedirs(folder, exist_ok=True)
    write_data(atoms, os.path.join(folder, "conf.data"), names, charge=True)
    stress = "compute st all stress/atom NULL virial\n" if per_atom_virial else ""
    columns = " c_st[1] c_st[2] c_st[3] c_st[4] c_st[5] c_st[6]" if per_atom_virial else ""
    script = f"""units metal
atom_style charge
boundary {bound}
read_data conf.data
pair_style mlip {os.path.abspath(model_path)} {keywords}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
compute pe all pe/atom
{stress}compute vir all pressure NULL virial
thermo_style custom step pe vol c_vir[1] c_vir[2] c_vir[3] c_vir[4] c_vir[5] c_vir[6]
thermo_modify format float %.17g
dump d all custom 1 dump.txt id fx fy fz q c_pe{columns}
dump_modify d format float %.17g sort id
run 0
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    thermo = read_thermo(os.path.join(folder, "log.lammps"))
    dump = read_dump(os.path.join(folder, "dump.txt"))
    vol = thermo["Volume"][0]
    out = {
        "energy": thermo["PotEng"][0],
        # Voigt xx yy zz xy xz yz, eV
        "virial": np.array([thermo[f"c_vir[{k}]"][0] for k in range(1, 7)]) * vol / NKTV2P,
        "forces": np.stack([dump["fx"], dump["fy"], dump["fz"]], 1),
        "charges": dump["q"],
        "atom energies": dump["c_pe"],
    }
    if per_atom_virial:  # compute stress/atom is -(per-atom virial) in bar Å³
        out["atom virials"] = -np.stack([dump[f"c_st[{k}]"] for k in range(1, 7)], 1) / NKTV2P
    return out


def reference(atoms):
    atoms = atoms.copy()
    atoms.calc = calc
    ref = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces(),
           "charges": calc.results["charges"], "atom energies": atoms.get_potential_energies()}
    if atoms.pbc.all():
        v = -atoms.get_stress(voigt=False) * atoms.get_volume()
        ref["virial"] = np.array([v[0, 0], v[1, 1], v[2, 2], v[0, 1], v[0, 2], v[1, 2]])
    return ref


largest_charge = 0.0
for name, (atoms, bound) in configurations().items():
    ref = reference(atoms)
    largest_charge = max(largest_charge, np.abs(ref["charges"]).max())
    one = None
    for ranks in (1, 2, 4):
        got = run_static(name, atoms, bound, ranks)
        errors = {k: relative(got[k], ref[k]) for k in ref}
        errors["charges' sum"] = abs(got["charges"].sum())
        errors["atom energies' sum"] = abs(got["atom energies"].sum() - got["energy"]) / abs(got["energy"])
        errors["atom virials' sum"] = relative(got["atom virials"].sum(0), got["virial"])
        if one is None:
            one = got
        else:
            for k in ("energy", "forces", "virial", "atom virials"):
                errors[f"{k} vs 1 rank"] = relative(got[k], one[k])
        check(f"{name:9s} {len(atoms):3d} atoms, {ranks} rank(s), E = {ref['energy']:.10f} eV", errors, TOL)
    # Ghosts out to L · r_max instead of features exchanged between the layers.
    got = run_static(name, atoms, bound, 2, "exchange no")
    errors = {k: relative(got[k], ref[k]) for k in ref}
    errors["atom virials vs 1 rank"] = relative(got["atom virials"], one["atom virials"])
    check(f"{name:9s} 2 ranks, exchange no", errors, TOL)

# The charges must matter for the comparison to mean anything.
print(f"largest |q| {largest_charge:.3f} e")
if not largest_charge > 0.01:
    failed.append(f"the model's charges are too small to test the long-range term (largest {largest_charge:.2e} e)")

# The mesh: against the k-vector sum, and equal across ranks.
atoms, bound = configurations()["cubic"]
ewald = run_static("cubic", atoms, bound, 1, "kspace ewald", per_atom_virial=False)
mesh1 = run_static("cubic", atoms, bound, 1, "kspace mesh", per_atom_virial=False)
mesh2 = run_static("cubic", atoms, bound, 2, "kspace mesh", per_atom_virial=False)
for key, tol in MESH_TOL.items():
    check(f"mesh vs k-vectors, 1 rank, {key}", {key: relative(mesh1[key], ewald[key])}, tol)
check("mesh, 2 ranks vs 1", {k: relative(mesh2[k], mesh1[k]) for k in ("energy", "forces", "virial", "charges")}, TOL)


def npt(ranks):
    folder = os.path.join(work, f"npt-np{ranks}")
    os.makedirs(folder, exist_ok=True)
    write_data(atoms, os.path.join(folder, "conf.data"), names, charge=True)
    script = f"""units metal
atom_style charge
boundary p p p
read_data conf.data
mass * 20.0
pair_style mlip {os.path.abspath(model_path)}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
velocity all create 600.0 4928459 loop geom
timestep 0.001
fix npt all npt temp 600 600 0.05 iso 0 0 0.2
thermo 10
thermo_style custom step pe ke etotal vol press
thermo_modify format float %.15g
run 60
write_dump all custom final.txt id x y z q modify format float %.17g sort id
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    d = read_dump(os.path.join(folder, "final.txt"))
    vol = read_thermo(os.path.join(folder, "log.lammps"))["Volume"]
    return np.stack([d["x"], d["y"], d["z"]], 1), d["q"], vol


x1, q1, vol1 = npt(1)
x2, q2, vol2 = npt(2)
change = abs(vol1[-1] - vol1[0]) / vol1[0]
print(f"NPT: volume {vol1[0]:.3f} -> {vol1[-1]:.3f} Å^3 ({change:.1e}); 2 ranks vs 1: max |dx| "
      f"{np.abs(x2 - x1).max():.1e} Å, max |dq| {np.abs(q2 - q1).max():.1e} e")
if not change > 1e-3:
    failed.append(f"NPT: the volume changed by {change:.1e} only")
if not np.abs(x2 - x1).max() <= 1e-8 or not np.abs(q2 - q1).max() <= 1e-8:
    failed.append("NPT: 2 ranks differ from 1 rank")

# Refusals, named.
slab = atoms.copy()
folder = os.path.join(work, "slab")
os.makedirs(folder, exist_ok=True)
write_data(slab, os.path.join(folder, "conf.data"), names)
for label, bound, keywords, expected in [
        ("slab", "p p f", "", "periodic in 2 direction(s)"),
        ("torchscript", "p p p", "evaluation torchscript", "evaluation torchscript was asked for")]:
    script = f"""units metal
atom_style atomic
boundary {bound}
read_data conf.data
pair_style mlip {os.path.abspath(model_path)} {keywords}
pair_coeff * * {' '.join(names)}
run 0
"""
    proc = run_mlip_lammps(mlip, folder, script, check=False)
    text = open(os.path.join(folder, "screen.txt")).read() + proc.stdout + proc.stderr
    ok = proc.returncode != 0 and expected in text
    print(f"refused {label}: {'yes' if ok else 'NO'}")
    if not ok:
        failed.append(f"{label}: expected an error saying '{expected}', got exit {proc.returncode}:\n{text[-800:]}")

if failed:
    print("FAILED:\n  " + "\n  ".join(failed))
    sys.exit(1)
print("OK")
