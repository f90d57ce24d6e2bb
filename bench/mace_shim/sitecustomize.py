"""Loaded by Python at start-up when this folder is on PYTHONPATH (bench/molecule_bench.sh puts it
there for MACE's runs only). mace-torch 0.3.16's stage two (--swa) fails with PyTorch 2.11:
torch.optim.swa_utils.AveragedModel keeps a deep copy of the model and, at every update, copies the
model's buffers into the copy position by position; but the deep copy of e3nn's compiled tensor
product (a torch.fx GraphModule) holds two buffers more than the original
(`interactions.1.conv_tp._compiled_main_left_right._tensor_constant0` and `1`, its constants
re-made by the copy), so the positions no longer match ("The size of tensor a (3) must match the
size of tensor b (0)"). Here, for the update, each side's buffers are given as the ones the two
share by name, in the model's order, so PyTorch's own update copies each buffer onto its
namesake (a buffer whose shape changed is first replaced by a copy). The parameters, and so the
averaging itself, are untouched; a parameter list that differs by name stops the run.
"""
import sys

from torch.optim import swa_utils

_update_parameters = swa_utils.AveragedModel.update_parameters


def _name_matched_update_parameters(self, model):
    if self.use_buffers:
        return _update_parameters(self, model)
    if [n for n, _ in self.module.named_parameters()] != [n for n, _ in model.named_parameters()]:
        sys.exit("mace_shim: the averaged model's parameters differ from the model's")
    own = dict(self.module.named_buffers())
    shared = [(name, b) for name, b in model.named_buffers() if name in own]
    for name, b in shared:
        if own[name].shape != b.shape:
            owner = self.module
            *path, leaf = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            owner._buffers[leaf] = b.detach().clone().to(own[name].device)
            own[name] = owner._buffers[leaf]
    mine = [own[name] for name, _ in shared]
    theirs = [b for _, b in shared]
    # Instance attributes shadow the two modules' buffers() methods for this one call.
    object.__setattr__(self.module, "buffers", lambda recurse=True: iter(mine))
    object.__setattr__(model, "buffers", lambda recurse=True: iter(theirs))
    try:
        return _update_parameters(self, model)
    finally:
        object.__delattr__(self.module, "buffers")
        object.__delattr__(model, "buffers")


swa_utils.AveragedModel.update_parameters = _name_matched_update_parameters
