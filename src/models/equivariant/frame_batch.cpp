#include "models/equivariant/frame_batch.h"

#include <string>

#include "error.h"
#include "models/bucket.h"
#include "models/host_to_device.h"

namespace mlip::models {

namespace {

/// One index table of a batch: the frames' host tables one after the other, frame f's entries
/// plus offset[f], its first `skip` entries left out after the first frame (offset tables
/// [N+1] start with 0); built on the host and moved to `device` once, without waiting for it.
torch::Tensor concatenated(const std::vector<const torch::Tensor*>& tables, const std::vector<int64_t>& offset,
                           int64_t skip, torch::Device device) {
  int64_t total = 0;
  for (size_t f = 0; f < tables.size(); ++f) total += tables[f]->size(0) - (f > 0 ? skip : 0);
  auto out = torch::empty({total}, torch::kInt64);
  int64_t* o = out.data_ptr<int64_t>();
  for (size_t f = 0; f < tables.size(); ++f) {
    const auto t = tables[f]->contiguous();
    const int64_t* v = t.data_ptr<int64_t>();
    for (int64_t k = f > 0 ? skip : 0; k < t.size(0); ++k) *o++ = v[k] + offset[f];
  }
  return to_device_without_waiting(out, device);
}

/// `t` with `rows` zero rows appended.
torch::Tensor with_zero_rows(const torch::Tensor& t, int64_t rows) {
  auto sizes = t.sizes().vec();
  sizes[0] = rows;
  return torch::cat({t, torch::zeros(sizes, t.options())});
}

}  // namespace

int64_t EquivariantFrame::bytes() const {
  int64_t b = 0;
  for (const auto* t : {&d, &i, &j, &pair, &pair_edge, &basis, &basis_jacobian, &y, &y_jacobian, &pos, &cell})
    b += tensor_bytes(*t);
  for (size_t k = 2; k < edges.size(); ++k) b += tensor_bytes(edges[k]);  // edges[0], [1] are i, j
  return b;
}

std::vector<torch::Tensor> tensors_of(const FrameBatch& b) {
  return {b.d, b.i,          b.j,     b.pair,       b.pair_edge,   b.basis,       b.basis_jacobian,
          b.y, b.y_jacobian, b.atype, b.edge_frame, b.edges.at(2), b.edges.at(3), b.edges.at(4)};
}

FrameBatch batch_from(const std::vector<torch::Tensor>& t) {
  if (t.size() != 14)
    throw Error("equivariant model: expected the 14 tensors of a packed batch, got " + std::to_string(t.size()));
  FrameBatch b{t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], {}, {}, {}, {}};
  b.edges = {b.i, b.j, t[11], t[12], t[13], b.pair, b.pair_edge};
  return b;
}

FrameBatch single_frame_batch(const EquivariantFrame& g, torch::Device device) {
  FrameBatch b{g.d,
               to_device_without_waiting(g.i, device),
               to_device_without_waiting(g.j, device),
               to_device_without_waiting(g.pair, device),
               to_device_without_waiting(g.pair_edge, device),
               g.basis,
               g.basis_jacobian,
               g.y,
               g.y_jacobian,
               {},
               torch::zeros({g.i.size(0)}, g.i.options().device(device)),
               {},
               {},
               {},
               {}};
  b.edges = {b.i, b.j};
  for (size_t k = 2; k < g.edges.size(); ++k) b.edges.push_back(to_device_without_waiting(g.edges[k], device));
  b.edges.push_back(b.pair);
  b.edges.push_back(b.pair_edge);
  if (g.pos.defined()) b.pos = g.pos, b.cell = g.cell.unsqueeze(0), b.periodic = {g.periodic};
  return b;
}

