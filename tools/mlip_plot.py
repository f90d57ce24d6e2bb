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
import stat
import sys


def fail(message):
    print(f"mlip plot: error: {message}", file=sys.stderr)
    sys.exit(1)


def note(message):
    print(f"mlip plot: note: {message}", file=sys.stderr)


try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:
    fail(f"the Python {sys.executable} lacks numpy or matplotlib ({e}): install them (Debian: apt-get install "
         "python3-matplotlib) or set MLIP_PYTHON to a Python 3 that has them")


def excerpt(text, limit=60):
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def read_table(path, what):
    """The column names of the '#' header and the rows of numbers of a text table. A last line cut
    short (a file still being written) is skipped with a note; anything else that is not a row of
    numbers is an error naming the file and the line."""
    if not os.path.exists(path):
        fail(f"{path}: no such file (expected {what})")
    if not os.path.isfile(path):
        fail(f"{path}: not a regular file (expected {what})")
    with open(path, "rb") as f:
        raw = f.read()
    if b"\0" in raw:
        fail(f"{path}: a binary file (it holds NUL bytes), expected {what} as text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(f"{path}: not UTF-8 text at byte {e.start} (expected {what})")
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#"):
        fail(f"{path}: expected a header line starting with '#' ({what}), got "
             f"{excerpt(lines[0]) if lines else 'an empty file'}")
    names = lines[0][1:].split()
    rows = []
    body = [(k + 1, line) for k, line in enumerate(lines) if k > 0 and line.strip() and not line.startswith("#")]
    for index, (number, line) in enumerate(body):
        words = line.split()
        try:
            row = [float(w) for w in words]
        except ValueError:
            row = None
        if row is not None and len(row) == len(names):
            rows.append(row)
            continue
        if index == len(body) - 1 and not text.endswith("\n"):
            note(f"{path}: line {number} is cut short (the file is still being written?): skipped")
            continue
        found = f"{len(words)} value(s)" if row is not None else f"{excerpt(line)}"
        fail(f"{path}: line {number}: expected {len(names)} numbers (the columns {' '.join(names)}), got {found}")
    return names, np.array(rows, dtype=float).reshape(len(rows), len(names))


def lcurve(path, output):
    names, data = read_table(path, "lcurve.out of mlip train")
    if "step" not in names or "lr" not in names:
        fail(f"{path}: expected the columns step ... lr of lcurve.out, got {' '.join(names)}")
    if data.shape[0] == 0:
        fail(f"{path}: no rows yet (the header only): nothing to draw")
    column = {n: data[:, k] for k, n in enumerate(names)}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    labels = {"e": "energy (eV/atom)", "f": "forces (eV/Å)", "v": "virial (eV/atom)", "q": "charges (e)"}
    colours = {"e": "tab:blue", "f": "tab:orange", "v": "tab:green", "q": "tab:red"}
    drawn, left_out = 0, []
    for quantity, label in labels.items():
        for split, style in (("trn", "-"), ("val", "--")):
            key = f"rmse_{quantity}_{split}"
            if key not in column:
                continue
            values = column[key]
            usable = np.isfinite(values) & (values > 0)  # a log scale: NaN, inf and 0 cannot be drawn
            if not np.any(usable):
                left_out.append(key)
                continue
            if not np.all(usable):
                note(f"{path}: {key}: {int(np.sum(~usable))} of {len(values)} value(s) NaN, infinite or 0: left out")
            top.plot(column["step"][usable], values[usable], style, color=colours[quantity],
                     label=f"{label}, {'training' if split == 'trn' else 'validation'}")
            drawn += 1
    if drawn == 0:
        plt.close(fig)
        fail(f"{path}: every RMSE column ({' '.join(left_out) or 'none'}) is NaN, infinite or 0: nothing to draw")
    if left_out:
        note(f"{path}: {' '.join(left_out)}: no finite positive value: not drawn")
    top.set_yscale("log")
    top.set_ylabel("RMSE")
    top.legend(fontsize=8)
    top.grid(True, which="both", alpha=0.3)
    top.set_title(path, fontsize=8)
    lr_usable = np.isfinite(column["lr"]) & (column["lr"] > 0)
    bottom.plot(column["step"][lr_usable], column["lr"][lr_usable], color="black")
    bottom.set_yscale("log")
    bottom.set_xlabel("step")
    bottom.set_ylabel("learning rate")
    bottom.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = os.path.join(output, "lcurve.png")
    save(fig, out, [path])
    return out


def detail_files(prefix):
    return [prefix + suffix for suffix in (".e.out", ".e_peratom.out", ".f.out", ".f_elements.out", ".v.out")]


def save(fig, out, inputs):
    """Writes the picture to `out`: a regular file (or a new one), never one of the files read."""
    if os.path.exists(out):
        mode = os.stat(out).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
                    else "a character device" if stat.S_ISCHR(mode) else "not a regular file")
            plt.close(fig)
            fail(f"{out}: is {kind}; mlip plot writes its PNG files to regular files only")
        for path in inputs:
            if os.path.exists(path) and os.path.samefile(out, path):
                plt.close(fig)
                fail(f"{out}: that is {path}, which mlip plot reads; expected another output folder (-o)")
    try:
        fig.savefig(out, dpi=120)
    except (OSError, ValueError) as e:  # io.UnsupportedOperation is both
        fail(f"{out}: cannot write the picture ({getattr(e, 'strerror', None) or e})")
    finally:
        plt.close(fig)


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


