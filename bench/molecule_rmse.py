#!/usr/bin/env python3
"""Energy and force RMSE of predictions against references, both read from extended XYZ files
with plain Python and numpy (no ASE): bench/molecule_bench.sh's one measure for mlip and MACE.

usage: molecule_rmse.py REFERENCE.xyz PREDICTED.xyz ENERGY_KEY FORCES_KEY [--species X,Y...]
  REFERENCE.xyz: the labelled frames (keys `energy`/`forces` or `REF_energy`/`REF_forces`)
  PREDICTED.xyz: the same frames in the same order with the predictions under ENERGY_KEY and
                 FORCES_KEY (mlip test --xyz: mlip_energy, mlip_forces; mace_eval_configs:
                 MACE_energy, MACE_forces)
Atoms are matched by position within each frame (mlip test --xyz writes a frame's atoms sorted
by type, not in the order read). Prints: frames, energy RMSE in meV per frame (per molecule),
force RMSE in meV/Å over every component; with --species X (comma-separated for several), also
the force RMSE over the components of the atoms of species X only, as force_rmse_X_meV_per_A
(bench/finetune_bench.sh: the N atoms of 3BPA).
"""
import shlex
import sys

import numpy as np


def frames(path):
    """Yields (info, columns) per frame: info the comment line's key=value pairs, columns a dict
    of the per-atom arrays named by Properties."""
    with open(path) as f:
        lines = f.read().splitlines()
    k = 0
    while k < len(lines):
        if not lines[k].strip():
            k += 1
            continue
        n = int(lines[k])
        info = {}
        for token in shlex.split(lines[k + 1]):
            if "=" in token:
                key, value = token.split("=", 1)
                info[key] = value
        rows = [line.split() for line in lines[k + 2:k + 2 + n]]
        spec = info["Properties"].split(":")
        columns, c = {}, 0
        for name, kind, width in zip(spec[0::3], spec[1::3], spec[2::3]):
            width = int(width)
            if kind == "R":
                columns[name] = np.array([[float(x) for x in r[c:c + width]] for r in rows])
            elif kind == "S" and width == 1:
                columns[name] = np.array([r[c] for r in rows])
            c += width
        yield info, columns
        k += n + 2


def main():
    args = sys.argv[1:]
    species = []
    if "--species" in args:
        k = args.index("--species")
        if k + 1 >= len(args):
            sys.exit(__doc__)
        species = [x for x in args[k + 1].split(",") if x]
        del args[k:k + 2]
    if len(args) != 4:
        sys.exit(__doc__)
    reference, predicted, energy_key, forces_key = args
    de, df = [], []
    df_species = {x: [] for x in species}
    ref_frames = list(frames(reference))
    pred_frames = list(frames(predicted))
    if len(ref_frames) != len(pred_frames):
        sys.exit(f"{predicted}: {len(pred_frames)} frames, {reference} has {len(ref_frames)}")
    for k, ((ri, rc), (pi, pc)) in enumerate(zip(ref_frames, pred_frames)):
        e_ref = float(ri.get("energy", ri.get("REF_energy")))
        if energy_key not in pi or forces_key not in pc:
            sys.exit(f"{predicted}: frame {k} has no {energy_key} or no {forces_key} column")
        f_ref = rc["forces"] if "forces" in rc else rc["REF_forces"]
        # Row of the reference atom at each predicted atom's position.
        distance = np.abs(pc["pos"][:, None, :] - rc["pos"][None, :, :]).max(axis=2)
        match = distance.argmin(axis=1)
        if len(set(match.tolist())) != len(match) or distance[np.arange(len(match)), match].max() > 1e-5:
            sys.exit(f"{predicted}: frame {k}: the atoms' positions do not match {reference}'s")
        de.append(float(pi[energy_key]) - e_ref)
        df.append((pc[forces_key] - f_ref[match]).ravel())
        for x in species:
            if "species" not in rc:
                sys.exit(f"{reference}: frame {k} has no species column")
            mine = rc["species"][match] == x
            df_species[x].append((pc[forces_key][mine] - f_ref[match][mine]).ravel())
    de = np.array(de)
    df = np.concatenate(df)
    line = (f"frames={len(de)} energy_rmse_meV={1000 * np.sqrt(np.mean(de ** 2)):.3f} "
            f"force_rmse_meV_per_A={1000 * np.sqrt(np.mean(df ** 2)):.3f}")
    for x in species:
        d = np.concatenate(df_species[x])
        if d.size == 0:
            sys.exit(f"{reference}: no atom of species {x}")
        line += f" force_rmse_{x}_meV_per_A={1000 * np.sqrt(np.mean(d ** 2)):.3f}"
    print(line)


if __name__ == "__main__":
    main()
