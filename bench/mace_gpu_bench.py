#!/usr/bin/env python3
"""Training-step speed of a peer: MACE (pip `mace-torch`), on the frames and the device that
bench/gpu_bench.sh times mlip's equivariant model on (the water example's 190 training frames of
96 atoms), with a MACE model of the same size as examples/water/equivariant.yaml's (read from that
file by bench/mace_peer_bench.py's reader: r_max, features, l_max, layers, Bessel functions, the
cutoff polynomial, the radial MLP, correlation; `--correlations` gives one model per value).

A step is MACE's own `mace.tools.train.take_step`, as `mace_run_train` runs it: the batch copied to
the device, forward with forces, the weighted energy-and-forces loss, backward, gradient clipping
at 10, AMSGrad Adam, the moving average of the weights (decay 0.999, as the example's ema_decay),
and the loss read back to the host. Per row: ms per step (median, 10th-90th percentile over the
timed steps after the warm-up steps, the device synchronised before each clock read), frames/s
(batch / median) and the peak memory the allocator held (`torch.cuda.max_memory_allocated`).

Needs mace-torch and its pure-Python needs beside a PyTorch (bench/mace_peer_bench.py says how to
install them here). On a lent GPU machine, tools/gpu_check.sh's `peers` stage unpacks the wheels
that tools/gpu_bundle.sh --peers puts in .gpu-deps/peers; the packages with compiled parts that
mace-torch imports but a training step never calls (pandas, h5py, lmdb, orjson) are then
replaced by placeholders that fail when used, and matscipy's neighbour list by ASE's
`primitive_neighbor_list` (the same "ijS" quantities), see `install_placeholders`.

usage: mace_gpu_bench.py [--device cuda] [--batches 1 4 16] [--steps 50] [--warmup 10]
                         [--precision float32] [--correlations N ...] [--placeholders auto|yes|no]
"""
import argparse
import importlib
import importlib.machinery
import os
import statistics
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
EXAMPLE = os.path.join(ROOT, "examples", "water")


