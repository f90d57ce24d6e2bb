"""ASE calculator for a model frozen by `mlip freeze` (a TorchScript file; mlip is not needed).

    from mlip_ase import MlipCalculator
    atoms.calc = MlipCalculator("frozen_model.pt")
    atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()

The neighbour list comes from ASE (primitive_neighbor_list); the model computes energies,
forces (autograd) and the virial itself (docs/deploy.md). Units: eV, Angstrom.
"""
import numpy as np
import torch
from ase.calculators.calculator import Calculator, all_changes
from ase.neighborlist import primitive_neighbor_list


class MlipCalculator(Calculator):
    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress", "charges"]

    def __init__(self, model_path, device="cpu", **kwargs):
        super().__init__(**kwargs)
        extra = {"r_max": "", "type_names": "", "model_dtype": "", "model_type": ""}
        self.model = torch.jit.load(model_path, map_location=device, _extra_files=extra)
        self.model.eval()
        meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in extra.items()}
        if not meta["model_type"]:
            raise ValueError(f"{model_path}: not a model frozen by 'mlip freeze' (no model_type metadata)")
        self.r_max = float(meta["r_max"])
        self.type_names = meta["type_names"].split()
        self.dtype = torch.float32 if meta["model_dtype"] == "float32" else torch.float64
        self.device = device

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        symbols = self.atoms.get_chemical_symbols()
        unknown = sorted(set(symbols) - set(self.type_names))
        if unknown:
            raise ValueError(f"elements {unknown} are not in the model's type map {self.type_names}")
        types = [self.type_names.index(s) for s in symbols]
        cell = np.asarray(self.atoms.cell.array, dtype=np.float64)
        i, j, shifts = primitive_neighbor_list("ijS", self.atoms.pbc, cell, self.atoms.positions, self.r_max,
                                               self_interaction=False)
        t = lambda a, dtype: torch.as_tensor(np.asarray(a), dtype=dtype, device=self.device)
        data = {
            "pos": t(self.atoms.positions, self.dtype),
            "atom_types": t(types, torch.int64),
            "edge_index": t(np.stack([i, j]), torch.int64),
            "cell": t(cell, self.dtype),
            "edge_cell_shift": t(shifts, self.dtype),
            "pbc": t(np.asarray(self.atoms.pbc, dtype=np.int64), torch.int64),
        }
        out = self.model(data)
        energy = float(out["total_energy"].double().item())
        self.results["energy"] = energy
        self.results["free_energy"] = energy
        self.results["energies"] = out["atomic_energy"].double().cpu().numpy().reshape(-1)
        self.results["forces"] = out["forces"].double().cpu().numpy()
        if "charges" in out:  # a model with model.long_range (docs/long_range.md)
            self.results["charges"] = out["charges"].double().cpu().numpy().reshape(-1)
        if self.atoms.pbc.all():
            virial = out["virial"].double().cpu().numpy().reshape(3, 3)
            stress = -virial / self.atoms.get_volume()  # eV/A^3, ASE's sign convention
            self.results["stress"] = stress.reshape(9)[[0, 4, 8, 5, 2, 1]]
