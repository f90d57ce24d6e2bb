"""usage: compare_checkpoints.py a.pt b.pt tol -- max over tensors of max|a-b| / max|b|."""
import sys

import torch

a, b = torch.jit.load(sys.argv[1]), torch.jit.load(sys.argv[2])
tol = float(sys.argv[3])
ta = {**dict(a.named_parameters()), **dict(a.named_buffers())}
tb = {**dict(b.named_parameters()), **dict(b.named_buffers())}
for name in ("davg", "dstd", "bias"):
    if hasattr(a, name):
        ta[name], tb[name] = getattr(a, name), getattr(b, name)
assert ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
worst, where = 0.0, ""
for k in ta:
    d = ((ta[k] - tb[k]).abs().max() / tb[k].abs().max().clamp_min(1e-300)).item()
    if d > worst:
        worst, where = d, k
print(f"max relative difference {worst:.3e} ({where}) over {len(ta)} tensors; tolerance {tol:g}")
sys.exit(0 if worst <= tol else 1)
