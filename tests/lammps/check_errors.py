"""Every input pair_style mlip refuses (docs/lammps.md "Errors"), through the real LAMMPS: exit
code 1 (not a crash) and a message that says what was expected and what was found.

usage: check_errors.py <mlip> <frozen.pt> <checkpoint.pt> <water npy system> <work dir>
"""
import os
import shutil
import sys

from lammps_util import run_mlip_lammps, water_frame, write_data

mlip, model, checkpoint, water, work = sys.argv[1:6]
model = os.path.abspath(model)
checkpoint = os.path.abspath(checkpoint)
os.makedirs(work, exist_ok=True)
atoms = water_frame(water)
write_data(atoms, os.path.join(work, "conf.data"), ["O", "H"])
# Atoms on top of each other: id 2 on id 1 in the data file; or put there after 3 steps.
overlapping = atoms.copy()
overlapping.positions[1] = overlapping.positions[0]
write_data(overlapping, os.path.join(work, "overlap.data"), ["O", "H"])
equivariant = os.path.join(os.path.dirname(model), "eq.pt")
# A committee member of its own, which out_file must never replace.
member = os.path.join(work, "c1.pt")
member_link = os.path.join(work, "c1_link.pt")
shutil.copyfile(model, member)
if not os.path.lexists(member_link):
    os.symlink(member, member_link)
with open(member, "rb") as f:
    member_bytes = f.read()
with open(os.path.join(work, "not_a_model.pt"), "w") as f:
    f.write("this is not a TorchScript archive\n")


def script(units="metal", style="atomic", newton="on", pair=f"mlip {model}", coeff="* * O H", data="conf.data",
           run="run 0"):
    # The water data file, or for another atom style a small lattice of the same two types.
    atoms_in = (f"read_data {data}" if style == "atomic" else
                "lattice sc 3.0\nregion box block 0 3 0 3 0 3\ncreate_box 2 box\ncreate_atoms 1 box\nmass * 1.0")
    return f"""units {units}
atom_style {style}
newton {newton}
atom_modify map yes
boundary p p p
{atoms_in}
pair_style {pair}
pair_coeff {coeff}
{run}
"""


cases = [
    ("units real", script(units="real"), "expected 'units metal', got 'units real'"),
    ("newton off", script(newton="off"), "expected 'newton on'"),
    ("atom_style full", script(style="full"), "expected 'atom_style atomic' or 'atom_style charge', got 'atom_style full'"),
    ("kspace pppm", script(pair=f"mlip {model} kspace pppm"), "kspace: expected auto, ewald or mesh, got 'pppm'"),
    ("element not in the model", script(coeff="* * O C"), "atom type 2 is 'C', which is not in the model (O H)"),
    ("too few names", script(coeff="* * O"), "expected 'pair_coeff * * <name>'"),
    ("not * *", script(coeff="1 1 O H"), "Incorrect args for pair coefficients"),  # LAMMPS' own check
    ("missing file", script(pair="mlip nowhere.pt"), "nowhere.pt: no such file"),
    ("not a model", script(pair=f"mlip {os.path.join(work, 'not_a_model.pt')}"), "not a TorchScript model"),
    ("a checkpoint", script(pair=f"mlip {checkpoint}"), "a training checkpoint; MD needs a frozen model"),
    ("bad device", script(pair=f"mlip {model} device gpu"), "expected cpu, cuda or cuda:K, got \"gpu\""),
    ("bad keyword", script(pair=f"mlip {model} dev cpu"), "expected another model file or a keyword (device, "),
    ("overlapping atoms", script(data=os.path.join(work, "overlap.data")),
     "step 0: MD atoms: atoms id 1 and id 2 are 0 Å apart, expected at least 0.001 Å"),
    ("overlap after 3 steps", script(run=f"velocity all create 300 1\nfix nve all nve\nrun 3\nset atom 2 x $(x[1]:%.17g) y $(y[1]:%.17g) z $(z[1]:%.17g)\nrun 1"),
     "step 3: MD atoms: atoms id 1 and id 2 are 0 Å apart"),
    ("no model", script(pair="mlip"),
     "expected 'pair_style mlip <frozen_model.pt> [<more models> ...] [device cpu|cuda|cuda:K] [evaluation "
     "auto|torchscript] [exchange yes|no] [pairs auto|host|device] [kspace auto|ewald|mesh] [out_freq N] [out_file F] "
     "[atomic] [relative L] [relative_v L]', got no model file"),
    ("bad evaluation", script(pair=f"mlip {model} evaluation fast"), "evaluation: expected auto or torchscript, got 'fast'"),
    ("bad exchange", script(pair=f"mlip {model} exchange maybe"), "exchange: expected yes or no, got 'maybe'"),
    ("bad pairs", script(pair=f"mlip {model} pairs gpu"), "pairs: expected auto, host or device, got 'gpu'"),
    ("keyword without value", script(pair=f"mlip {model} device"), "device: expected a value after it"),
    # A committee (docs/lammps.md "A committee of models").
    ("committee keyword, one model", script(pair=f"mlip {model} out_freq 10"),
     "expected two or more model files, got one"),
    ("out_freq 0", script(pair=f"mlip {model} {model} out_freq 0"),
     "out_freq: expected a positive whole number of steps, got '0'"),
    ("relative -1", script(pair=f"mlip {model} {model} relative -1"),
     "relative: expected a number >= 0 (eV/Å), got '-1'"),
    ("unwritable out_file", script(pair=f"mlip {model} {model} out_file /nonexistent/devi.out"),
     "out_file /nonexistent/devi.out: cannot write the model deviation file"),
    # docs/robustness.md "An output is never one of the inputs": the member is kept, byte for byte.
    ("out_file is a member", script(pair=f"mlip {model} {member} out_file {member}"),
     f"out_file {member}: that is the model {member}, which this command reads"),
    ("out_file links a member", script(pair=f"mlip {model} {member} out_file {member_link}"),
     f"out_file {member_link}: that is the model {member} (the same file by another name)"),
]
if os.path.exists(equivariant):
    cases.append(("committee, other cutoff", script(pair=f"mlip {model} {equivariant}"),
                  "the models of a committee must have the same cutoff: "))
    other_types = os.path.join(os.path.dirname(model), "eqho.pt")
    cases.append(("committee, other type map", script(pair=f"mlip {equivariant} {other_types}"),
                  f"the models of a committee must have the same type map: {equivariant} has [O H], {other_types} "
                  "has [H O]"))
