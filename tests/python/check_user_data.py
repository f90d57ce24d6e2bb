"""Users' own data, as MACE's users keep it, and pictures of the results.

Label keys against ASE (docs/data.md "Label keys"): a Lennard-Jones crystal labelled by ASE's
own calculator and written by ASE as MACE's users keep their data (REF_energy, REF_forces,
REF_stress in Voigt order), trained, frozen and tested by mlip with energy_key, forces_key and
stress_key. The reference virials `mlip test -d` reads must be ASE's stress turned into a
virial, W = -dE/dε, checked here against a finite difference of the energy under strain (an
independent reference for the sign and the Voigt order); the reference energies and forces
must be ASE's. Without the keys, mlip must refuse the file naming the frame and the keys.

`mlip neighbor-stat` takes the same keys.

Weights (docs/training.md "Weights"): the first step's training loss (computed before any update)
with config_type_weights {crystal: 4}, and with config_weight=4 on every frame, is twice the
unweighted one (the loss is a weighted mean of squares; lcurve prints its square root), and the
RMSEs are the same.

Reference energies (docs/training.md "Reference energies"): isolated atoms in the same file
(config_type=IsolatedAtom, no forces, as MACE's users mark them) are taken out of training and,
with model.e0s: isolated, are each model's per-type reference: the frozen model's energy of an
isolated atom must equal its E0 (equivariant and se_e2_a).

`mlip test` reports errors per config type, and `--xyz` writes the frames with the predictions
as extended XYZ that ASE reads: its mlip_energy and mlip_forces must be the .e.out and .f.out
predictions, mlip_stress the virial over the volume with ASE's sign.

Pictures (docs/training.md "Pictures"): `mlip plot` draws lcurve.png and the two parity plots;
each must be a PNG of a reasonable size that is not blank (many colours, pixels that vary).

usage: check_user_data.py <mlip> <work dir>
"""
import os
import subprocess
import sys

import numpy as np
from ase.build import bulk
from ase.calculators.lj import LennardJones
from ase.io import write

mlip, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(7)
calc = LennardJones(sigma=2.0, epsilon=0.01, rc=5.0, smooth=True)


def energy_under_strain(atoms, strain):
    a = atoms.copy()
    a.calc = calc
    a.set_cell(atoms.cell.array @ (np.eye(3) + strain), scale_atoms=True)
    return a.get_potential_energy()


frames, references = [], []
for k in range(4):
    atoms = bulk("Ar", "fcc", a=3.2, cubic=True).repeat((2, 2, 2))
    atoms.set_cell(atoms.cell.array @ (np.eye(3) + 0.03 * rng.standard_normal((3, 3))), scale_atoms=True)
    atoms.positions += 0.08 * rng.standard_normal(atoms.positions.shape)
    atoms.calc = calc
    energy, forces = atoms.get_potential_energy(), atoms.get_forces()
    stress = atoms.get_stress(voigt=True)  # eV/Å³, xx yy zz yz xz xy
    # W = -dE/dε (symmetric strain), by central differences: independent of the stress formula.
    h = 1e-5
    virial = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            e = np.zeros((3, 3))
            e[a, b] += h / 2
            e[b, a] += h / 2
            virial[a, b] = -(energy_under_strain(atoms, e) - energy_under_strain(atoms, -e)) / (2 * h)
    out = atoms.copy()
    out.calc = None  # no calculator: ASE would write its results under the default keys
    out.info["REF_energy"] = energy
    out.info["REF_stress"] = stress
    out.info["config_type"] = "crystal"
    out.arrays["REF_forces"] = forces
    frames.append(out)
    references.append((energy, forces, virial))
data = os.path.join(work, "lj.xyz")
write(data, frames, format="extxyz")
text = open(data).read()
assert "REF_stress" in text and "energy=" not in text.replace("REF_energy=", ""), "ASE wrote unexpected keys"

with open(os.path.join(work, "input.yaml"), "w") as f:
    f.write(f"""model:
  type_map: [Ar]
  descriptor: {{type: se_e2_a, sel: [60], rcut: 4.5, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 2}}
  fitting_net: {{neuron: [8, 8], seed: 2}}
learning_rate: {{start_lr: 0.001, stop_lr: 0.0005, decay_steps: 5}}
loss: {{start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1, start_pref_v: 0.1, limit_pref_v: 0.1}}
training:
  training_data: {{systems: [{data}], batch_size: 1, energy_key: REF_energy, forces_key: REF_forces, stress_key: REF_stress}}
  numb_steps: 2
  seed: 1
  disp_freq: 1
  save_freq: 2
""")


