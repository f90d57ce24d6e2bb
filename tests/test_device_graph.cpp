// The MD graph built with tensor operations (md::build_device_graph, docs/lammps.md "Pairs on the
// device") against a brute-force reference over every pair of rows, for one to three layers, with
// ghosts folded by id and without ids; and md::Potential with the pairs built that way against the
// host's Kokkos list and graph (the same TorchScript forward), both models, float32 and float64.
// Runs on the CPU device here; test_potential_cuda runs the device path on a GPU.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "error.h"
#include "md/device_graph.h"
#include "md/potential.h"
#include "potential_test_util.h"
#include "test_util.h"

namespace mlip {
namespace {

using test::fold;
using test::max_difference;

/// Runs `f`, which must throw an mlip::Error whose message contains `phrase`.
template <typename F>
void expect_error(F f, const std::string& phrase) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying \"" << phrase << "\"";
  } catch (const Error& e) {
    EXPECT_TRUE(test::contains(e.what(), phrase)) << e.what();
  }
}

/// One pair of a graph: centre node, neighbour node and the shift rounded to 1e-9 Å.
using Pair = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;

Pair make_pair_key(int64_t i, int64_t j, const double* s) {
  return {i, j, std::llround(s[0] * 1e9), std::llround(s[1] * 1e9), std::llround(s[2] * 1e9)};
}

/// The graph by brute force: nodes are the lowest row of each id, ascending; centres the nodes
/// within layers - 1 hops of the owned rows; pairs every other row within r_max of a centre.
struct Reference {
  std::vector<int64_t> row_of_node;
  std::set<Pair> pairs;
};

Reference reference_graph(const test::RankAtoms& r, bool with_ids, int64_t layers, double r_max) {
  const int64_t n = int64_t(r.types.size());
  auto id = [&](int64_t row) { return with_ids ? r.owner[size_t(row)] : row; };
  std::map<int64_t, int64_t> lowest_row;
  for (int64_t row = 0; row < n; ++row) lowest_row.emplace(id(row), row);
  Reference ref;
  std::vector<int64_t> node_of_rep(size_t(n), -1);
  for (int64_t row = 0; row < n; ++row)
    if (lowest_row.at(id(row)) == row) {
      node_of_rep[size_t(row)] = int64_t(ref.row_of_node.size());
      ref.row_of_node.push_back(row);
    }
  auto node = [&](int64_t row) { return node_of_rep[size_t(lowest_row.at(id(row)))]; };
  std::vector<bool> centre(ref.row_of_node.size(), false);
  for (int64_t row = 0; row < r.nlocal; ++row) centre[size_t(row)] = true;
  std::set<Pair> pairs;
  for (int64_t hop = 1; hop <= layers; ++hop) {
    std::vector<bool> next = centre;
    for (size_t v = 0; v < ref.row_of_node.size(); ++v) {
      if (!centre[v]) continue;
      const int64_t i = ref.row_of_node[v];
      for (int64_t j = 0; j < n; ++j) {
        double d2 = 0, shift[3];
        for (int c = 0; c < 3; ++c) {
          const double d = r.pos[size_t(j * 3 + c)] - r.pos[size_t(i * 3 + c)];
          d2 += d * d;
          shift[c] = r.pos[size_t(j * 3 + c)] - r.pos[size_t(ref.row_of_node[size_t(node(j))] * 3 + c)];
        }
        if (j == i || d2 >= r_max * r_max) continue;
        pairs.insert(make_pair_key(int64_t(v), node(j), shift));
        next[size_t(node(j))] = true;
      }
    }
    if (hop < layers) centre = next;
  }
  ref.pairs = pairs;
  return ref;
}

