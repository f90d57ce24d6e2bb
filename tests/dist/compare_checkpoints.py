"""usage: compare_checkpoints.py a.pt b.pt tol -- max over tensors of max|a-b| / max|b|; tol 0:
every tensor equal bit for bit (NaN included).

The tensors: the module's parameters (the moving average of the weights when training keeps
one), buffers and statistics, and the raw weights the checkpoint keeps for --restart (extra
file "weights"), when both have them."""
import io
import sys

import torch

extra_a, extra_b = {"weights": ""}, {"weights": ""}
a = torch.jit.load(sys.argv[1], _extra_files=extra_a)
b = torch.jit.load(sys.argv[2], _extra_files=extra_b)
tol = float(sys.argv[3])
ta = {**dict(a.named_parameters()), **dict(a.named_buffers())}
tb = {**dict(b.named_parameters()), **dict(b.named_buffers())}
# The statistics: se_e2_a's davg, dstd and bias; the equivariant model's scale, shift and
# avg_num_neighbors (a float attribute).
for name in ("davg", "dstd", "bias", "scale", "shift", "avg_num_neighbors"):
    if hasattr(a, name):
        ta[name], tb[name] = (torch.as_tensor(getattr(m, name), dtype=torch.float64)
                              if isinstance(getattr(m, name), float) else getattr(m, name) for m in (a, b))
assert bool(extra_a["weights"]) == bool(extra_b["weights"]), "only one checkpoint holds raw weights"
if extra_a["weights"]:
    for prefix, extra, t in (("raw.", extra_a, ta), ("raw.", extra_b, tb)):
        for k, v in torch.jit.load(io.BytesIO(extra["weights"])).named_parameters():
            t[prefix + k] = v
assert ta.keys() == tb.keys(), (sorted(ta), sorted(tb))
if tol == 0:
    differ = [k for k in ta if ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape or
              not torch.equal(ta[k].view(-1).view(torch.uint8) if ta[k].is_floating_point() else ta[k],
                              tb[k].view(-1).view(torch.uint8) if tb[k].is_floating_point() else tb[k])]
    raw = sum(k.startswith("raw.") for k in ta)
    print(f"{len(ta) - len(differ)} of {len(ta)} tensors ({raw} raw weights) equal bit for bit"
          + (f"; differ: {', '.join(differ)}" if differ else ""))
    sys.exit(1 if differ else 0)
worst, where = 0.0, ""
for k in ta:
    d = ((ta[k] - tb[k]).abs().max() / tb[k].abs().max().clamp_min(1e-300)).item()
    if d > worst:
        worst, where = d, k
raw = sum(k.startswith("raw.") for k in ta)
print(f"max relative difference {worst:.3e} ({where}) over {len(ta)} tensors ({raw} raw weights); tolerance {tol:g}")
sys.exit(0 if worst <= tol else 1)