def run(*args, check=True):
    proc = subprocess.run([mlip, *args], cwd=work, capture_output=True, text=True)
    if check and proc.returncode != 0:
        sys.exit(f"FAILED: mlip {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


run("train", "input.yaml", "-o", "run")
run("freeze", "-c", "run", "-o", "model.pt")
run("test", "-m", "model.pt", "-s", data, "-d", "detail", "--energy-key", "REF_energy", "--forces-key", "REF_forces",
    "--stress-key", "REF_stress")
failed = []
e_out = np.loadtxt(os.path.join(work, "detail.e.out"), ndmin=2)
v_out = np.loadtxt(os.path.join(work, "detail.v.out"), ndmin=2)
f_out = np.loadtxt(os.path.join(work, "detail.f.out"), ndmin=2)
reference_e = np.array([r[0] for r in references])
reference_f = np.round(np.concatenate([r[1] for r in references]), 8)  # ASE writes 8 decimals
reference_v = np.stack([r[2].reshape(9) for r in references])
checks = [("energies", e_out[:, 0], reference_e, 1e-10), ("forces", f_out[:, :3], reference_f, 1e-9),
          ("virials (-stress * volume against -dE/dstrain)", v_out[:, :9], reference_v, 1e-6)]
for name, got, want, tol in checks:
    diff = np.abs(got - want).max() / max(np.abs(want).max(), 1e-12)
    print(f"reference {name}: max relative difference {diff:.2e} (tolerance {tol:g})")
    if not diff <= tol:
        failed.append(name)
print(f"largest virial component {np.abs(reference_v).max():.3e} eV")

stat = run("neighbor-stat", "-s", data, "-r", "4.5", "--energy-key", "REF_energy", "--forces-key", "REF_forces")
print("neighbor-stat with the keys:", stat.stdout.strip().splitlines()[0])

proc = run("test", "-m", "model.pt", "-s", data, check=False)
message = proc.stderr + proc.stdout
expected = ["lj.xyz:2 (frame 0): no energy and no forces", "REF_energy", "REF_stress", "REF_forces", "--energy-key"]
print("without the keys:", message.strip().splitlines()[-1] if message.strip() else "(nothing)")
if proc.returncode != 1 or not all(e in message for e in expected):
    failed.append(f"the refusal without keys (exit {proc.returncode}, expected 1 and {expected})")
# Weights: the first step's loss, weighted by config type and by frame, against the plain one.
weighted = os.path.join(work, "lj_weighted.xyz")
with open(weighted, "w") as f:
    f.write(text.replace("config_type=crystal", "config_type=crystal config_weight=4.0"))
base_input = open(os.path.join(work, "input.yaml")).read()
with open(os.path.join(work, "by_type.yaml"), "w") as f:
    f.write(base_input.replace("  numb_steps: 2", "  numb_steps: 2\n  config_type_weights: {crystal: 4}"))
with open(os.path.join(work, "by_frame.yaml"), "w") as f:
    f.write(base_input.replace(data, weighted))
first_rows = {}
for name, yaml in (("plain", "input.yaml"), ("by_type", "by_type.yaml"), ("by_frame", "by_frame.yaml")):
    out = run("train", yaml, "-o", "w_" + name).stdout
    first_rows[name] = np.loadtxt(os.path.join(work, "w_" + name, "lcurve.out"), ndmin=2)[0]
    if name == "by_type" and "config types (frames, loss weight): crystal 4 x 4;" not in out:
        failed.append("the training summary does not report the config type's weight:\n" + out)
for name in ("by_type", "by_frame"):
    ratio = first_rows[name][1] / first_rows["plain"][1]
    same = np.allclose(first_rows[name][2:5], first_rows["plain"][2:5], rtol=1e-4)
    print(f"weight 4 {name.replace('_', ' ')}: first-step loss ratio {ratio:.5f} (expected 2), RMSEs the same: {same}")
    if not abs(ratio - 2) < 2e-4 or not same:
        failed.append(f"weights {name}: loss ratio {ratio}, RMSEs the same {same}")

# Reference energies: the crystal plus isolated atoms (MACE's marking), the equivariant model.
E0 = -0.3712345678901
with open(data) as f:
    crystal = f.read()
isolated = ('1\nProperties=species:S:1:pos:R:3 config_type=IsolatedAtom REF_energy=%.13f pbc="F F F"\n'
            'Ar 0.0 0.0 0.0\n') % E0
with_isolated = os.path.join(work, "lj_isolated.xyz")
with open(with_isolated, "w") as f:
    f.write(crystal + isolated)
single = os.path.join(work, "single.xyz")
with open(single, "w") as f:
    f.write(isolated)
# Both models: an isolated atom's energy is its E0 (se_e2_a subtracts its fitting net's output
# at the isolated atom's descriptor; docs/se_e2_a.md "Reference energies").
models = {
    "eq": "{type: equivariant, type_map: [Ar], r_max: 4.5, num_features: 4, l_max: 1, num_layers: 2, seed: 2, "
          "e0s: isolated}",
    "se": "{type_map: [Ar], descriptor: {type: se_e2_a, sel: [60], rcut: 4.5, rcut_smth: 1.0, neuron: [4, 8], "
          "axis_neuron: 4, seed: 2}, fitting_net: {neuron: [8, 8], seed: 2}, e0s: isolated}",
}
for name, model in models.items():
    with open(os.path.join(work, name + ".yaml"), "w") as f:
        f.write(f"""model: {model}
learning_rate: {{start_lr: 0.001, stop_lr: 0.0005, decay_steps: 5}}
training:
  training_data: {{systems: [{with_isolated}], batch_size: 1, energy_key: REF_energy, forces_key: REF_forces}}
  numb_steps: 2
  seed: 1
  disp_freq: 1
  save_freq: 2
""")
    log = run("train", name + ".yaml", "-o", name).stdout
    run("freeze", "-c", name, "-o", name + ".pt")
    run("test", "-m", name + ".pt", "-s", single, "-d", "single", "--energy-key", "REF_energy")
    predicted = np.loadtxt(os.path.join(work, "single.e.out"), ndmin=2)[0, 1]
    print(f"{name}: isolated atom: E0 {E0:.13f}, predicted {predicted:.13f} eV")
    taken_out = "isolated atoms (config_type=IsolatedAtom): 1 system(s), taken out of training" in log
    if not taken_out:
        failed.append(f"{name}: the training log does not say the isolated atoms were taken out:\n" + log)
    if not abs(predicted - E0) <= 1e-10:
        failed.append(f"{name}: the isolated atom's energy {predicted} is not its E0 {E0}")
# A separate file of isolated atoms ({isolated: FILE}): one-atom frames with an energy only, no
# config_type; the training data has no isolated atom.
E0_file = -0.2512345678901
plain = os.path.join(work, "plain_isolated.xyz")
with open(plain, "w") as f:
    f.write('1\nProperties=species:S:1:pos:R:3 REF_energy=%.13f pbc="F F F"\nAr 0.0 0.0 0.0\n' % E0_file)
with open(os.path.join(work, "se.yaml")) as f:
    text = f.read()
with open(os.path.join(work, "se_file.yaml"), "w") as f:
    f.write(text.replace("e0s: isolated", "e0s: {isolated: %s}" % plain).replace(with_isolated, data))
log = run("train", "se_file.yaml", "-o", "se_file").stdout
run("freeze", "-c", "se_file", "-o", "se_file.pt")
run("test", "-m", "se_file.pt", "-s", plain, "-d", "single", "--energy-key", "REF_energy")
predicted = np.loadtxt(os.path.join(work, "single.e.out"), ndmin=2)[0, 1]
print(f"se, e0s from a file: E0 {E0_file:.13f}, predicted {predicted:.13f} eV")
if f"isolated atoms (config_type=IsolatedAtom, {plain}): 1 system(s), taken out of training" not in log:
    failed.append("e0s {isolated: FILE}: the log does not name the file:\n" + log)
if not abs(predicted - E0_file) <= 1e-10:
    failed.append(f"e0s {{isolated: FILE}}: the isolated atom's energy {predicted} is not its E0 {E0_file}")
with open(os.path.join(work, "se_bad.yaml"), "w") as f:
    f.write(text.replace("e0s: isolated", "e0s: {isolated: %s}" % data).replace(with_isolated, data))
bad = run("train", "se_bad.yaml", "-o", "se_bad", check=False)
if bad.returncode == 0 or "expected one-atom frames (isolated atoms), got frames of 32 atoms" not in bad.stderr:
    failed.append(f"e0s {{isolated: FILE}} with a crystal: exit {bad.returncode}, {bad.stderr}")

# Per config type, and the predictions as extended XYZ read back by ASE.
from ase.io import read  # noqa: E402
report = run("test", "-m", "eq.pt", "-s", with_isolated, "-d", "both", "--xyz", "predicted.xyz", "--energy-key",
             "REF_energy", "--forces-key", "REF_forces", "--stress-key", "REF_stress").stdout
for needle in ("# ----------config type crystal", "# ----------config type IsolatedAtom",
               "# number of systems : 1, frames : 4"):
    if needle not in report:
        failed.append(f"mlip test does not report '{needle}':\n{report}")
predicted = read(os.path.join(work, "predicted.xyz"), ":")
e_pred = np.loadtxt(os.path.join(work, "both.e.out"), ndmin=2)[:, 1]
f_pred = np.loadtxt(os.path.join(work, "both.f.out"), ndmin=2)[:, 3:]
v_pred = np.loadtxt(os.path.join(work, "both.v.out"), ndmin=2)[:, 9:]
got_e = np.array([a.info["mlip_energy"] for a in predicted])
got_f = np.concatenate([a.arrays["mlip_forces"] for a in predicted])
crystal_frames = [a for a in predicted if a.info["config_type"] == "crystal"]
got_stress = np.stack([np.asarray(a.info["mlip_stress"]).reshape(9) * a.get_volume() for a in crystal_frames])
print(f"predictions.xyz: {len(predicted)} frames read by ASE; config types "
      f"{sorted(set(a.info['config_type'] for a in predicted))}")
for name, got, want in (("energies", got_e, e_pred), ("forces", got_f, f_pred),
                        ("stress x volume against -virial", got_stress, -v_pred)):
    diff = np.abs(got - want).max() / max(np.abs(want).max(), 1e-12)
    print(f"  {name}: max relative difference {diff:.1e}")
    if not diff < 1e-9:
        failed.append(f"predictions.xyz: {name} differ by {diff}")
# Pictures: the learning curve and the parity plots, drawn by mlip plot with this Python.
import matplotlib.image  # noqa: E402
plots = os.path.join(work, "plots")
env = dict(os.environ, MLIP_PYTHON=sys.executable)
proc = subprocess.run([mlip, "plot", "-l", os.path.join(work, "w_plain"), "-t", os.path.join(work, "both"), "-o", plots],
                      capture_output=True, text=True, env=env)
print(proc.stdout.strip())
if proc.returncode != 0:
    failed.append(f"mlip plot exited {proc.returncode}: {proc.stderr}")
for name in ("lcurve.png", "parity_energy.png", "parity_forces.png"):
    path = os.path.join(plots, name)
    if not os.path.isfile(path):
        failed.append(f"mlip plot did not write {name}")
        continue
    image = matplotlib.image.imread(path)
    colours = len(np.unique((image[:, :, :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    print(f"  {name}: {image.shape[1]} x {image.shape[0]} pixels, {colours} colours, pixel std {image.std():.3f}")
    if image.shape[0] < 400 or image.shape[1] < 400 or colours < 20 or image.std() < 0.02:
        failed.append(f"{name} looks blank or too small ({image.shape}, {colours} colours)")
with open(os.path.join(work, "both.f_elements.out")) as f:
    elements = [line.strip() for line in f if not line.startswith("#")]
if len(elements) != len(f_pred) or set(elements) != {"Ar"}:
    failed.append(f"both.f_elements.out: {len(elements)} rows for {len(f_pred)} force rows, elements {set(elements)}")
bad = subprocess.run([mlip, "plot", "-l", os.path.join(work, "nowhere")], capture_output=True, text=True, env=env)
print("mlip plot -l nowhere:", bad.stderr.strip())
if bad.returncode != 1 or "nowhere: no such file (expected lcurve.out" not in bad.stderr:
    failed.append(f"mlip plot on a missing lcurve.out: exit {bad.returncode}, {bad.stderr!r}")
if failed:
    sys.exit("FAILED: " + "; ".join(failed))
print("ok")
