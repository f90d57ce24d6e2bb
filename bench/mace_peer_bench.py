#!/usr/bin/env python3
"""MD speed of a peer: MACE (pip `mace-torch`) through its ASE calculator, on the frames
bench/md_bench.sh runs mlip's equivariant model on (the water example's box, replicated), with a
MACE model of the same size as examples/water/equivariant.yaml's (read from that file: r_max,
features, l_max, layers, Bessel functions, the cutoff polynomial, the radial MLP, correlation).
The weights are untrained: the speed does not depend on them.

Per row: microseconds per atom-step (one energy-and-forces call of the calculator, with its
neighbour list, on positions moved by up to 0.01 Å each step so that nothing is cached), median
over the timed steps after one warm-up step, and the peak resident memory of the process.

Needs mace-torch and ASE beside a PyTorch; this project keeps them outside the repository:
    P=~/.cache/mlip/torch-2.11.0/bin/python          # tools/setup.sh --torch pip made it
    $P -m pip install --target ~/.cache/mlip/peers-site --no-deps mace-torch e3nn opt_einsum \\
        opt_einsum_fx matscipy torch-ema ase prettytable torchmetrics lightning-utilities pandas \\
        h5py lmdb orjson tqdm wcwidth
    PYTHONPATH=~/.cache/mlip/peers-site $P bench/mace_peer_bench.py --sizes 1536 12288

usage: mace_peer_bench.py [--sizes N ...] [--precisions float64 float32] [--steps K] [--threads T]
"""
import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "water")
REPLICAS = {96: (1, 1, 1), 192: (2, 1, 1), 768: (2, 2, 2), 1536: (4, 2, 2), 12288: (8, 4, 4), 98304: (16, 8, 8)}


def model_section(path):
    """The scalar keys of the `model:` section of an mlip input (a flat YAML subset)."""
    keys, inside = {}, False
    for line in open(path):
        if line.startswith("model:"):
            inside = True
            continue
        if inside and line and not line[0].isspace():
            break
        if inside and ":" in line:
            k, v = line.strip().split(":", 1)
            keys[k.strip()] = v.split("#")[0].strip()
    return keys


def water_box(natoms):
    """The example's validation frame 0 (96 atoms, O and H), replicated to `natoms`."""
    from ase import Atoms
    data = os.path.join(EXAMPLE, "data", "valid")
    types = np.loadtxt(os.path.join(data, "type.raw"), dtype=int).reshape(-1)
    names = open(os.path.join(data, "type_map.raw")).read().split()
    coord = np.load(os.path.join(data, "set.000", "coord.npy"))[0].reshape(-1, 3)
    box = np.load(os.path.join(data, "set.000", "box.npy"))[0].reshape(3, 3)
    atoms = Atoms([names[t] for t in types], positions=coord, cell=box, pbc=True)
    return atoms.repeat(REPLICAS[natoms])


def build_mace(keys, dtype, path):
    import torch
    from e3nn import o3
    from mace import modules
    torch.set_default_dtype(dtype)
    f, l_max = int(keys.get("num_features", 16)), int(keys.get("l_max", 1))
    parity = keys.get("parity", "true") == "true"
    irreps = "+".join(f"{f}x{l}{'e' if (not parity or l % 2 == 0) else 'o'}" for l in range(l_max + 1))
    width, depth = int(keys.get("radial_width", 32)), int(keys.get("radial_depth", 2))
    model = modules.MACE(
        r_max=float(keys.get("r_max", 4.5)),
        num_bessel=int(keys.get("num_bessels", 8)),
        num_polynomial_cutoff=int(keys.get("polynomial_p", 6)),
        max_ell=l_max,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticInteractionBlock"],
        num_interactions=int(keys.get("num_layers", 2)),
        num_elements=2,
        hidden_irreps=o3.Irreps(irreps),
        MLP_irreps=o3.Irreps(f"{f}x0e"),
        atomic_energies=np.array([-10.0, -5.0]),
        avg_num_neighbors=30.0,
        atomic_numbers=[1, 8],
        correlation=int(keys.get("correlation", 1)),
        gate=torch.nn.functional.silu,
        radial_MLP=[width] * depth,
    )
    torch.save(model, path)
    return irreps, sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1536, 12288])
    ap.add_argument("--precisions", nargs="+", default=["float64", "float32"])
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: 3 at 12,288 atoms, 6 below)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--input", default=os.path.join(EXAMPLE, "equivariant.yaml"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.child:
        # One process per row, so that each row's peak memory is its own.
        import subprocess
        first = True
        for precision in args.precisions:
            for natoms in args.sizes:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--sizes", str(natoms), "--precisions",
                       precision, "--steps", str(args.steps), "--threads", str(args.threads), "--input", args.input]
                out = subprocess.run(cmd, capture_output=True, text=True)
                lines = [l for l in out.stdout.splitlines() if l.startswith("|") or l.startswith("MACE")]
                if out.returncode != 0:
                    print(f"| MACE | {precision} | {natoms} | {args.threads} | failed | | | | {out.stderr.strip()[-200:]} |")
                    continue
                print("\n".join(lines if first else lines[3:]), flush=True)
                first = False
        return 0
    import torch
    torch.set_num_threads(args.threads)
    import mace
    from mace.calculators import MACECalculator
    keys = model_section(args.input)
    print(f"MACE {mace.__version__} (PyTorch {torch.__version__}, {args.threads} threads), model of "
          f"{os.path.relpath(args.input, ROOT)}'s size")
    print("| model | precision | atoms | threads | µs/atom-step | s/step | steps | peak RSS MiB | notes |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        for precision in args.precisions:
            dtype = torch.float64 if precision == "float64" else torch.float32
            path = os.path.join(tmp, f"mace-{precision}.model")
            irreps, nparams = build_mace(keys, dtype, path)
            calc = MACECalculator(model_paths=path, device="cpu", default_dtype=precision)
            for natoms in args.sizes:
                atoms = water_box(natoms)
                atoms.calc = calc
                steps = args.steps or (3 if natoms >= 12288 else 6)
                base = atoms.get_positions()
                times = []
                for k in range(steps + 1):
                    atoms.set_positions(base + rng.uniform(-0.01, 0.01, base.shape))
                    t0 = time.perf_counter()
                    atoms.get_potential_energy()
                    atoms.get_forces()
                    if k > 0:
                        times.append(time.perf_counter() - t0)
                step = statistics.median(times)
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                print(f"| MACE ({irreps}, {keys.get('num_layers')} layers, correlation {keys.get('correlation', 1)}, "
                      f"{nparams} parameters) | {precision} | {natoms} | {args.threads} | {step / natoms * 1e6:.1f} | "
                      f"{step:.3f} | {steps} | {rss:.0f} | ASE calculator, matscipy neighbour list |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