if os.path.exists(equivariant):  # its own inference with features exchanged or not, and the TorchScript forward
    cases.append(("overlapping atoms, equivariant", script(pair=f"mlip {equivariant}", data=os.path.join(work, "overlap.data")),
                  "step 0: MD atoms: atoms id 1 and id 2 are 0 Å apart"))
    cases.append(("overlapping atoms, equivariant, exchange no",
                  script(pair=f"mlip {equivariant} exchange no", data=os.path.join(work, "overlap.data")),
                  "step 0: MD atoms: atoms id 1 and id 2 are 0 Å apart"))
    cases.append(("overlapping atoms, equivariant torchscript",
                  script(pair=f"mlip {equivariant} evaluation torchscript", data=os.path.join(work, "overlap.data")),
                  "step 0: MD atoms: atoms id 1 and id 2 are 0 Å apart"))
    cases.append(("overlapping atoms, equivariant torchscript, pairs device",
                  script(pair=f"mlip {equivariant} evaluation torchscript pairs device",
                         data=os.path.join(work, "overlap.data")),
                  "step 0: MD atoms: atoms id 1 and id 2 are 0 Å apart"))
try:
    import torch
    if not torch.cuda.is_available():
        cases.append(("cuda without CUDA", script(pair=f"mlip {model} device cuda"), "no CUDA support"))
except ImportError:
    pass

failed = []
for ranks in (1, 2):
    for name, text, expected in cases:
        if ranks == 2 and name not in ("units real", "element not in the model", "not a model", "overlapping atoms",
                                          "overlapping atoms, equivariant", "unwritable out_file",
                                          "committee, other cutoff", "out_file is a member"):
            continue
        folder = os.path.join(work, f"{name.replace(' ', '_')}-np{ranks}")
        os.makedirs(folder, exist_ok=True)
        os.symlink(os.path.join(work, "conf.data"), os.path.join(folder, "conf.data")) if not os.path.exists(
            os.path.join(folder, "conf.data")) else None
        proc = run_mlip_lammps(mlip, folder, text, ranks=ranks, check=False)
        screen = open(os.path.join(folder, "screen.txt")).read() if os.path.exists(os.path.join(folder, "screen.txt")) else ""
        output = proc.stdout + proc.stderr + screen
        line = next((l for l in output.splitlines() if "ERROR" in l), "(no ERROR line)")
        ok = proc.returncode == 1 and expected in output
        print(f"{'ok  ' if ok else 'FAIL'} -np {ranks} {name:26s} exit {proc.returncode}: {line.strip()}")
        if not ok:
            failed.append(f"{name} (-np {ranks}): exit {proc.returncode}, expected 1 and the message '{expected}';"
                          f" output:\n{output[-2000:]}")
with open(member, "rb") as f:
    if f.read() != member_bytes:
        failed.append(f"{member}: the committee member was changed by out_file")
if failed:
    print("FAILED:\n" + "\n".join(failed))
    sys.exit(1)
