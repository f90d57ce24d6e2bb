"""model.pair_repulsion in LAMMPS (docs/repulsion.md "Tests"), for one model kind: a model with
ZBL 0.5-1.0 Å (sez.pt / eqz.pt) against its twin without (se64.pt / eq.pt: the same weights,
other energy shifts) plus LAMMPS' own `pair_style zbl 0.5 1.0`.

1. Dimer scans from 0.2 to 3 Å of O-O, O-H and H-H: energy (less the shifts' constant, the
   difference at 3 Å) and force to 1e-8 (eV, and eV/Å relative to max(1, |F|)); mlip's own
   inference and the TorchScript forward (`evaluation torchscript`).
2. 1,152 water atoms (the 96-atom frame 2x2x3) on 1 and 2 ranks: the model alone against
   `hybrid/overlay` of the twin and zbl: energy per atom (less the constant) to 1e-8 eV, forces
   to 1e-8 eV/Å, pressure to 1e-8; se_e2_a also compressed (sezc.pt against se64c.pt and zbl).
3. Two atoms (O-O, O-H) shot at each other with 100 eV in NVE turn back: the closest approach is
   where the repulsion alone holds 100 eV, they fly apart, the total energy holds.

usage: check_zbl.py <mlip> <models dir> <se|eq> <water npy system> <work dir>
"""
import os
import sys

import numpy as np

from lammps_util import MASSES, read_thermo, run_mlip_lammps, static_evaluation, water_frame, write_data

mlip, models, kind, water, work = sys.argv[1:6]
models = os.path.abspath(models)
with_model = os.path.join(models, {"se": "sez.pt", "eq": "eqz.pt"}[kind])
twin = os.path.join(models, {"se": "se64.pt", "eq": "eq.pt"}[kind])
os.makedirs(work, exist_ok=True)
ZBL_COEFFS = "pair_coeff 1 1 {p}8 8\npair_coeff 1 2 {p}8 1\npair_coeff 2 2 {p}1 1"
STYLES = {
    "with": (f"mlip {with_model}", "pair_coeff * * O H"),
    "with_torchscript": (f"mlip {with_model} evaluation torchscript", "pair_coeff * * O H"),
    "twin": (f"mlip {twin}", "pair_coeff * * O H"),
    "zbl": ("zbl 0.5 1.0", ZBL_COEFFS.format(p="")),
    "hybrid": (f"hybrid/overlay mlip {twin} zbl 0.5 1.0", "pair_coeff * * mlip O H\n" + ZBL_COEFFS.format(p="zbl ")),
    # se_e2_a compressed (mlip compress keeps the repulsion): sezc.pt against se64c.pt beside zbl.
    "compressed": (f"mlip {models}/sezc.pt", "pair_coeff * * O H"),
    "hybrid_compressed": (f"hybrid/overlay mlip {models}/se64c.pt zbl 0.5 1.0",
                          "pair_coeff * * mlip O H\n" + ZBL_COEFFS.format(p="zbl ")),
}
failed = []


def report(ok, text):
    print(f"{'ok  ' if ok else 'FAIL'} {kind}: {text}")
    if not ok:
        failed.append(text)


def two_atoms(t1, t2, x1, x2, half_box):
    """The start of a LAMMPS input: atoms of types t1 and t2 at (x1, 0, 0) and (x2, 0, 0) in a
    non-periodic box."""
    return f"""units metal
atom_style atomic
atom_modify map yes
boundary f f f
region box block -{half_box} {half_box} -{half_box} {half_box} -{half_box} {half_box}
create_box 2 box
mass 1 {MASSES['O']}
mass 2 {MASSES['H']}
create_atoms {t1} single {x1} 0 0
create_atoms {t2} single {x2} 0 0
"""


def dimer_scan(style, t1, t2, rs):
    """Energy and the force on atom 2 (along x) of two atoms at the distances rs."""
    folder = os.path.join(work, f"dimer-{style}-{t1}{t2}")
    os.makedirs(folder, exist_ok=True)
    pair_style, coeffs = STYLES[style]
    script = two_atoms(t1, t2, 0, 1, 10) + f"""pair_style {pair_style}
{coeffs}
neighbor 1.0 bin
thermo_style custom step pe
variable k loop {len(rs)}
label scan
variable r equal {rs[0]:.17g}+(v_k-1)*{rs[1] - rs[0]:.17g}
set atom 2 x $r
run 0 post no
print "SCAN $(v_r:%.17g) $(pe:%.17g) $(fx[2]:%.17g)"
next k
jump SELF scan
"""
    run_mlip_lammps(mlip, folder, script)
    rows = [l.split()[1:] for l in open(os.path.join(folder, "log.lammps")) if l.startswith("SCAN ")]
    rows = np.array(rows, dtype=np.float64)
    if len(rows) != len(rs) or np.abs(rows[:, 0] - rs).max() > 1e-12:
        raise RuntimeError(f"{folder}: expected {len(rs)} scan points, got {len(rows)}")
    return rows[:, 1], rows[:, 2]