TEST(DeviceGraph, EqualsTheBruteForceGraph) {
  const double r_max = 3.0;
  for (const bool with_ids : {true, false})
    for (int64_t layers = 1; layers <= 3; ++layers)
      for (const bool owned_all : {true, false}) {
        SCOPED_TRACE(std::string(with_ids ? "ids" : "no ids") + ", " + std::to_string(layers) + " layers, " +
                     (owned_all ? "every atom owned" : "half the atoms owned"));
        const test::Frame f = test::random_frame(30, true, 11 + unsigned(layers), 7.0, {0.6, -0.4, 0.3}, 0.9, 0.4);
        std::vector<int64_t> owned;
        for (int64_t i = 0; i < f.natoms(); i += owned_all ? 1 : 2) owned.push_back(i);
        const test::RankAtoms r = test::rank_atoms(f, owned);
        const int64_t n = int64_t(r.types.size());
        const torch::Tensor pos = torch::from_blob(const_cast<double*>(r.pos.data()), {n, 3}, torch::kFloat64);
        const torch::Tensor ids =
            with_ids ? torch::from_blob(const_cast<int64_t*>(r.owner.data()), {n}, torch::kInt64) : torch::Tensor();
        std::optional<md::DeviceOverlap> overlap;
        const md::DeviceGraph g = md::build_device_graph(pos, ids, r.nlocal, layers, r_max, overlap);
        EXPECT_FALSE(overlap.has_value());
        const Reference ref = reference_graph(r, with_ids, layers, r_max);
        ASSERT_EQ(g.nodes, int64_t(ref.row_of_node.size()));
        const torch::Tensor rows = g.row_of_node.contiguous();
        EXPECT_EQ(std::vector<int64_t>(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + g.nodes), ref.row_of_node);
        ASSERT_EQ(g.npairs, int64_t(ref.pairs.size()));
        ASSERT_GT(g.npairs, 0);
        const torch::Tensor centre = g.centre.contiguous(), neighbour = g.neighbour.contiguous();
        const torch::Tensor shift = g.shift.contiguous();
        std::set<Pair> got;
        for (int64_t p = 0; p < g.npairs; ++p) {
          got.insert(make_pair_key(centre.data_ptr<int64_t>()[p], neighbour.data_ptr<int64_t>()[p],
                                   shift.data_ptr<double>() + p * 3));
          if (p > 0) {
            EXPECT_LE(centre.data_ptr<int64_t>()[p - 1], centre.data_ptr<int64_t>()[p]) << "pair " << p;
          }
        }
        EXPECT_EQ(got, ref.pairs);
      }
}

TEST(DeviceGraph, ManyCellsAndEmptyInputs) {
  // A sparse line of atoms far apart (more cells than the grid allows: cells
  // are widened), then no atoms, and atoms with no neighbour.
  std::vector<double> pos;
  for (int k = 0; k < 20; ++k) pos.insert(pos.end(), {40.0 * k, 0.5 * (k % 2), 0.0});
  pos.insert(pos.end(), {1.0, 0.0, 0.0});  // one neighbour of atom 0
  const int64_t n = int64_t(pos.size() / 3);
  std::optional<md::DeviceOverlap> overlap;
  const torch::Tensor t = torch::from_blob(pos.data(), {n, 3}, torch::kFloat64);
  md::DeviceGraph g = md::build_device_graph(t, torch::Tensor(), n, 1, 2.0, overlap);
  EXPECT_EQ(g.nodes, n);
  EXPECT_EQ(g.npairs, 2);  // 0 -> 20 and 20 -> 0
  g = md::build_device_graph(torch::zeros({0, 3}, torch::kFloat64), torch::Tensor(), 0, 2, 2.0, overlap);
  EXPECT_EQ(g.nodes, 0);
  EXPECT_EQ(g.npairs, 0);
}

TEST(DeviceGraph, OverlapAndAnIdOwnedTwiceAreFound) {
  std::vector<double> pos = {0, 0, 0, 1.5, 0, 0, 1.5, 0, 1e-4};
  std::optional<md::DeviceOverlap> overlap;
  const torch::Tensor t = torch::from_blob(pos.data(), {3, 3}, torch::kFloat64);
  md::build_device_graph(t, torch::Tensor(), 3, 1, 2.0, overlap);
  ASSERT_TRUE(overlap.has_value());
  EXPECT_EQ(std::min(overlap->row_i, overlap->row_j), 1);
  EXPECT_EQ(std::max(overlap->row_i, overlap->row_j), 2);
  EXPECT_NEAR(overlap->distance, 1e-4, 1e-12);
  std::vector<int64_t> ids = {7, 8, 7};
  const torch::Tensor id_tensor = torch::from_blob(ids.data(), {3}, torch::kInt64);
  pos[8] = 1.0;
  expect_error([&] { md::build_device_graph(t, id_tensor, 3, 1, 2.0, overlap); }, "atom id 7 is owned twice");
}