FrameBatch frame_batch(const std::vector<const EquivariantFrame*>& frames, int64_t natoms, torch::Device device) {
  const size_t nframes = frames.size();
  std::vector<torch::Tensor> d, basis, basis_jacobian, y, y_jacobian;
  std::vector<const torch::Tensor*> i, j, pair, pair_edge, centre_offsets, by_neighbor, neighbor_offsets;
  std::vector<int64_t> atom_offset, edge_offset, pair_offset;
  int64_t edges = 0, pairs = 0;
  for (size_t f = 0; f < nframes; ++f) {
    const EquivariantFrame& g = *frames[f];
    d.push_back(g.d);
    basis.push_back(g.basis);
    basis_jacobian.push_back(g.basis_jacobian);
    y.push_back(g.y);
    y_jacobian.push_back(g.y_jacobian);
    i.push_back(&g.i);
    j.push_back(&g.j);
    pair.push_back(&g.pair);
    pair_edge.push_back(&g.pair_edge);
    centre_offsets.push_back(&g.edges[2]);
    by_neighbor.push_back(&g.edges[3]);
    neighbor_offsets.push_back(&g.edges[4]);
    atom_offset.push_back(int64_t(f) * natoms);
    edge_offset.push_back(edges);
    pair_offset.push_back(pairs);
    edges += g.i.size(0);
    pairs += g.basis.size(0);
  }
  auto edge_frame = torch::empty({edges}, torch::kInt64);
  for (size_t f = 0; f < nframes; ++f) edge_frame.narrow(0, edge_offset[f], i[f]->size(0)).fill_(int64_t(f));
  FrameBatch b;
  b.d = torch::cat(d);
  b.basis = torch::cat(basis);
  b.basis_jacobian = torch::cat(basis_jacobian);
  b.y = torch::cat(y);
  b.y_jacobian = torch::cat(y_jacobian);
  b.i = concatenated(i, atom_offset, 0, device);
  b.j = concatenated(j, atom_offset, 0, device);
  b.pair = concatenated(pair, pair_offset, 0, device);
  b.pair_edge = concatenated(pair_edge, edge_offset, 0, device);
  b.edge_frame = to_device_without_waiting(edge_frame, device);
  b.edges = {b.i,
             b.j,
             concatenated(centre_offsets, edge_offset, 1, device),
             concatenated(by_neighbor, edge_offset, 0, device),
             concatenated(neighbor_offsets, edge_offset, 1, device),
             b.pair,
             b.pair_edge};
  if (nframes > 0 && frames[0]->pos.defined()) {
    std::vector<torch::Tensor> pos, cell;
    for (const EquivariantFrame* g : frames)
      pos.push_back(g->pos), cell.push_back(g->cell), b.periodic.push_back(g->periodic);
    b.pos = torch::cat(pos);
    b.cell = torch::stack(cell);
  }
  return b;
}

PaddedSizes padded_sizes(int64_t edges, int64_t pairs) { return {bucket_size(edges + 2), bucket_size(pairs + 1)}; }

void pad_to_buckets(FrameBatch& b, int64_t nframes, int64_t natoms) {
  const int64_t edges = b.i.size(0), pairs = b.basis.size(0);
  const PaddedSizes padded = padded_sizes(edges, pairs);
  const int64_t extra_edges = padded.edges - edges, extra_pairs = padded.pairs - pairs;
  const auto index = b.i.options();
  b.d = with_zero_rows(b.d, extra_edges);
  b.y = with_zero_rows(b.y, extra_edges);
  b.y_jacobian = with_zero_rows(b.y_jacobian, extra_edges);
  b.basis = with_zero_rows(b.basis, extra_pairs);
  b.basis_jacobian = with_zero_rows(b.basis_jacobian, extra_pairs);
  const auto last_atom = torch::full({extra_edges}, natoms - 1, index);
  b.i = torch::cat({b.i, last_atom});
  b.j = torch::cat({b.j, last_atom});
  b.pair = torch::cat({b.pair, torch::arange(extra_edges, index).remainder(extra_pairs) + pairs});
  b.pair_edge = torch::cat({b.pair_edge, torch::arange(extra_pairs, index).remainder(extra_edges) + edges});
  b.edge_frame = torch::cat({b.edge_frame, torch::full({extra_edges}, nframes - 1, index)});
  // The contraction's tables: the last atom's edges, as centre and as neighbour, now end at the
  // padded count.
  auto centre_offsets = b.edges[2].clone(), neighbor_offsets = b.edges[4].clone();
  centre_offsets[natoms].fill_(padded.edges);
  neighbor_offsets[natoms].fill_(padded.edges);
  const auto by_neighbor = torch::cat({b.edges[3], torch::arange(edges, padded.edges, index)});
  b.edges = {b.i, b.j, centre_offsets, by_neighbor, neighbor_offsets, b.pair, b.pair_edge};
}

}  // namespace mlip::models
