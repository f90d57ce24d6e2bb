"""ctest (docs/robustness.md), root only (it mounts small tmpfs file systems; skipped with exit
77 elsewhere): through the real CLI --
  * a checkpoint that does not fit on a full disk: train exits 1 naming the file and "No space
    left on device", leaves no temporary file, and the previous checkpoint stays the newest
    (and loads);
  * lcurve.out that cannot grow: train exits 1 naming it (no silent cut line, no exit 0);
  * freeze and test -d on a full disk: exit 1, the file and the reason, no temporary file, and
    the detail files of an earlier test kept whole;
  * a read-only file system: train -o and freeze -o name the path and "Read-only file system".
usage: check_full_disk.py <mlip> <examples/water/data> <work dir>"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_util import expect_error, expect_success, fail, no_temporaries, ok, run, small_input

mlip, data, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3]
if os.geteuid() != 0:
    print("skipped: mounting a small tmpfs needs root (the CI runs as root)")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)
mounts = []


def mount(folder, size, *options):
    os.makedirs(folder, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs", folder],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(f"skipped: cannot mount a tmpfs ({p.stderr.strip()})")
        sys.exit(77)
    mounts.append(os.path.abspath(folder))


def fill(folder):
    """Fills the file system of `folder` to the last byte."""
    fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while os.write(fd, b"\0" * size) > 0:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def free(folder):
    os.remove(os.path.join(folder, "filler"))


try:
    small_input("input.yaml", data, steps=1000000, save_freq=40, disp_freq=5)
    # ---- a checkpoint on a full disk
    mount("disk", "8m")
    p = subprocess.Popen([mlip, "train", "input.yaml", "-o", "disk/run"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not os.path.exists("disk/run/model.ckpt-40.pt") and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
    if not os.path.exists("disk/run/model.ckpt-40.pt"):
        p.kill()
        fail("no first checkpoint:\n" + p.communicate()[1])
    fill("disk")
    out, err = p.communicate(timeout=300)
    expect_error((p.returncode, out, err), "disk/run/model.ckpt-", "cannot write the checkpoint (No space left on device)",
                 what="train on a full disk")
    newest = open("disk/run/checkpoint").read().strip()
    if not (newest.startswith("model.ckpt-") and os.path.exists("disk/run/" + newest)):
        fail(f"the pointer names {newest!r}, which is not a whole checkpoint")
    no_temporaries("disk/run", "train on a full disk")
    free("disk")
    expect_success(run(mlip, "freeze", "-c", "disk/run", "-o", "from_full.pt"), "freeze the newest checkpoint")
    shutil.copy("disk/run/" + newest, "saved.pt")
    ok(f"after the full disk, the newest checkpoint ({newest}) loads")

    # ---- lcurve.out that cannot grow (no checkpoint is due)
    small_input("lcurve.yaml", data, steps=1000000, save_freq=1000000, disp_freq=1)
    shutil.rmtree("disk/run")
    p = subprocess.Popen([mlip, "train", "lcurve.yaml", "-o", "disk/run"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if os.path.exists("disk/run/lcurve.out") and os.path.getsize("disk/run/lcurve.out") > 0:
            break
        time.sleep(0.01)
    fill("disk")
    out, err = p.communicate(timeout=300)
    expect_error((p.returncode, out, err), "disk/run/lcurve.out: cannot write the learning curve",
                 "No space left on device", what="lcurve.out on a full disk")
    free("disk")

    # ---- freeze and test -d on a full disk
    expect_success(run(mlip, "test", "-m", "from_full.pt", "-s", f"{data}/valid", "-d", "disk/detail"), "test -d")
    kept = {n: open("disk/" + n).read() for n in os.listdir("disk") if n.startswith("detail.")}
    fill("disk")
    expect_error(run(mlip, "freeze", "-c", "saved.pt", "-o", "disk/frozen.pt"), "disk/frozen.pt: cannot write",
                 "No space left on device", what="freeze on a full disk")
    if os.path.exists("disk/frozen.pt"):
        fail("freeze on a full disk left disk/frozen.pt")
    expect_error(run(mlip, "test", "-m", "from_full.pt", "-s", f"{data}/valid", "-d", "disk/detail"), "disk/detail.",
                 "No space left on device", what="test -d on a full disk")
    for n, text in kept.items():
        if open("disk/" + n).read() != text:
            fail(f"test -d on a full disk changed the earlier {n}")
    no_temporaries("disk", "freeze and test on a full disk")
    ok("the earlier detail files are whole")

    # ---- a read-only file system
    mount("readonly", "1m", "ro")
    expect_error(run(mlip, "train", "input.yaml", "-o", "readonly/run"),
                 "-o readonly/run: cannot create the output folder readonly/run (Read-only file system)",
                 what="train -o <read-only>")
    expect_error(run(mlip, "train", "input.yaml", "-o", "readonly"),
                 "-o readonly: cannot write into the output folder readonly (Read-only file system)",
                 what="train -o <read-only, existing>")
    expect_error(run(mlip, "freeze", "-c", "saved.pt", "-o", "readonly/frozen.pt"),
                 "readonly/frozen.pt: cannot write the frozen model (Read-only file system)", what="freeze -o <read-only>")
    print("ok: every full or read-only disk case holds")
finally:
    for m in reversed(mounts):
        subprocess.run(["umount", "-l", m])
