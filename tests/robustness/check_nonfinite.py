"""ctest (docs/robustness.md "No silent NaN"): through the real CLI --
  * a training frame with two atoms on top of each other (or one on the other's periodic image)
    stops `mlip train`, `mlip test` and `mlip neighbor-stat` with the system, frame and atoms named;
  * a loss that turns non-finite (a learning rate of 1e300) stops training with the step named and
    no checkpoint of non-finite weights: the newest checkpoint holds finite weights, and `mlip test`
    refuses to report errors from a model whose prediction is not finite;
  * --init-model and --restart from a checkpoint with another type_map are refused, naming both.
usage: check_nonfinite.py <mlip> <examples/water/data> <work dir>"""
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_util import expect_error, expect_success, fail, ok, run, small_input

mlip, data, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

# ---- overlapping atoms: a copy of the data, frame 3 of train with atom 1 on atom 0, frame 0 of
# valid with atom 2 on atom 0's image one cell vector away.
shutil.copytree(data, "data")
coord = np.load("data/train/set.000/coord.npy")
coord[3, 3:6] = coord[3, 0:3]
np.save("data/train/set.000/coord.npy", coord)
coord = np.load("data/valid/set.000/coord.npy")
box = np.load("data/valid/set.000/box.npy")
coord[0, 6:9] = coord[0, 0:3] + box[0, 0:3]
np.save("data/valid/set.000/coord.npy", coord)
train_msg = "frame 3: atoms 0 and 1 (counting from 0, in the file's order) are 0 Å apart, expected at least 0.001 Å"
small_input("overlap.yaml", os.path.abspath("data"))
expect_error(run(mlip, "train", "overlap.yaml", "-o", "overlap_run"), "data/train: " + train_msg, what="train, overlap")
# Refused before it wrote anything: the output folder it made is gone too (docs/robustness.md).
if os.path.exists("overlap_run"):
    fail("train left its output folder although its data has overlapping atoms: " + str(os.listdir("overlap_run")))
expect_error(run(mlip, "neighbor-stat", "-s", "data/train", "-r", "6", "-t", "O", "H"), train_msg,
             what="neighbor-stat, overlap")

# A model to test with (the original data).
small_input("good.yaml", data, steps=10, save_freq=5)
expect_success(run(mlip, "train", "good.yaml", "-o", "good"), "train")
expect_error(run(mlip, "test", "-m", "good/model.ckpt.pt", "-s", "data/valid"),
             "data/valid: frame 0: atoms 0 and 2 (counting from 0, in the file's order) are",
             "(atom 2 shifted by [-1, 0, 0] cell vectors)", what="test, overlap through a periodic image")

# ---- a loss that turns non-finite: from the good model with lr 1e300, no validation (so that the
# training loss is what finds it), a checkpoint every step.
small_input("huge.yaml", data, steps=10, save_freq=1, disp_freq=100,
            lr="learning_rate: {start_lr: 1.0e+300, stop_lr: 1.0e+299, decay_steps: 10}\n")
text = "".join(l for l in open("huge.yaml") if "validation_data" not in l)
open("huge.yaml", "w").write(text)
expect_error(run(mlip, "train", "huge.yaml", "-o", "huge", "--init-model", "good/model.ckpt.pt"),
             "step 2: the training loss is NaN on the batch of system", "training stopped before writing non-finite weights",
             "the newest checkpoint, huge/model.ckpt-1.pt, holds the last finite ones", what="train, loss becomes NaN")
saved = sorted(n for n in os.listdir("huge") if n.startswith("model.ckpt-"))
if saved != ["model.ckpt-1.pt"] or open("huge/checkpoint").read().strip() != "model.ckpt-1.pt":
    fail(f"expected only model.ckpt-1.pt, named by the checkpoint pointer; found {saved}")
finite = subprocess.run([sys.executable, "-c",
                         "import sys, torch; m = torch.jit.load(sys.argv[1]); "
                         "print(all(bool(torch.isfinite(p).all()) for p in m.parameters()))", "huge/model.ckpt-1.pt"],
                        capture_output=True, text=True)
if finite.returncode == 0:  # PyTorch present: the weights in the newest checkpoint are finite
    if finite.stdout.strip() != "True":
        fail("huge/model.ckpt-1.pt holds non-finite weights: " + finite.stdout + finite.stderr)
    ok("the newest checkpoint's weights are finite (read by PyTorch)")
expect_error(run(mlip, "test", "-m", "huge/model.ckpt-1.pt", "-s", f"{data}/valid"),
             "huge/model.ckpt-1.pt: system", "frame 0: the model's prediction is not finite",
             what="test, a model whose prediction is not finite")
# With validation data, the validation at step 1 finds it first.
small_input("huge_val.yaml", data, steps=10, save_freq=1,
            lr="learning_rate: {start_lr: 1.0e+300, stop_lr: 1.0e+299, decay_steps: 10}\n")
expect_error(run(mlip, "train", "huge_val.yaml", "-o", "huge_val", "--init-model", "good/model.ckpt.pt"),
             "step 1: the validation loss is NaN", "this run wrote no checkpoint", what="train, validation loss NaN")
if os.path.isdir("huge_val") and any(n.endswith(".pt") for n in os.listdir("huge_val")):
    fail("a checkpoint was written although the validation loss was NaN at the first step")

# ---- type maps that do not match the checkpoint's
model = open("good.yaml").read().split("learning_rate")[0]
small_input("swapped.yaml", data, steps=10, model=model.replace("[O, H]", "[H, O]"))
small_input("more.yaml", data, steps=10, model=model.replace("[O, H]", "[O, H, C]").replace("sel: [46, 92]", "sel: [46, 92, 4]"))
for option in ("--init-model", "--restart"):
    expect_error(run(mlip, "train", "swapped.yaml", "-o", "swapped" + option, option, "good/model.ckpt.pt"),
                 f"{option} good/model.ckpt.pt: the checkpoint was trained with type_map [O, H], the input's model has [H, O]",
                 "write model.type_map: [O, H] in the input", what=f"{option} with a swapped type_map")
    expect_error(run(mlip, "train", "more.yaml", "-o", "more" + option, option, "good/model.ckpt.pt"),
                 "the checkpoint was trained with type_map [O, H], the input's model has [O, H, C]",
                 "the types of a trained model cannot change", what=f"{option} with another element")
print("all non-finite and type-map cases hold")
