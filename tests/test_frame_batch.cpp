// A batch of the equivariant model's frames as one graph (models/equivariant/frame_batch.h): the
// concatenated tables are consistent (checked element by element against their definitions),
// and padding to bucket sizes gives the bucket's shapes, keeps every real row as it was, adds
// zero rows only, and keeps the tables consistent. That the padded batch predicts what the
// unpadded one does is tests/test_equivariant_training.cpp's PaddedToBucketsEqualsUnpadded.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/system.h"
#include "models/bucket.h"
#include "models/equivariant/equivariant_model.h"
#include "models/equivariant/frame_batch.h"
#include "test_util.h"

namespace {

using mlip::models::EquivariantFrame;
using mlip::models::FrameBatch;

mlip::models::EquivariantSettings settings() {
  mlip::models::EquivariantSettings s;
  s.type = "equivariant";
  s.type_map = {"O", "H"};
  s.precision = "float64";
  s.avg_num_neighbors = 6.0;
  s.seed = 3;
  auto& c = s.config;
  c.type_map = s.type_map;
  c.r_max = 3.5;
  c.num_features = 4;
  c.num_layers = 2;
  c.num_bessels = 4;
  c.radial_width = 8;
  c.precision = "float64";
  return s;
}

std::vector<int64_t> values(const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

/// Every table of `b` (natoms atoms in all) against its definition.
void expect_consistent(const FrameBatch& b, int64_t natoms, int64_t nframes) {
  const int64_t E = b.i.size(0), Q = b.basis.size(0);
  ASSERT_EQ(b.j.size(0), E);
  ASSERT_EQ(b.pair.size(0), E);
  ASSERT_EQ(b.d.size(0), E);
  ASSERT_EQ(b.y.size(0), E);
  ASSERT_EQ(b.y_jacobian.size(0), E);
  ASSERT_EQ(b.edge_frame.size(0), E);
  ASSERT_EQ(b.basis_jacobian.size(0), Q);
  ASSERT_EQ(b.pair_edge.size(0), Q);
  ASSERT_EQ(b.edges.size(), 7u);
  const auto i = values(b.i), j = values(b.j), pair = values(b.pair), pair_edge = values(b.pair_edge),
             frame = values(b.edge_frame), centre_offsets = values(b.edges[2]), by_neighbor = values(b.edges[3]),
             neighbor_offsets = values(b.edges[4]);
  EXPECT_EQ(values(b.edges[0]), i);
  EXPECT_EQ(values(b.edges[1]), j);
  EXPECT_EQ(values(b.edges[5]), pair);
  EXPECT_EQ(values(b.edges[6]), pair_edge);
  ASSERT_EQ(int64_t(centre_offsets.size()), natoms + 1);
  ASSERT_EQ(int64_t(neighbor_offsets.size()), natoms + 1);
  EXPECT_TRUE(std::is_sorted(i.begin(), i.end())) << "centres non-decreasing";
  for (int64_t e = 0; e < E; ++e) {
    ASSERT_TRUE(i[e] >= 0 && i[e] < natoms && j[e] >= 0 && j[e] < natoms) << "edge " << e;
    ASSERT_TRUE(pair[e] >= 0 && pair[e] < Q) << "edge " << e;
    ASSERT_TRUE(frame[e] >= 0 && frame[e] < nframes) << "edge " << e;
  }
  for (int64_t q = 0; q < Q; ++q) ASSERT_TRUE(pair_edge[q] >= 0 && pair_edge[q] < E) << "pair " << q;
  EXPECT_EQ(centre_offsets[0], 0);
  EXPECT_EQ(neighbor_offsets[0], 0);
  EXPECT_EQ(centre_offsets[natoms], E);
  EXPECT_EQ(neighbor_offsets[natoms], E);
  std::vector<int64_t> seen(E, 0);
  for (int64_t a = 0; a < natoms; ++a) {
    for (int64_t e = centre_offsets[a]; e < centre_offsets[a + 1]; ++e) ASSERT_EQ(i[e], a) << "centre offsets";
    for (int64_t k = neighbor_offsets[a]; k < neighbor_offsets[a + 1]; ++k) {
      ASSERT_EQ(j[by_neighbor[k]], a) << "neighbour order";
      if (k > neighbor_offsets[a]) {
        ASSERT_LT(by_neighbor[k - 1], by_neighbor[k]) << "stable";
      }
      ++seen[by_neighbor[k]];
    }
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int64_t c) { return c == 1; })) << "a permutation";
}