def finite_rows(path, data):
    """The rows of a detail file without NaN or infinite values (noted), at least one."""
    keep = np.all(np.isfinite(data), axis=1)
    if not np.any(keep):
        fail(f"{path}: {'no rows' if len(data) == 0 else 'every row holds NaN or infinite values'}: nothing to draw")
    if not np.all(keep):
        note(f"{path}: {int(np.sum(~keep))} of {len(data)} row(s) with NaN or infinite values: left out")
    return data[keep]


def test_plots(prefix, output):
    outputs = []
    _, energy = read_table(prefix + ".e_peratom.out", "the energy per atom detail file of mlip test -d")
    if energy.shape[1] < 2:
        fail(f"{prefix}.e_peratom.out: expected two columns (reference, prediction), got {energy.shape[1]}")
    energy = finite_rows(prefix + ".e_peratom.out", energy)
    fig, ax = plt.subplots(figsize=(6, 6))
    rmse = 1000 * np.sqrt(np.mean((energy[:, 1] - energy[:, 0]) ** 2))
    ax.scatter(energy[:, 0], energy[:, 1], s=6, alpha=0.6, label=f"{len(energy)} frames, RMSE {rmse:.3g} meV/atom")
    parity(ax, energy[:, 0], energy[:, 1], "energy", "eV/atom")
    ax.legend(fontsize=8)
    fig.tight_layout()
    outputs.append(os.path.join(output, "parity_energy.png"))
    save(fig, outputs[-1], detail_files(prefix))

    _, forces = read_table(prefix + ".f.out", "the force detail file of mlip test -d")
    if forces.shape[1] < 6:
        fail(f"{prefix}.f.out: expected six columns (reference and predicted x y z), got {forces.shape[1]}")
    elements_path = prefix + ".f_elements.out"
    if os.path.isfile(elements_path):
        with open(elements_path) as f:
            elements = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        if len(elements) != len(forces):
            fail(f"{elements_path}: {len(elements)} elements for the {len(forces)} rows of {prefix}.f.out")
    else:
        elements = ["all"] * len(forces)
    elements = np.array(elements)
    keep = np.all(np.isfinite(forces), axis=1)
    if not np.any(keep):
        fail(f"{prefix}.f.out: {'no rows' if len(forces) == 0 else 'every row holds NaN or infinite values'}: "
             "nothing to draw")
    if not np.all(keep):
        note(f"{prefix}.f.out: {int(np.sum(~keep))} of {len(forces)} row(s) with NaN or infinite values: left out")
    forces, elements = forces[keep], elements[keep]
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
    save(fig, outputs[-1], detail_files(prefix))
    return outputs


def main():
    parser = argparse.ArgumentParser(prog="mlip plot", description="PNG pictures of training and test results")
    parser.add_argument("--lcurve", help="lcurve.out of mlip train (or its training folder)")
    parser.add_argument("--test", help="the -d prefix of mlip test's detail files")
    parser.add_argument("--output", default=".", help="folder for the PNG files (default: .)")
    args = parser.parse_args()
    if not args.lcurve and not args.test:
        fail("nothing to draw: give --lcurve and/or --test")
    check_output_folder(args.output)
    written = []
    if args.lcurve:
        path = os.path.join(args.lcurve, "lcurve.out") if os.path.isdir(args.lcurve) else args.lcurve
        written.append(lcurve(path, args.output))
    if args.test:
        written += test_plots(args.test, args.output)
    for path in written:
        print(f"wrote {path}")


def check_output_folder(output):
    """The output folder exists (made when missing) and is a writable folder."""
    if os.path.exists(output) and not os.path.isdir(output):
        kind = "a FIFO" if stat.S_ISFIFO(os.stat(output).st_mode) else "a file"
        fail(f"{output}: is {kind}, expected a folder for the PNG files (-o)")
    try:
        os.makedirs(output, exist_ok=True)
    except OSError as e:
        fail(f"{output}: cannot make the folder for the PNG files ({e.strerror})")
    if not os.access(output, os.W_OK):
        fail(f"{output}: cannot write in this folder (permission denied)")


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # anything unforeseen: one line, never a traceback
        fail(f"{type(e).__name__}: {e}")
