#include "models/deploy_source.h"

#include <cstdio>

namespace mlip::models {

std::string torchscript_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string deploy_pair_vectors_source(const std::string& nested) {
  return "    pos = data['pos']\n"
         "    atype = data['atom_types']\n"
         "    edge_index = data['edge_index']\n"
         "    n = pos.size(0)\n"
         "    shift = data['edge_cell_shift'].to(pos.dtype)\n"
         "    d_all = pos.index_select(0, edge_index[1]) - pos.index_select(0, edge_index[0]) + "
         "torch.matmul(shift, data['cell'].to(pos.dtype))\n"
         "    if not d_all.requires_grad:\n"
         "    " + nested + "d_all.requires_grad_(True)\n"
         "    r_all = torch.sqrt((d_all * d_all).sum(1))\n";
}

std::string deploy_interface_source(const std::string& def_indent) {
  return def_indent + "def deploy_interface(self) -> int:\n"
         "    return " + std::to_string(kDeployInterface) + "\n\n";
}

namespace {

/// deploy_outputs_source with the long-range term (docs/long_range.md "In the frozen model").
std::string long_range_outputs_source(const std::string& nested, const std::string& repulsion) {
  const std::string n1 = "    " + nested, n2 = n1 + nested;
  return repulsion +
         "    assert 'nlocal' not in data, \"model.long_range: this model's energy has a long-range term, which the "
         "input's nlocal (the owned atoms of one MD rank) cannot give\"\n"
         "    q = self.long_range_charges(q_raw, self.long_range_total_charge(data))\n"
         "    periodic = self.long_range_periodic(data)\n"
         // Leaves of their own: the long-range energy's direct dependence on the positions and the
         // cell; its dependence through the charges runs through d_all as the short-range energy's.
         "    pos_long = pos.detach().double().requires_grad_(True)\n"
         "    cell_long = data['cell'].detach().double().requires_grad_(True)\n"
         "    e_long = self.long_range_energy(q, pos_long, cell_long, periodic)\n"
         "    total = e.double().sum() + e_long.sum()\n"
         "    g = torch.zeros_like(d_all)\n"
         "    g_pos = torch.zeros_like(pos_long)\n"
         "    g_cell = torch.zeros_like(cell_long)\n"
         "    if total.requires_grad:\n" +
         n1 + "grads = torch.autograd.grad([total], [d_all, pos_long, cell_long], allow_unused=True)\n" +
         n1 + "g_edges = grads[0]\n" +
         n1 + "if g_edges is not None:\n" + n2 + "g = g_edges\n" +
         n1 + "g_p = grads[1]\n" +
         n1 + "if g_p is not None:\n" + n2 + "g_pos = g_p\n" +
         n1 + "g_c = grads[2]\n" +
         n1 + "if g_c is not None:\n" + n2 + "g_cell = g_c\n" +
         "    f = torch.zeros([n, 3], dtype=pos.dtype, device=pos.device)\n"
         "    f = f.index_add(0, edge_index[0], g).index_add(0, edge_index[1], -g) - g_pos.to(pos.dtype)\n"
         // W = -dE/dε for r -> r(1 + ε) and cell -> cell(1 + ε): the pairs' part and the direct part.
         "    virial = -torch.matmul(d_all.detach().transpose(0, 1), g).double() - "
         "torch.matmul(pos_long.detach().transpose(0, 1), g_pos) - torch.matmul(cell_long.detach().transpose(0, 1), g_cell)\n"
         "    out: Dict[str, Tensor] = {}\n"
         "    out['atomic_energy'] = (e.detach().double() + e_long.detach()).to(e.dtype).unsqueeze(1)\n"
         "    out['total_energy'] = total.detach().reshape(1, 1)\n"
         "    out['forces'] = f.detach()\n"
         "    out['virial'] = virial.detach().to(pos.dtype).reshape(1, 3, 3)\n"
         "    out['edge_gradient'] = g.detach()\n"
         "    out['charges'] = q.detach().unsqueeze(1)\n"
         "    return out\n";
}

}  // namespace

std::string deploy_outputs_source(const std::string& nested, bool pair_repulsion, bool long_range) {
  // docs/repulsion.md "In the frozen model": the repulsion is part of every atom's energy.
  const std::string repulsion =
      pair_repulsion ? "    e = e + self.pair_repulsion_energy(r_all, edge_index, atype, n).to(e.dtype)\n" : "";
  if (long_range) return long_range_outputs_source(nested, repulsion);
  // `nlocal` (optional, docs/deploy.md "Inside an MD code"): only the first nlocal atoms' energies
  // count; the others are ghosts whose atoms are owned elsewhere.
  return repulsion +
         "    e_own = e\n"
         "    if 'nlocal' in data:\n"
         "    " + nested + "e_own = e[:int(data['nlocal'].item())]\n"
         // A frame where no atom has a neighbour gives energies that do not depend on d_all
         // (no grad_fn once the parameters are frozen): zero forces.
         "    g = torch.zeros_like(d_all)\n"
         "    if e_own.requires_grad:\n"
         "    " + nested + "grads = torch.autograd.grad([e_own.sum()], [d_all], allow_unused=True)\n"
         "    " + nested + "g_all = grads[0]\n"
         "    " + nested + "if g_all is not None:\n"
         "    " + nested + nested + "g = g_all\n"
         "    f = torch.zeros([n, 3], dtype=pos.dtype, device=pos.device)\n"
         "    f = f.index_add(0, edge_index[0], g).index_add(0, edge_index[1], -g)\n"
         "    virial = -torch.matmul(d_all.detach().transpose(0, 1), g)\n"
         "    out: Dict[str, Tensor] = {}\n"
         "    out['atomic_energy'] = e.detach().unsqueeze(1)\n"
         "    out['total_energy'] = e_own.detach().double().sum().reshape(1, 1)\n"
         "    out['forces'] = f.detach()\n"
         "    out['virial'] = virial.detach().reshape(1, 3, 3)\n"
         "    out['edge_gradient'] = g.detach()\n"
         "    return out\n";
}

}  // namespace mlip::models
