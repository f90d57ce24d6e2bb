"""pair_style mlip after `clear` (docs/lammps.md "After clear"): the usual write_restart / clear
/ read_restart deck, and a second `clear` followed by `pair_style mlip` with another model before
the box exists (before read_data: no command of LAMMPS' table has run since the `clear`), on 1
and 2 ranks: the style is known again and the energies after `clear` equal those before (the
same atoms and model: exactly), and the other model's equal its own run in a fresh LAMMPS.

usage: check_clear.py <mlip> <models dir> <water npy system> <work dir>
"""
import os
import sys

from lammps_util import run_mlip_lammps, water_frame, write_data

mlip, models, water, work = sys.argv[1:5]
models = os.path.abspath(models)
os.makedirs(work, exist_ok=True)
data = os.path.join(work, "conf.data")
write_data(water_frame(water), data, ["O", "H"])
eq, se = os.path.join(models, "eq.pt"), os.path.join(models, "se64.pt")
SETUP = "units metal\natom_style atomic\nboundary p p p\n"
EVALUATE = "pair_coeff * * O H\nthermo_style custom step pe\nthermo_modify format float %.17g\nrun 0\n"


def energies(log):
    """Every potential energy LAMMPS printed under a 'Step PotEng' header."""
    lines = open(log).read().splitlines()
    return [float(lines[i + 1].split()[1]) for i, l in enumerate(lines) if l.split() == ["Step", "PotEng"]]


failed = []
for ranks in (1, 2):
    folder = os.path.join(work, f"np{ranks}")
    os.makedirs(folder, exist_ok=True)
    deck = (SETUP + f"read_data {data}\npair_style mlip {eq}\n" + EVALUATE + "write_restart water.restart\n"
            "clear\n" + SETUP + "read_restart water.restart\n" + f"pair_style mlip {eq}\n" + EVALUATE +
            "clear\n" + SETUP + f"pair_style mlip {se}\nread_data {data}\n" + EVALUATE)
    run_mlip_lammps(mlip, folder, deck, ranks=ranks)
    fresh = os.path.join(work, f"fresh-np{ranks}")
    os.makedirs(fresh, exist_ok=True)
    run_mlip_lammps(mlip, fresh, SETUP + f"read_data {data}\npair_style mlip {se}\n" + EVALUATE, ranks=ranks)
    e, e_fresh = energies(os.path.join(folder, "log.lammps")), energies(os.path.join(fresh, "log.lammps"))
    ok = len(e) == 3 and e[0] == e[1] and len(e_fresh) == 1 and e[2] == e_fresh[0]
    print(f"{'ok  ' if ok else 'FAIL'} -np {ranks}: before clear {e[:1]}, after clear and read_restart {e[1:2]}; "
          f"after a second clear, se_e2_a {e[2:3]}, in a fresh LAMMPS {e_fresh}")
    if not ok:
        failed.append(f"-np {ranks}")
if failed:
    print("FAILED: " + ", ".join(failed))
    sys.exit(1)