class _Placeholder:
    """What a placeholder module gives for any name: fails, naming the module, when called."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"mace_gpu_bench: {self._name} is a placeholder (the package is not installed)")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{self._name}.{attr}")

    def __mro_entries__(self, bases):
        return (object,)


def _placeholder_module(name):
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so that submodules import too
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Placeholder(f"{name}.{attr}")

    module.__getattr__ = attribute
    return module


def install_placeholders(force):
    """Placeholders for the compiled packages mace-torch imports but a training step does not call;
    matscipy's neighbour list by ASE's. Only for packages that do not import (or all, with force)."""
    replaced = []
    for name in ("pandas", "h5py", "lmdb", "orjson", "matscipy"):
        if not force:
            try:
                importlib.import_module(name)
                continue
            except ImportError:
                pass
        module = _placeholder_module(name)
        sys.modules[name] = module
        if name == "matscipy":
            from ase.neighborlist import primitive_neighbor_list
            neighbours = _placeholder_module("matscipy.neighbours")

            def neighbour_list(quantities, pbc, cell, positions, cutoff, **kwargs):
                return primitive_neighbor_list(quantities, pbc, cell, positions, cutoff, self_interaction=False,
                                               use_scaled_positions=False)

            neighbours.neighbour_list = neighbour_list
            module.neighbours = neighbours
            sys.modules["matscipy.neighbours"] = neighbours
            replaced.append("matscipy (neighbour list: ASE's primitive_neighbor_list)")
        else:
            replaced.append(name)
    return replaced


def water_frames():
    """The example's training frames as ASE Atoms with energy and forces (eV, eV/Å)."""
    from ase import Atoms
    data = os.path.join(EXAMPLE, "data", "train")
    types_ = np.loadtxt(os.path.join(data, "type.raw"), dtype=int).reshape(-1)
    names = open(os.path.join(data, "type_map.raw")).read().split()
    sets = os.path.join(data, "set.000")
    coord = np.load(os.path.join(sets, "coord.npy")).reshape(-1, len(types_), 3)
    box = np.load(os.path.join(sets, "box.npy")).reshape(-1, 3, 3)
    energy = np.load(os.path.join(sets, "energy.npy")).reshape(-1)
    force = np.load(os.path.join(sets, "force.npy")).reshape(-1, len(types_), 3)
    frames = []
    for k in range(len(energy)):
        atoms = Atoms([names[t] for t in types_], positions=coord[k], cell=box[k], pbc=True)
        atoms.info["REF_energy"] = float(energy[k])
        atoms.arrays["REF_forces"] = force[k]
        frames.append(atoms)
    return frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--steps", type=int, default=50, help="timed steps per batch size")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--precision", default="float32", choices=["float32", "float64"])
    ap.add_argument("--correlations", type=int, nargs="+", default=[0],
                    help="one model per value; 0: the input's (mlip's default 1)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    ap.add_argument("--input", default=os.path.join(EXAMPLE, "equivariant.yaml"))
    ap.add_argument("--placeholders", default="auto", choices=["auto", "yes", "no"])
    args = ap.parse_args()

    import torch
    import torch._dynamo  # noqa: F401  (before the placeholders: it looks up optional packages)
    replaced = install_placeholders(args.placeholders == "yes") if args.placeholders != "no" else []
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"mace_gpu_bench: --device {args.device}, but torch sees no CUDA device", file=sys.stderr)
        return 2
    import mace
    from mace import data as mace_data
    from mace import modules, tools
    from mace.tools import torch_geometric
    from mace.tools.train import take_step
    from torch_ema import ExponentialMovingAverage
    from mace_peer_bench import build_mace, model_section

    dtype = torch.float64 if args.precision == "float64" else torch.float32
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    torch.set_default_dtype(dtype)
    keys = model_section(args.input)
    z_table = tools.AtomicNumberTable([1, 8])
    configs = [mace_data.config_from_atoms(a, key_specification=mace_data.KeySpecification(
        info_keys={"energy": "REF_energy"}, arrays_keys={"forces": "REF_forces"})) for a in water_frames()]
    dataset = [mace_data.AtomicData.from_config(c, z_table=z_table, cutoff=float(keys.get("r_max", 4.5)))
               for c in configs]
    print(f"MACE {mace.__version__} (PyTorch {torch.__version__}, {args.device}"
          f"{' ' + torch.cuda.get_device_name(device) if gpu else ''}), models of "
          f"{os.path.relpath(args.input, ROOT)}'s size; {len(dataset)} frames of {len(configs[0].atomic_numbers)} atoms"
          + (f"; placeholders for {', '.join(replaced)}" if replaced else ""))
    print("| model | precision | device | batch | median ms/step | p10-p90 | frames/s | timed steps | peak MiB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for correlation in args.correlations:
        if correlation:
            keys["correlation"] = str(correlation)
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"mace_gpu_bench_{os.getpid()}.model")
        irreps, nparams = build_mace(keys, dtype, path)
        model = torch.load(path, weights_only=False).to(device)
        os.remove(path)
        name = f"MACE ({irreps}, {keys.get('num_layers')} layers, correlation {keys.get('correlation', 1)}, {nparams} parameters)"
        loss_fn = modules.WeightedEnergyForcesLoss(energy_weight=1.0, forces_weight=100.0).to(device)
        output_args = {"forces": True, "virials": False, "stress": False}
        for batch in args.batches:
            loader = torch_geometric.dataloader.DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True)
            optimizer = torch.optim.Adam(model.parameters(), lr=0.005, amsgrad=True)
            ema = ExponentialMovingAverage(model.parameters(), decay=0.999)
            if gpu:
                torch.cuda.reset_peak_memory_stats(device)
            times, done = [], 0
            while done < args.warmup + args.steps:
                for data in loader:
                    if gpu:
                        torch.cuda.synchronize(device)
                    t0 = time.perf_counter()
                    take_step(model, loss_fn, data, optimizer, ema, output_args, 10.0, device)
                    if gpu:
                        torch.cuda.synchronize(device)
                    if done >= args.warmup:
                        times.append(time.perf_counter() - t0)
                    done += 1
                    if done >= args.warmup + args.steps:
                        break
            ms = sorted(t * 1e3 for t in times)
            median = statistics.median(ms)
            p10, p90 = ms[int(0.1 * (len(ms) - 1))], ms[int(0.9 * (len(ms) - 1))]
            peak = f"{torch.cuda.max_memory_allocated(device) / 2**20:.0f}" if gpu else ""
            print(f"| {name} | {args.precision} | {args.device} | {batch} | {median:.2f} | {p10:.2f}-{p90:.2f} | "
                  f"{batch / median * 1e3:.0f} | {len(ms)} | {peak} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
