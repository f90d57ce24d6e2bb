"""Shared helpers of the robustness tests (docs/robustness.md "Tests"): run the real mlip CLI
and check its exit code and messages."""
import hashlib
import os
import subprocess
import sys
import zipfile

# What a message must never show: a C++ backtrace, std::terminate, or a library's raw text.
LEAKS = ("terminate called", "Exception raised from", "filesystem error", "(Success)", "frame #",
         "what():", "Aborted")


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def ok(message):
    print("ok: " + message, flush=True)


def run(mlip, *args, cwd=None, env=None):
    """Runs `mlip args...`; returns (exit code, stdout, stderr)."""
    p = subprocess.run([mlip, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def expect_error(result, *needles, what=""):
    """The run failed with exit 1, a message holding every needle, and nothing leaked."""
    rc, out, err = result
    if rc != 1:
        fail(f"{what}: expected exit 1, got {rc}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    for needle in needles:
        if needle not in err:
            fail(f"{what}: the message lacks {needle!r}:\n{err}")
    for leak in LEAKS:
        if leak in out + err:
            fail(f"{what}: the output shows {leak!r}:\n{err}")
    ok(f"{what}: exit 1, {err.strip().splitlines()[-1]}")


def expect_success(result, what=""):
    rc, out, err = result
    if rc != 0:
        fail(f"{what}: expected exit 0, got {rc}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}")


def small_input(path, data, steps=20, save_freq=10, disp_freq=5, extra_training="", model=None, lr=None):
    """A small float64 se_e2_a on the example's water data."""
    model = model or ("model:\n  type_map: [O, H]\n"
                      "  descriptor: {type: se_e2_a, sel: [46, 92], rcut_smth: 0.5, rcut: 6.0, neuron: [8, 16], "
                      "axis_neuron: 4, seed: 1}\n"
                      "  fitting_net: {neuron: [16, 16], seed: 1}\n")
    lr = lr or "learning_rate: {start_lr: 0.001, stop_lr: 1e-5, decay_steps: 10}\n"
    text = (model + lr +
            "loss: {start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
            "training:\n"
            f"  training_data: {{systems: [{data}/train], batch_size: 1}}\n"
            f"  validation_data: {{systems: [{data}/valid], batch_size: 1, numb_btch: 1}}\n"
            f"  numb_steps: {steps}\n  seed: 3\n  disp_freq: {disp_freq}\n  save_freq: {save_freq}\n"
            f"  data_workers: 0\n{extra_training}")
    with open(path, "w") as f:
        f.write(text)
    return path


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def flip_byte_in_record(path, suffix, out):
    """Copies `path` to `out` with one byte of the stored data of the archive's record whose
    name ends with `suffix` (e.g. "data/0", a tensor's storage) changed."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(suffix))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    # The local header: 30 bytes, then the name and the extra field, then the stored bytes.
    name_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.file_size // 2] ^= 0x10
    with open(out, "wb") as f:
        f.write(data)
    return out


def no_temporaries(folder, what):
    left = [n for n in os.listdir(folder) if ".mlip-tmp-" in n]
    if left:
        fail(f"{what}: temporary files left in {folder}: {left}")