# 1. Dimer scans.
rs = np.linspace(0.2, 3.0, 141)
shift = {}
for t1, t2, name in [(1, 1, "O-O"), (1, 2, "O-H"), (2, 2, "H-H")]:
    e_z, f_z = dimer_scan("zbl", t1, t2, rs)
    e_t, f_t = dimer_scan("twin", t1, t2, rs)
    for style in ("with", "with_torchscript"):
        e_w, f_w = dimer_scan(style, t1, t2, rs)
        constant = e_w[-1] - e_t[-1]  # the energy shifts' difference (ZBL is 0 at 3 Å)
        shift[name] = constant
        de = np.abs(e_w - e_t - constant - e_z).max()
        df = (np.abs(f_w - f_t - f_z) / np.maximum(1.0, np.abs(f_z))).max()
        beyond = rs >= 1.0
        flat = np.abs(e_w[beyond] - e_t[beyond] - constant).max()
        ok = de <= 1e-8 and df <= 1e-8 and flat <= 1e-8
        report(ok, f"{name} dimer 0.2-3 Å ({style}): energy {de:.1e} eV, force {df:.1e} (relative to max(1, |F|)), "
               f"beyond outer {flat:.1e} eV; ZBL at 0.2 Å {e_z[0]:.1f} eV")

# 2. 1,152 water atoms: the model alone against the twin beside zbl.
atoms = water_frame(water).repeat((2, 2, 3))
write_data(atoms, os.path.join(work, "water.data"), ["O", "H"])
n_o = sum(1 for s in atoms.get_chemical_symbols() if s == "O")
n_h = len(atoms) - n_o
constant = n_o * shift["O-O"] / 2 + n_h * shift["H-H"] / 2


def water_run(style, ranks):
    return static_evaluation(mlip, os.path.join(work, f"water-{style}-np{ranks}"), os.path.join(work, "water.data"),
                             *STYLES[style], ranks=ranks)


for ranks in (1, 2):
    pairs = [("hybrid", "with"), ("hybrid", "with_torchscript")]
    if kind == "se":
        pairs.append(("hybrid_compressed", "compressed"))
    for reference, style in pairs:
        e_h, p_h, f_h = water_run(reference, ranks)
        e_w, p_w, f_w = water_run(style, ranks)
        de = abs(e_w - constant - e_h) / len(atoms)
        dp = abs(p_w - p_h) / max(abs(p_h), 1.0)
        df = np.abs(f_w - f_h).max()
        ok = de <= 1e-8 and dp <= 1e-8 and df <= 1e-8
        report(ok, f"{len(atoms)} water atoms, -np {ranks} ({style}) against {reference} twin + zbl: "
               f"energy {de:.1e} eV/atom, pressure {dp:.1e} (relative), forces {df:.1e} eV/Å")

# 3. Two atoms shot at each other with 100 eV.
for t1, t2, name in [(1, 1, "O-O"), (1, 2, "O-H")]:
    folder = os.path.join(work, f"collision-{t1}{t2}")
    os.makedirs(folder, exist_ok=True)
    m1, m2 = MASSES["O" if t1 == 1 else "H"], MASSES["O" if t2 == 1 else "H"]
    # 100 eV of kinetic energy in the centre-of-mass frame, velocities along x towards each other.
    mv2 = 1.0364269e-4  # eV per (g/mol · (Å/ps)^2): LAMMPS metal units' mvv2e
    reduced = m1 * m2 / (m1 + m2)
    v_rel = np.sqrt(2 * 100.0 / (reduced * mv2))  # Å/ps
    v1, v2 = v_rel * m2 / (m1 + m2), -v_rel * m1 / (m1 + m2)
    script = two_atoms(t1, t2, -1.5, 1.5, 40) + f"""pair_style {STYLES['with'][0]}
{STYLES['with'][1]}
neighbor 1.0 bin
neigh_modify every 1 delay 0 check yes
velocity all set 0 0 0
set atom 1 vx {v1:.17g}
set atom 2 vx {v2:.17g}
variable d equal x[2]-x[1]
variable v equal vx[2]-vx[1]
timestep 0.00001
fix nve all nve
thermo 5
thermo_style custom step v_d v_v pe ke etotal
thermo_modify format float %.15g
run 1500
"""
    run_mlip_lammps(mlip, folder, script)
    t = read_thermo(os.path.join(folder, "log.lammps"))
    closest = t["v_d"].min()
    ke0, e0 = t["KinEng"][0], t["TotEng"][0]
    drift = np.abs(t["TotEng"] - e0).max() / ke0
    apart = t["v_v"][-1] > 0 and t["v_d"][-1] > closest + 0.5
    ok = closest > 0.2 and apart and drift < 1e-3 and abs(ke0 - 100.0) < 1e-6
    report(ok, f"{name} shot at each other with {ke0:.3f} eV: closest {closest:.3f} Å, then apart at "
           f"{t['v_d'][-1]:.2f} Å with relative velocity {t['v_v'][-1]:.1f} Å/ps, energy held to {drift:.1e} of it")

if failed:
    print("FAILED: " + "; ".join(failed))
    sys.exit(1)
