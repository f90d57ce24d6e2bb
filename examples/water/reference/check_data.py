#!/usr/bin/env python3
"""Sanity checks of DeePMD npy systems made by cp2k_to_deepmd.py (numpy only).

For each system: shapes and finiteness of every array, energy per atom, force RMS, virial,
frames all distinct; and, between consecutive frames of a trajectory, that the forces are
-dE/dx: the energy change E(k+1) - E(k) is compared with the work estimate
-1/2 (F(k) + F(k+1)) . (x(k+1) - x(k)) (trapezoid rule, minimum-image displacements).
With several systems, also that no frame of one appears in another.

usage: check_data.py SYSTEM [SYSTEM ...]      exits 1 when a check fails
"""
import os
import sys

import numpy as np


def load(path):
    s = {"types": np.loadtxt(os.path.join(path, "type.raw"), dtype=int).reshape(-1),
         "type_map": open(os.path.join(path, "type_map.raw")).read().split()}
    for name in ("coord", "box", "energy", "force", "virial"):
        f = os.path.join(path, "set.000", name + ".npy")
        if os.path.exists(f):
            s[name] = np.load(f)
    return s


def main():
    ok = True
    systems = {}
    for path in sys.argv[1:]:
        s = load(path)
        systems[path] = s
        nat = len(s["types"])
        nf = s["coord"].shape[0]
        print("%s: %d frames, %d atoms (%s)" % (path, nf, nat, ", ".join(
            "%d %s" % ((s["types"] == t).sum(), e) for t, e in enumerate(s["type_map"]))))
        want = {"coord": (nf, 3 * nat), "box": (nf, 9), "energy": (nf,), "force": (nf, 3 * nat),
                "virial": (nf, 9)}
        for name, shape in want.items():
            if name not in s:
                print("  %-6s missing" % name)
                continue
            a = s[name]
            good = a.shape == shape and a.dtype == np.float64 and np.isfinite(a).all()
            ok &= good
            print("  %-6s %-12s %s %s" % (name, a.shape, a.dtype, "ok" if good else "BAD"))
        e, f, x = s["energy"], s["force"], s["coord"]
        print("  energy/atom: mean %.4f eV, std over frames %.4f eV (per frame %.3f eV)"
              % (e.mean() / nat, e.std() / nat, e.std()))
        print("  force: RMS component %.3f eV/A, max |F| %.2f eV/A; per element RMS: %s"
              % (np.sqrt((f ** 2).mean()), np.linalg.norm(f.reshape(nf, nat, 3), axis=2).max(),
                 ", ".join("%s %.3f" % (el, np.sqrt((f.reshape(nf, nat, 3)[:, s["types"] == t] ** 2).mean()))
                           for t, el in enumerate(s["type_map"]))))
        if "virial" in s:
            v = s["virial"].reshape(nf, 3, 3)
            vol = np.abs(np.linalg.det(s["box"].reshape(nf, 3, 3)))
            p = np.trace(v, axis1=1, axis2=2) / 3 / vol * 160.21766208  # GPa, potential part
            asym = np.abs(v - v.transpose(0, 2, 1)).max()
            print("  virial: mean trace/3 %.2f eV; potential pressure %.2f +- %.2f GPa; max asymmetry %.1e eV"
                  % (np.trace(v, axis1=1, axis2=2).mean() / 3, p.mean(), p.std(), asym))
        # distinct frames
        d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).mean(axis=2))
        d[np.diag_indices(nf)] = np.inf
        good = d.min() > 1e-3
        ok &= good
        print("  frames distinct: min RMS coordinate difference between two frames %.4f A %s"
              % (d.min(), "ok" if good else "BAD (duplicates)"))
        # forces are -dE/dx: energy change vs trapezoidal work between consecutive frames
        L = s["box"].reshape(nf, 3, 3)
        dx = x[1:] - x[:-1]
        diag = np.stack([np.diagonal(L[k]) for k in range(nf - 1)])  # orthorhombic boxes
        dx = dx.reshape(nf - 1, nat, 3)
        dx -= diag[:, None, :] * np.round(dx / diag[:, None, :])
        work = -0.5 * ((f[1:] + f[:-1]).reshape(nf - 1, nat, 3) * dx).sum(axis=(1, 2))
        de = e[1:] - e[:-1]
        # only meaningful for consecutive MD frames (small steps); report how well they agree
        corr = np.corrcoef(de, work)[0, 1]
        slope = (de * work).sum() / (work * work).sum()
        rel = np.sqrt(((de - work) ** 2).mean()) / np.sqrt((de ** 2).mean())
        good = corr > 0.95 and 0.9 < slope < 1.1
        ok &= good
        print("  -dE/dx: dE between frames (RMS %.3f eV) vs -F.dx: correlation %.4f, slope %.3f, "
              "relative RMS difference %.3f %s" % (np.sqrt((de ** 2).mean()), corr, slope, rel,
                                                   "ok" if good else "BAD"))
    paths = list(systems)
    for i in range(len(paths)):
        for j in range(i + 1, len(paths)):
            a, b = systems[paths[i]]["coord"], systems[paths[j]]["coord"]
            if a.shape[1] != b.shape[1]:
                continue
            dmin = min(np.sqrt(((a - row) ** 2).mean(axis=1)).min() for row in b)
            good = dmin > 1e-3
            ok &= good
            print("%s vs %s: min RMS coordinate difference %.3f A %s"
                  % (paths[i], paths[j], dmin, "ok" if good else "BAD (shared frames)"))
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
