#include "md/device_graph.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/overlap.h"
#include "error.h"

namespace mlip::md {
namespace {

/// Candidates (centre, slot of a neighbour cell) examined at once: bounds the memory of a chunk
/// of centres (about 100 bytes per candidate: its row, distance vector and masks).
constexpr int64_t kCandidatesPerChunk = int64_t(1) << 22;

/// The representative row of each row: the lowest row with its id (the owned row when the atom is
/// owned: owned rows come first). Without ids every row stands for itself.
torch::Tensor representative_rows(const torch::Tensor& ids, const torch::Tensor& rows) {
  const int64_t n = rows.size(0);
  if (!ids.defined() || n == 0) return rows;
  // A stable sort keeps the rows of one id in row order: the first of each run is its lowest.
  const auto sorted = ids.to(rows.device(), torch::kInt64).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  const torch::Tensor& id = std::get<0>(sorted);
  const torch::Tensor& row = std::get<1>(sorted);
  torch::Tensor starts = torch::ones({n}, rows.options().dtype(torch::kBool));
  starts.slice(0, 1).copy_(id.slice(0, 1) != id.slice(0, 0, n - 1));
  const torch::Tensor run = starts.to(torch::kInt64).cumsum(0) - 1;
  return torch::empty_like(rows).index_put_({row}, row.index({starts}).index_select(0, run));
}

/// A uniform grid of cells at least r_max wide over the positions' bounding box (at most about 4
/// cells per atom), so that every pair within r_max lies in a cell and one of its 26 neighbours.
struct CellGrid {
  int64_t dims[3] = {1, 1, 1};
  double lo[3] = {0, 0, 0};
  double width[3] = {1, 1, 1};
  int64_t count() const { return dims[0] * dims[1] * dims[2]; }
};

CellGrid cell_grid(const torch::Tensor& pos, double r_max) {
  CellGrid grid;
  const int64_t n = pos.size(0);
  if (n == 0) return grid;
  const torch::Tensor box =
      torch::stack({std::get<0>(pos.min(0)), std::get<0>(pos.max(0))}).to(torch::kCPU).contiguous();
  const double* b = box.data_ptr<double>();
  double extent[3];
  for (int d = 0; d < 3; ++d) {
    grid.lo[d] = b[d];
    extent[d] = b[3 + d] - b[d];
    grid.dims[d] = std::max<int64_t>(1, int64_t(std::floor(extent[d] / r_max)));
  }
  const double most = std::max(64.0, 4.0 * double(n));
  if (double(grid.count()) > most) {
    const double shrink = std::cbrt(double(grid.count()) / most);
    for (int64_t& dim : grid.dims) dim = std::max<int64_t>(1, int64_t(double(dim) / shrink));
  }
  for (int d = 0; d < 3; ++d) grid.width[d] = std::max(extent[d] / double(grid.dims[d]), r_max);
  return grid;
}

/// The linear cell of integer cell coordinates [..., 3].
torch::Tensor linear_cell(const torch::Tensor& coord, const CellGrid& grid) {
  return (coord.select(-1, 0) * grid.dims[1] + coord.select(-1, 1)) * grid.dims[2] + coord.select(-1, 2);
}

}  // namespace

DeviceGraph build_device_graph(const torch::Tensor& positions, const torch::Tensor& ids, int64_t nlocal, int64_t layers,
                               double r_max, std::optional<DeviceOverlap>& overlap) {
  overlap.reset();
  const torch::Tensor pos = positions.to(torch::kFloat64).contiguous();
  const int64_t n = pos.size(0);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(pos.device());
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(pos.device());
  const torch::Tensor rows = torch::arange(n, i64);

  // Nodes: the representative rows, ascending, so the owned rows [0, nlocal) are nodes [0, nlocal).
  const torch::Tensor rep_of_row = representative_rows(ids, rows);
  const torch::Tensor is_rep = rep_of_row == rows;
  if (nlocal > 0) {
    const torch::Tensor owned_twice = (~is_rep.slice(0, 0, nlocal)).nonzero();
    if (owned_twice.size(0) > 0) {
      const int64_t row = owned_twice[0][0].item<int64_t>();
      throw Error("MD atoms: atom id " + std::to_string(ids[row].item<int64_t>()) + " is owned twice");
    }
  }
  DeviceGraph g;
  g.row_of_node = is_rep.nonzero().select(1, 0);
  g.nodes = g.row_of_node.size(0);
  const torch::Tensor node_of_row =
      torch::full({n}, -1, i64).index_put_({g.row_of_node}, torch::arange(g.nodes, i64)).index_select(0, rep_of_row);

  // Centres: the owned atoms for one layer; every node for more (those beyond L - 1 hops are
  // dropped below).
  const torch::Tensor centre_rows = layers > 1 ? g.row_of_node : rows.slice(0, 0, nlocal);

  // The cell list: rows sorted by cell, each cell's first slot and count.
  const CellGrid grid = cell_grid(pos, r_max);
  const torch::Tensor lo = torch::tensor({grid.lo[0], grid.lo[1], grid.lo[2]}, f64);
  const torch::Tensor width = torch::tensor({grid.width[0], grid.width[1], grid.width[2]}, f64);
  const torch::Tensor top = torch::tensor({grid.dims[0] - 1, grid.dims[1] - 1, grid.dims[2] - 1}, i64);
  const torch::Tensor coord = torch::minimum(((pos - lo) / width).floor().to(torch::kInt64).clamp_min(0), top);
  const torch::Tensor cell = linear_cell(coord, grid);
  const torch::Tensor order = std::get<1>(cell.sort());
  const torch::Tensor counts = torch::bincount(cell, {}, grid.count());
  const torch::Tensor first = counts.cumsum(0) - counts;
  const int64_t fullest = n > 0 ? counts.max().item<int64_t>() : 0;

  std::vector<int64_t> around;
  for (int64_t a = -1; a <= 1; ++a)
    for (int64_t b = -1; b <= 1; ++b)
      for (int64_t c = -1; c <= 1; ++c) around.insert(around.end(), {a, b, c});
  const torch::Tensor offsets = torch::tensor(around, torch::kInt64).view({27, 3}).to(pos.device());
  const torch::Tensor slots = torch::arange(fullest, i64);
  const double r2_max = r_max * r_max;

  std::vector<torch::Tensor> centre_parts, neighbour_parts;
  const int64_t ncentres = centre_rows.size(0);
  const int64_t chunk = std::max<int64_t>(1, kCandidatesPerChunk / (27 * std::max<int64_t>(fullest, 1)));
  for (int64_t begin = 0; begin < ncentres && fullest > 0; begin += chunk) {
    const torch::Tensor crow = centre_rows.slice(0, begin, std::min(ncentres, begin + chunk));
    const torch::Tensor near = coord.index_select(0, crow).unsqueeze(1) + offsets;  // [c, 27, 3]
    const torch::Tensor inside = ((near >= 0) & (near <= top)).all(2);              // [c, 27]
    const torch::Tensor ncell = linear_cell(near, grid).clamp(0, grid.count() - 1);
    const torch::Tensor in_cell = counts.index({ncell}) * inside;          // [c, 27]
    const torch::Tensor slot = first.index({ncell}).unsqueeze(2) + slots;  // [c, 27, M]
    const torch::Tensor candidate = order.index({slot.clamp_max(std::max<int64_t>(n - 1, 0))});
    const torch::Tensor d = pos.index({candidate}) - pos.index_select(0, crow).view({-1, 1, 1, 3});
    const torch::Tensor keep =
        (slots < in_cell.unsqueeze(2)) & ((d * d).sum(3) < r2_max) & (candidate != crow.view({-1, 1, 1}));
    centre_parts.push_back(crow.index_select(0, keep.nonzero().select(1, 0)));
    neighbour_parts.push_back(candidate.index({keep}));
  }
  torch::Tensor centre_row = centre_parts.empty() ? torch::empty({0}, i64) : torch::cat(centre_parts);
  torch::Tensor neighbour_row = neighbour_parts.empty() ? torch::empty({0}, i64) : torch::cat(neighbour_parts);

  // Atoms on top of each other (periodic images included): the caller's error.
  if (centre_row.size(0) > 0) {
    const torch::Tensor d = pos.index_select(0, neighbour_row) - pos.index_select(0, centre_row);
    const auto closest = (d * d).sum(1).min(0);
    const double distance = std::sqrt(std::get<0>(closest).item<double>());
    if (distance < data::kOverlapDistance) {
      const int64_t p = std::get<1>(closest).item<int64_t>();
      overlap = DeviceOverlap{centre_row[p].item<int64_t>(), neighbour_row[p].item<int64_t>(), distance};
    }
  }

  torch::Tensor centre = node_of_row.index_select(0, centre_row);
  torch::Tensor neighbour = node_of_row.index_select(0, neighbour_row);
  if (layers > 1) {
    // Centres within L - 1 hops of an owned atom: widen the owned set L - 1 times along the pairs.
    torch::Tensor within = torch::zeros({g.nodes}, i64.dtype(torch::kBool));
    within.slice(0, 0, nlocal).fill_(true);
    for (int64_t hop = 1; hop < layers; ++hop) {
      const torch::Tensor reached = neighbour.index({within.index_select(0, centre)});
      within = within.index_put({reached}, torch::ones({}, within.options()));
    }
    const torch::Tensor kept = within.index_select(0, centre);
    centre = centre.index({kept});
    neighbour = neighbour.index({kept});
    neighbour_row = neighbour_row.index({kept});
  }
  g.centre = centre;
  g.neighbour = neighbour;
  g.shift = pos.index_select(0, neighbour_row) - pos.index_select(0, rep_of_row.index_select(0, neighbour_row));
  g.npairs = centre.size(0);
  return g;
}

}  // namespace mlip::md
