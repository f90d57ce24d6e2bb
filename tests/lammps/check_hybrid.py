"""pair_style mlip under pair_style hybrid/overlay beside zbl (docs/lammps.md "Beside other pair
styles"): energy, pressure and every force equal mlip alone plus zbl alone (1e-10 relative), for
both models, the equivariant one with its features exchanged between ranks and as a committee,
on 1 and 2 ranks. (Before the communication sizes were known at pair_style time, hybrid sized
LAMMPS' buffers without the exchanged features and the equivariant model crashed.)

usage: check_hybrid.py <mlip> <models dir> <water npy system> <work dir>
"""
import os
import sys

import numpy as np

from lammps_util import static_evaluation, water_frame, write_data

mlip, models, water, work = sys.argv[1:5]
models = os.path.abspath(models)
os.makedirs(work, exist_ok=True)
write_data(water_frame(water), os.path.join(work, "conf.data"), ["O", "H"])
ZBL_COEFFS = "pair_coeff 1 1 {p}8 8\npair_coeff 1 2 {p}8 1\npair_coeff 2 2 {p}1 1"


def evaluate(name, style, coeffs, ranks):
    return static_evaluation(mlip, os.path.join(work, f"{name}-np{ranks}"), os.path.join(work, "conf.data"), style,
                             coeffs, ranks)


failed = []
for label, model in [("se_e2_a", "se64.pt"), ("equivariant", "eq.pt"), ("equivariant committee", "eq.pt eq2.pt")]:
    paths = " ".join(os.path.join(models, m) for m in model.split())
    extra = f" out_freq 1 out_file {os.path.join(work, 'devi.out')}" if " " in model else ""
    for ranks in (1, 2):
        tag = label.replace(" ", "_")
        e_m, p_m, f_m = evaluate(f"{tag}-alone", f"mlip {paths}{extra}", "pair_coeff * * O H", ranks)
        e_z, p_z, f_z = evaluate(f"{tag}-zbl", "zbl 0.5 1.0", ZBL_COEFFS.format(p=""), ranks)
        e_h, p_h, f_h = evaluate(f"{tag}-hybrid", f"hybrid/overlay mlip {paths}{extra} zbl 0.5 1.0",
                                 "pair_coeff * * mlip O H\n" + ZBL_COEFFS.format(p="zbl "), ranks)
        de = abs(e_h - (e_m + e_z)) / abs(e_m)
        dp = abs(p_h - (p_m + p_z)) / max(abs(p_m + p_z), 1.0)
        df = np.abs(f_h - (f_m + f_z)).max() / np.abs(f_m + f_z).max()
        ok = de <= 1e-10 and dp <= 1e-10 and df <= 1e-10
        print(f"{'ok  ' if ok else 'FAIL'} {label}, -np {ranks}: hybrid/overlay mlip + zbl against the sum: energy "
              f"{de:.1e}, pressure {dp:.1e}, forces {df:.1e} (relative)")
        if not ok:
            failed.append(f"{label} -np {ranks}")
if failed:
    print("FAILED: " + ", ".join(failed))
    sys.exit(1)
