"""ctest (docs/robustness.md): through the real CLI, on a normal disk --
  * output paths that cannot be used (-o naming a file, freeze -o naming a folder or the
    checkpoint being frozen, test -d into a missing folder) give the project's message, exit 1;
  * damaged checkpoints and frozen models (one flipped byte in a stored tensor) are refused by
    test, freeze, --restart and --init-model; frozen models still load in plain PyTorch;
  * temporary files of a killed run are removed by the next run in that folder;
  * after SIGKILL and --restart, lcurve.out equals an uninterrupted run's, line for line;
  * stop_lr above start_lr is refused; a quoted model type (JSON) is accepted.
usage: check_files.py <mlip> <examples/water/data> <work dir>"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_util import (expect_error, expect_success, fail, flip_byte_in_record, no_temporaries, ok, run, sha,
                         small_input)

mlip, data, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)

# ---- a trained model to work with
small_input("input.yaml", data)
expect_success(run(mlip, "train", "input.yaml", "-o", "run"), "train")
ckpt = "run/model.ckpt-20.pt"
expect_success(run(mlip, "freeze", "-c", "run", "-o", "frozen.pt"), "freeze")

# ---- output paths that cannot be used
open("a_file", "w").write("x")
expect_error(run(mlip, "train", "input.yaml", "-o", "a_file"), "-o a_file", "a file of that name exists",
             what="train -o <a file>")
expect_error(run(mlip, "train", "input.yaml", "-o", "a_file/sub"), "-o a_file/sub: cannot create the output folder",
             "Not a directory", what="train -o <below a file>")
os.makedirs("a_folder", exist_ok=True)
expect_error(run(mlip, "freeze", "-c", "run", "-o", "a_folder"), "a_folder: cannot write the frozen model",
             "a folder of that name exists", what="freeze -o <a folder>")
before = sha(ckpt)
expect_error(run(mlip, "freeze", "-c", ckpt, "-o", ckpt), "that is the checkpoint being frozen",
             what="freeze -o <the checkpoint itself>")
expect_error(run(mlip, "freeze", "-c", "run", "-o", "run/model.ckpt.pt"), "that is the checkpoint being frozen",
             what="freeze -o <the link to the checkpoint>")
if sha(ckpt) != before or not os.path.islink("run/model.ckpt.pt"):
    fail("freeze onto the checkpoint changed it")
expect_error(run(mlip, "test", "-m", "frozen.pt", "-s", f"{data}/valid", "-d", "no/such/folder/detail"),
             "no/such/folder/detail.e.out: cannot write the energy detail file (No such file or directory)",
             what="test -d <missing folder>")

# ---- checksums
names = subprocess.run([sys.executable, "-c", "import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).namelist())",
                        "frozen.pt"], capture_output=True, text=True).stdout
if "extra/checksum" not in names:
    fail("the frozen model has no extra/checksum: " + names)
plain = subprocess.run([sys.executable, "-c",
                        "import sys, torch; m = torch.jit.load(sys.argv[1]); print(sum(p.numel() for p in m.parameters()))",
                        "frozen.pt"], capture_output=True, text=True)
if plain.returncode != 0:
    fail("plain PyTorch cannot load the frozen model: " + plain.stderr)
ok(f"the frozen model carries extra/checksum and loads in plain PyTorch ({plain.stdout.strip()} parameters)")
damaged = flip_byte_in_record(ckpt, "data/0", "damaged.pt")
for what, args in (("test", ("test", "-m", damaged, "-s", f"{data}/valid")),
                   ("freeze", ("freeze", "-c", damaged, "-o", "from_damaged.pt")),
                   ("--restart", ("train", "input.yaml", "-o", "restarted", "--restart", damaged)),
                   ("--init-model", ("train", "input.yaml", "-o", "initialised", "--init-model", damaged))):
    expect_error(run(mlip, *args), "damaged.pt: damaged: its contents do not match the checksum",
                 what=f"{what} with a damaged checkpoint")
if os.path.exists("from_damaged.pt"):
    fail("freeze of a damaged checkpoint wrote a model")
expect_error(run(mlip, "test", "-m", flip_byte_in_record("frozen.pt", "data/1", "damaged_frozen.pt"), "-s",
                 f"{data}/valid"), "damaged_frozen.pt: damaged", what="test with a damaged frozen model")

# ---- temporary files of a killed run
dead = subprocess.Popen(["true"])
dead.wait()
os.makedirs("stale", exist_ok=True)
for name in (f"model.ckpt-10.pt.mlip-tmp-{dead.pid}", f"checkpoint.mlip-tmp-{dead.pid}",
             f"lcurve.out.mlip-tmp-{dead.pid}"):
    open(os.path.join("stale", name), "w").write("partial")
open("stale/keep.txt", "w").write("a user's file")
# A user's files whose names merely end in .tmp-<pid> are not mlip's temporaries: kept.
for name in ("mydata.tmp-1", f"notes.tmp-{dead.pid}"):
    open(os.path.join("stale", name), "w").write("a user's file")
rc, out, err = run(mlip, "train", "input.yaml", "-o", "stale")
expect_success((rc, out, err), "train into a folder with stale temporaries")
no_temporaries("stale", "train into a folder with stale temporaries")
if (not all(os.path.exists(f"stale/{n}") for n in ("keep.txt", "mydata.tmp-1", f"notes.tmp-{dead.pid}"))
        or "removed 3 temporary file(s)" not in out):
    fail("the stale temporaries were not reported as removed, or another file went:\n" + out)
ok("a run removes the temporary files a killed run left in its folder (and nothing else)")

# ---- lcurve.out after SIGKILL and --restart equals an uninterrupted run's
small_input("long.yaml", data, steps=600, save_freq=100, disp_freq=5)
expect_success(run(mlip, "train", "long.yaml", "-o", "whole"), "the uninterrupted run")
for attempt in range(5):
    shutil.rmtree("killed", ignore_errors=True)
    os.makedirs("killed")
    p = subprocess.Popen([mlip, "train", "long.yaml", "-o", "killed"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    last = 0
    while p.poll() is None:
        try:
            lines = [l for l in open("killed/lcurve.out") if l.strip() and not l.startswith("#")]
            last = int(lines[-1].split()[0]) if lines else 0
        except (OSError, ValueError):
            pass
        if last > 100 and last % 100 != 0 and os.path.exists("killed/model.ckpt-100.pt"):
            p.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    p.wait()
    if p.returncode == -signal.SIGKILL:
        break
else:
    fail("could not kill the run between two checkpoints in 5 tries")
lines_at_kill = sum(1 for l in open("killed/lcurve.out") if not l.startswith("#"))
expect_success(run(mlip, "train", "long.yaml", "-o", "killed", "--restart", "killed"), "--restart after SIGKILL")
if open("killed/lcurve.out").read() != open("whole/lcurve.out").read():
    subprocess.run(["diff", "whole/lcurve.out", "killed/lcurve.out"])
    fail("lcurve.out after SIGKILL and --restart differs from the uninterrupted run's")
ok(f"killed after step {last} ({lines_at_kill} lines), restarted: lcurve.out equals the uninterrupted run's line "
   "for line")

# ---- inputs
small_input("rising.yaml", data, lr="learning_rate: {start_lr: 0.001, stop_lr: 0.01, decay_steps: 10}\n")
expect_error(run(mlip, "train", "rising.yaml", "-o", "rising"),
             "learning_rate.stop_lr: expected at most start_lr (0.001), got 0.01", what="stop_lr > start_lr")
with open("quoted.json", "w") as f:
    f.write('{"model": {"type": "equivariant", "type_map": ["O", "H"], "r_max": "4.0", "num_features": 4, '
            '"num_layers": 1, "l_max": 1, "seed": 1},\n'
            ' "learning_rate": {"start_lr": 0.005, "stop_lr": "1e-4", "decay_steps": 10},\n'
            f' "training": {{"training_data": {{"systems": ["{data}/train"], "batch_size": 1}},\n'
            '  "numb_steps": 2, "disp_freq": 1, "save_freq": 2}}\n')
rc, out, err = run(mlip, "train", "quoted.json", "-o", "quoted")
expect_success((rc, out, err), 'JSON input with "type": "equivariant"')
if "equivariant" not in out:
    fail("the quoted model type did not select the equivariant model:\n" + out)
ok('JSON "type": "equivariant" (and quoted numbers) read as the plain values')
print("ok: every file case holds")