TEST(FrameBatch, ConcatenatedAndPaddedTablesAreConsistent) {
  const auto s = settings();
  auto model = mlip::models::create_model(s, mlip::models::ModelContext{});
  const int64_t natoms = 10, nframes = 3;
  const auto first = mlip::test::random_frame(natoms, true, 5, 4.5, {0.7, -0.4, 0.3}, 0.9, 0.4);
  mlip::data::System sys;
  sys.type_map = s.type_map;
  sys.types = first.types;
  sys.pbc = first.pbc;
  sys.nframes = nframes;
  std::vector<std::unique_ptr<mlip::models::FrameInput>> inputs;
  std::vector<const EquivariantFrame*> frames;
  for (int64_t f = 0; f < nframes; ++f) {
    const auto r =
        mlip::test::random_frame(natoms, true, 5 + 7 * f, 4.5 * (1.0 + 0.15 * f), {0.7, -0.4, 0.3}, 0.9, 0.4);
    mlip::data::Frame frame;
    frame.coord = r.pos;
    frame.box = r.cell;
    inputs.push_back(model->prepare_frame(sys, frame));
    frames.push_back(dynamic_cast<const EquivariantFrame*>(inputs.back().get()));
    ASSERT_NE(frames.back(), nullptr);
  }
  for (size_t count : {size_t(1), size_t(nframes)}) {
    SCOPED_TRACE(std::to_string(count) + " frame(s)");
    const std::vector<const EquivariantFrame*> some(frames.begin(), frames.begin() + long(count));
    const int64_t atoms = int64_t(count) * natoms;
    FrameBatch b = count == 1 ? mlip::models::single_frame_batch(*some[0], torch::kCPU)
                              : mlip::models::frame_batch(some, natoms, torch::kCPU);
    expect_consistent(b, atoms, int64_t(count));
    const int64_t E = b.i.size(0), Q = b.basis.size(0);
    ASSERT_GT(E, 0);
    EXPECT_EQ(2 * Q, E) << "every edge has its reverse";
    const FrameBatch before = b;
    mlip::models::pad_to_buckets(b, int64_t(count), atoms);
    const auto padded = mlip::models::padded_sizes(E, Q);
    EXPECT_EQ(padded.edges, mlip::models::bucket_size(E + 2));
    EXPECT_EQ(padded.pairs, mlip::models::bucket_size(Q + 1));
    ASSERT_EQ(b.i.size(0), padded.edges);
    ASSERT_EQ(b.basis.size(0), padded.pairs);
    expect_consistent(b, atoms, int64_t(count));
    // Real rows as they were, padded rows zero, padded edges on the last atom and padded pairs.
    for (const auto& [got, was] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
             {b.d, before.d}, {b.y, before.y}, {b.y_jacobian, before.y_jacobian}}) {
      EXPECT_TRUE(torch::equal(got.narrow(0, 0, E), was));
      EXPECT_EQ(got.narrow(0, E, padded.edges - E).abs().max().item<double>(), 0.0);
    }
    for (const auto& [got, was] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
             {b.basis, before.basis}, {b.basis_jacobian, before.basis_jacobian}}) {
      EXPECT_TRUE(torch::equal(got.narrow(0, 0, Q), was));
      EXPECT_EQ(got.narrow(0, Q, padded.pairs - Q).abs().max().item<double>(), 0.0);
    }
    for (const auto& [got, was] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
             {b.i, before.i}, {b.j, before.j}, {b.pair, before.pair}, {b.edge_frame, before.edge_frame}})
      EXPECT_TRUE(torch::equal(got.narrow(0, 0, E), was));
    EXPECT_TRUE(torch::equal(b.pair_edge.narrow(0, 0, Q), before.pair_edge));
    EXPECT_TRUE((b.i.narrow(0, E, padded.edges - E) == atoms - 1).all().item<bool>());
    EXPECT_TRUE((b.j.narrow(0, E, padded.edges - E) == atoms - 1).all().item<bool>());
    EXPECT_TRUE((b.pair.narrow(0, E, padded.edges - E) >= Q).all().item<bool>()) << "padded edges, padded pairs";
    EXPECT_TRUE(torch::equal(b.edges[2].narrow(0, 0, atoms), before.edges[2].narrow(0, 0, atoms)));
  }
}

}  // namespace