template <typename T>
struct DevicePairsTest : ::testing::Test {
  static constexpr bool kFloat32 = std::is_same_v<T, float>;
  static std::string precision() { return kFloat32 ? "float32" : "float64"; }
  // float32: the pairs come in another order, so sums are summed in another
  // order.
  static double tolerance() { return kFloat32 ? 2e-5 : 1e-10; }
};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DevicePairsTest, Reals);

void check_device_pairs_equal_host_pairs(const std::string& model, double tol) {
  md::Potential host(model, "cpu", md::Evaluation::kTorchScript, md::PairBuilding::kHost);
  md::Potential device(model, "cpu", md::Evaluation::kTorchScript, md::PairBuilding::kDevice);
  EXPECT_FALSE(host.pairs_on_device());
  EXPECT_TRUE(device.pairs_on_device());
  EXPECT_TRUE(test::contains(device.describe(), "pairs on the device")) << device.describe();
  for (const bool with_ids : {true, false})
    for (const bool owned_all : {true, false}) {
      SCOPED_TRACE(std::string(with_ids ? "ids" : "no ids") + (owned_all ? ", every atom owned" : ", half owned"));
      const test::Frame f = test::random_frame(36, true, 5 + unsigned(owned_all), 9.5, {0.8, -0.6, 0.5}, 0.9, 0.35);
      std::vector<int64_t> owned;
      for (int64_t i = 0; i < f.natoms(); i += owned_all ? 1 : 2) owned.push_back(i);
      const test::RankAtoms r = test::rank_atoms(f, owned);
      md::LocalAtoms atoms{r.pos.data(), r.types.data(), int64_t(r.types.size()), r.nlocal};
      if (with_ids) atoms.ids = r.owner.data();
      md::Results a, b;
      host.compute(atoms, true, true, a);
      device.compute(atoms, true, true, b);
      if (with_ids) {
        // The two paths may stand for a ghost atom by different rows (the host
        // by the first row its search meets, the device by the lowest): compare
        // per atom of the frame.
        for (md::Results* out : {&a, &b}) {
          out->forces = fold(out->forces, r.owner, f.natoms(), 3);
          out->atom_virial = fold(out->atom_virial, r.owner, f.natoms(), 9);
        }
      }
      EXPECT_NEAR(b.energy, a.energy, tol * std::abs(a.energy));
      for (const auto& [name, x, y] : {std::tuple{"atomic energies", &b.atomic_energy, &a.atomic_energy},
                                       std::tuple{"forces", &b.forces, &a.forces},
                                       std::tuple{"per-atom virials", &b.atom_virial, &a.atom_virial}}) {
        const auto [diff, scale] = max_difference(*x, *y);
        EXPECT_GT(scale, 0.0) << name << " are all zero: nothing was compared";
        EXPECT_LE(diff, tol * scale) << name << ": largest difference " << diff << ", scale " << scale;
      }
      const auto [diff, scale] = max_difference(std::vector<double>(b.virial.begin(), b.virial.end()),
                                                std::vector<double>(a.virial.begin(), a.virial.end()));
      EXPECT_LE(diff, tol * scale) << "virial: largest difference " << diff << ", scale " << scale;
    }
  // Atoms on top of each other: the same error as the host's.
  std::vector<double> pos = {0, 0, 0, 1.0, 0, 0, 1.0, 0, 1e-5};
  std::vector<int> types = {0, 1, 1};
  md::LocalAtoms atoms{pos.data(), types.data(), 3, 3};
  md::Results out;
  expect_error([&] { device.compute(atoms, false, false, out); }, "are 1e-05 Å apart");
}

TYPED_TEST(DevicePairsTest, SeE2AEqualsTheHostPairs) {
  test::TempDir dir;
  test::write_frozen(dir / "se.pt", test::se_yaml(TestFixture::precision()));
  check_device_pairs_equal_host_pairs(dir / "se.pt", TestFixture::tolerance());
}

TYPED_TEST(DevicePairsTest, EquivariantEqualsTheHostPairs) {
  test::TempDir dir;
  test::write_frozen(dir / "eq.pt", test::equivariant_yaml(TestFixture::precision()));
  check_device_pairs_equal_host_pairs(dir / "eq.pt", TestFixture::tolerance());
}

}  // namespace
}  // namespace mlip
