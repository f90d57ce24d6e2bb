"""LAMMPS (`mlip lammps`, pair_style mlip) against the frozen model called from Python through the
ASE calculator (tools/mlip_ase.py) on the configurations of lammps_util.configurations: energy,
forces, global virial, per-atom energies and per-atom virials.

usage: check_ase.py <mlip> <frozen.pt> <water npy system> <work dir> <tools dir> [ranks]
"""
import os
import sys

import numpy as np
import torch

from lammps_util import NKTV2P, boundary, configurations, read_dump, read_thermo, run_mlip_lammps, write_data

mlip, model_path, water, work, tools = sys.argv[1:6]
ranks = int(sys.argv[6]) if len(sys.argv) > 6 else 1
sys.path.insert(0, tools)
from mlip_ase import MlipCalculator  # noqa: E402

calc = MlipCalculator(model_path)
names = calc.type_names
tol = 1e-10 if calc.dtype == torch.float64 else 1e-4
print(f"{model_path}: {calc.dtype}, relative tolerance {tol:g}, {ranks} rank(s)")


def per_atom_virial(atoms):
    """Reference per-atom virials [N, 3, 3]: each pair's -d ⊗ dE/dd split in halves (the model's
    edge_gradient output), with ASE's neighbour list."""
    from ase.neighborlist import primitive_neighbor_list
    cell = np.asarray(atoms.cell.array)
    i, j, shifts = primitive_neighbor_list("ijS", atoms.pbc, cell, atoms.positions, calc.r_max, self_interaction=False)
    t = lambda a, dt: torch.as_tensor(np.asarray(a), dtype=dt)
    out = calc.model({"pos": t(atoms.positions, calc.dtype),
                      "atom_types": t([names.index(s) for s in atoms.get_chemical_symbols()], torch.int64),
                      "edge_index": t(np.stack([i, j]), torch.int64), "cell": t(cell, calc.dtype),
                      "edge_cell_shift": t(shifts, calc.dtype)})
    g = out["edge_gradient"].double().numpy()
    d = atoms.positions[j] - atoms.positions[i] + shifts @ cell
    w = -0.5 * d[:, :, None] * g[:, None, :]
    v = np.zeros((len(atoms), 3, 3))
    np.add.at(v, i, w)
    np.add.at(v, j, w)
    return v, out["virial"].double().numpy().reshape(3, 3)


def relative(a, b):
    scale = max(np.abs(b).max(), 1e-300)
    return np.abs(np.asarray(a) - np.asarray(b)).max() / scale


worst = 0.0
failed = []
for name, atoms in configurations(water).items():
    folder = os.path.join(work, f"{name}-np{ranks}")
    os.makedirs(folder, exist_ok=True)
    write_data(atoms, os.path.join(folder, "conf.data"), names)
    script = f"""units metal
atom_style atomic
boundary {boundary(atoms)}
read_data conf.data
pair_style mlip {os.path.abspath(model_path)}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
compute pe all pe/atom
compute st all stress/atom NULL virial
compute vir all pressure NULL virial
thermo_style custom step pe vol c_vir[1] c_vir[2] c_vir[3] c_vir[4] c_vir[5] c_vir[6]
thermo_modify format float %.17g
dump d all custom 1 dump.txt id fx fy fz c_pe c_st[1] c_st[2] c_st[3] c_st[4] c_st[5] c_st[6]
dump_modify d format float %.17g sort id
run 0
"""
    run_mlip_lammps(mlip, folder, script, ranks=ranks)
    thermo = read_thermo(os.path.join(folder, "log.lammps"))
    dump = read_dump(os.path.join(folder, "dump.txt"))
    atoms.calc = calc
    e_ref = atoms.get_potential_energy()
    f_ref = atoms.get_forces()
    e_atom_ref = atoms.get_potential_energies()
    v_atom_ref, v_ref = per_atom_virial(atoms)
    vol = thermo["Volume"][0]
    v_lmp = np.array([thermo[f"c_vir[{k}]"][0] for k in range(1, 7)]) * vol / NKTV2P
    v_ref6 = np.array([v_ref[0, 0], v_ref[1, 1], v_ref[2, 2], v_ref[0, 1], v_ref[0, 2], v_ref[1, 2]])
    f_lmp = np.stack([dump["fx"], dump["fy"], dump["fz"]], 1)
    # compute stress/atom is -(per-atom virial) in bar * Å^3.
    st = -np.stack([dump[f"c_st[{k}]"] for k in range(1, 7)], 1) / NKTV2P
    st_ref = np.stack([v_atom_ref[:, 0, 0], v_atom_ref[:, 1, 1], v_atom_ref[:, 2, 2], v_atom_ref[:, 0, 1],
                       v_atom_ref[:, 0, 2], v_atom_ref[:, 1, 2]], 1)
    errors = {
        "energy": abs(thermo["PotEng"][0] - e_ref) / abs(e_ref),
        "forces": relative(f_lmp, f_ref),
        "virial": relative(v_lmp, v_ref6),
        "atom energies": relative(dump["c_pe"], e_atom_ref),
        "atom virials": relative(st, st_ref),
    }
    if atoms.pbc.all():
        stress = -v_ref / atoms.get_volume()
        errors["ASE stress"] = relative(atoms.get_stress(voigt=False), stress)
    print(f"{name:10s} {len(atoms):4d} atoms, E = {e_ref:.10f} eV: " +
          ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    for k, v in errors.items():
        worst = max(worst, v)
        if not v <= tol:
            failed.append(f"{name}: {k} differs by {v:.2e} (relative) > {tol:g}")
if failed:
    print("FAILED:\n  " + "\n  ".join(failed))
    sys.exit(1)
print(f"OK: largest relative difference {worst:.2e}")
