"""Energy conservation in NVE with pair_style mlip: the first frame of a DeePMD npy system (32
waters of the water example's validation set, or the ions example's 64 ions), 300 K, 0.5 fs,
2,000 steps. The drift is the slope of a straight line fitted to the total energy
against time, in eV/atom/ps; it must stay below the bound (docs/lammps.md "Energy conservation"
gives the measurement behind it).

usage: check_nve.py <mlip> <frozen.pt> <npy system> <work dir> <bound eV/atom/ps> [threads]
"""
import os
import sys

import numpy as np

from lammps_util import read_thermo, run_mlip_lammps, water_frame, write_data

mlip, model_path, water, work, bound = sys.argv[1:6]
threads = int(sys.argv[6]) if len(sys.argv) > 6 else 2
bound = float(bound)
atoms = water_frame(water)
names = open(os.path.join(water, "type_map.raw")).read().split()
os.makedirs(work, exist_ok=True)
write_data(atoms, os.path.join(work, "conf.data"), names)
steps, dt = 2000, 0.0005
script = f"""units metal
atom_style atomic
boundary p p p
read_data conf.data
pair_style mlip {os.path.abspath(model_path)}
pair_coeff * * {' '.join(names)}
neighbor 1.0 bin
velocity all create 300.0 87287 loop geom
timestep {dt}
fix nve all nve
thermo 10
thermo_style custom step time temp pe ke etotal
thermo_modify format float %.15g
run {steps}
"""
run_mlip_lammps(mlip, work, script, threads=threads)
t = read_thermo(os.path.join(work, "log.lammps"))
n = len(atoms)
time_ps = t["Time"]
etot = t["TotEng"] / n
slope = np.polyfit(time_ps, etot, 1)[0]
spread = etot.max() - etot.min()
print(f"{model_path}: {n} atoms, {steps} steps of {dt * 1000:g} fs, T {t['Temp'].mean():.0f} K (mean): "
      f"drift {slope:+.2e} eV/atom/ps, total energy range {spread:.2e} eV/atom (bound {bound:g})")
if not abs(slope) <= bound:
    print(f"FAILED: |drift| {abs(slope):.2e} eV/atom/ps > {bound:g}")
    sys.exit(1)
