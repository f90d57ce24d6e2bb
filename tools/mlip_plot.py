"""Pictures of a training run and of `mlip test`'s results, as PNG files (docs/training.md
"Pictures"), with matplotlib (Debian: python3-matplotlib). Run by `mlip plot`, which carries this
script; it can also be run by hand: python3 tools/mlip_plot.py [--lcurve FILE] [--test PREFIX]
[--output FOLDER].

- lcurve.png: the learning curve from lcurve.out: the training (and validation) RMSEs of the
  energy per atom, the forces and the virial per atom against the step, log scale, and the
  learning rate beneath.
- parity_energy.png: predicted against reference energy per atom (PREFIX.e_peratom.out), RMSE
  in the legend (meV/atom).
- parity_forces.png: predicted against reference force components (PREFIX.f.out), one colour per
  element (PREFIX.f_elements.out), each element's RMSE in the legend (meV/Å).
"""
import argparse
import os
import sys


def fail(message):
    print(f"mlip plot: error: {message}", file=sys.stderr)
    sys.exit(1)


try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:
    fail(f"needs Python 3 with numpy and matplotlib ({e}; Debian: apt-get install python3-matplotlib)")


def read_table(path, what):
    if not os.path.isfile(path):
        fail(f"{path}: no such file (expected {what})")
    with open(path) as f:
        header = f.readline()
    if not header.startswith("#"):
        fail(f"{path}: expected a header line starting with '#' ({what}), got {header.strip()[:60]!r}")
    try:
        data = np.loadtxt(path, ndmin=2)
    except ValueError as e:
        fail(f"{path}: expected rows of numbers ({what}): {e}")
    return header[1:].split(), data


def lcurve(path, output):
    names, data = read_table(path, "lcurve.out of mlip train")
    if data.shape[0] == 0 or "step" not in names or "lr" not in names:
        fail(f"{path}: expected columns step ... lr and at least one row, got {' '.join(names)} and {data.shape[0]} row(s)")
    column = {n: data[:, k] for k, n in enumerate(names)}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    labels = {"e": "energy (eV/atom)", "f": "forces (eV/Å)", "v": "virial (eV/atom)"}
    colours = {"e": "tab:blue", "f": "tab:orange", "v": "tab:green"}
    for quantity, label in labels.items():
        for split, style in (("trn", "-"), ("val", "--")):
            key = f"rmse_{quantity}_{split}"
            if key in column and np.all(column[key] > 0):
                top.plot(column["step"], column[key], style, color=colours[quantity],
                         label=f"{label}, {'training' if split == 'trn' else 'validation'}")
    top.set_yscale("log")
    top.set_ylabel("RMSE")
    top.legend(fontsize=8)
    top.grid(True, which="both", alpha=0.3)
    top.set_title(path, fontsize=8)
    bottom.plot(column["step"], column["lr"], color="black")
    bottom.set_yscale("log")
    bottom.set_xlabel("step")
    bottom.set_ylabel("learning rate")
    bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = os.path.join(output, "lcurve.png")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def parity(ax, reference, predicted, label, unit):
    low, high = float(min(reference.min(), predicted.min())), float(max(reference.max(), predicted.max()))
    pad = 0.05 * (high - low if high > low else 1.0)
    ax.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", linewidth=0.8)
    ax.set_xlim(low - pad, high + pad)
    ax.set_ylim(low - pad, high + pad)
    ax.set_xlabel(f"reference {label} ({unit})")
    ax.set_ylabel(f"predicted {label} ({unit})")
    ax.set_aspect("equal")
    ax.grid(True, alpha=0.3)


def test_plots(prefix, output):
    outputs = []
    _, energy = read_table(prefix + ".e_peratom.out", "the energy per atom detail file of mlip test -d")
    fig, ax = plt.subplots(figsize=(6, 6))
    rmse = 1000 * np.sqrt(np.mean((energy[:, 1] - energy[:, 0]) ** 2))
    ax.scatter(energy[:, 0], energy[:, 1], s=6, alpha=0.6, label=f"{len(energy)} frames, RMSE {rmse:.3g} meV/atom")
    parity(ax, energy[:, 0], energy[:, 1], "energy", "eV/atom")
    ax.legend(fontsize=8)
    fig.tight_layout()
    outputs.append(os.path.join(output, "parity_energy.png"))
    fig.savefig(outputs[-1], dpi=120)
    plt.close(fig)

    _, forces = read_table(prefix + ".f.out", "the force detail file of mlip test -d")
    elements_path = prefix + ".f_elements.out"
    if os.path.isfile(elements_path):
        with open(elements_path) as f:
            elements = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        if len(elements) != len(forces):
            fail(f"{elements_path}: {len(elements)} elements for the {len(forces)} rows of {prefix}.f.out")
    else:
        elements = ["all"] * len(forces)
    elements = np.array(elements)
    fig, ax = plt.subplots(figsize=(6, 6))
    for element in sorted(set(elements)):
        rows = elements == element
        reference, predicted = forces[rows, :3].ravel(), forces[rows, 3:].ravel()
        rmse = 1000 * np.sqrt(np.mean((predicted - reference) ** 2))
        ax.scatter(reference, predicted, s=3, alpha=0.5, label=f"{element}: RMSE {rmse:.3g} meV/Å")
    parity(ax, forces[:, :3].ravel(), forces[:, 3:].ravel(), "force component", "eV/Å")
    ax.legend(fontsize=8, markerscale=3)
    fig.tight_layout()
    outputs.append(os.path.join(output, "parity_forces.png"))
    fig.savefig(outputs[-1], dpi=120)
    plt.close(fig)
    return outputs


def main():
    parser = argparse.ArgumentParser(prog="mlip plot", description="PNG pictures of training and test results")
    parser.add_argument("--lcurve", help="lcurve.out of mlip train (or its training folder)")
    parser.add_argument("--test", help="the -d prefix of mlip test's detail files")
    parser.add_argument("--output", default=".", help="folder for the PNG files (default: .)")
    args = parser.parse_args()
    if not args.lcurve and not args.test:
        fail("nothing to draw: give --lcurve and/or --test")
    os.makedirs(args.output, exist_ok=True)
    written = []
    if args.lcurve:
        path = os.path.join(args.lcurve, "lcurve.out") if os.path.isdir(args.lcurve) else args.lcurve
        written.append(lcurve(path, args.output))
    if args.test:
        written += test_plots(args.test, args.output)
    for path in written:
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
