#include "models/repulsion_inference.h"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>

namespace mlip::models {
namespace {

/// Adds the repulsion of each (centre, neighbour) pair to an evaluation's result.
class RepulsionAdder {
 public:
  RepulsionAdder(const ZblRepulsion& zbl, const Request& request, InferenceResult& out)
      : zbl_(zbl), request_(request), out_(out) {}

  /// The pair (i, j) of types (ti, tj) with vector d = r_j - r_i; `pair` its index in a graph
  /// (-1 in a neighbour list).
  void add(int64_t i, int64_t j, int64_t ti, int64_t tj, const double d[3], int64_t pair) {
    const double r = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    if (r >= zbl_.outer()) return;
    double v = 0, dv = 0;
    zbl_.evaluate(ti, tj, r, v, dv);
    // Half the pair's energy is the centre's; its other half comes with the pair (j, i).
    out_.energy += 0.5 * v;
    if (request_.outputs.atomic_energy) out_.atomic[size_t(i)] += 0.5 * v;
    double g[3];  // dE/dd of this half
    for (int a = 0; a < 3; ++a) g[a] = 0.5 * dv * d[a] / r;
    for (int a = 0; a < 3; ++a) {
      out_.forces[size_t(i * 3 + a)] += g[a];
      out_.forces[size_t(j * 3 + a)] -= g[a];
      for (int b = 0; b < 3; ++b) {
        const double w = -d[a] * g[b];
        out_.virial[size_t(a * 3 + b)] += w;
        if (request_.outputs.atom_virial) {
          out_.atom_virial[size_t(i * 9 + a * 3 + b)] += 0.5 * w;
          out_.atom_virial[size_t(j * 9 + a * 3 + b)] += 0.5 * w;
        }
      }
      if (pair >= 0 && request_.outputs.pair_gradient) out_.pair_gradient[size_t(pair * 3 + a)] += g[a];
    }
  }

 private:
  const ZblRepulsion& zbl_;
  const Request& request_;
  InferenceResult& out_;
};

template <typename Real>
void add_list(const data::NeighborList<Real>& nl, const NeighborInput& input, RepulsionAdder& adder) {
  const auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.offsets);
  const auto neighbor = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.neighbor);
  const auto vector = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), nl.vector);
  const int64_t centres = std::min<int64_t>(nl.natoms, input.nlocal);
  for (int64_t i = 0; i < centres; ++i)
    for (int64_t k = offsets(i); k < offsets(i + 1); ++k) {
      const int64_t j = neighbor(k);
      const double d[3] = {double(vector(k, 0)), double(vector(k, 1)), double(vector(k, 2))};
      adder.add(i, j, input.types[i], input.types[j], d, -1);
    }
}

class RepulsionInference final : public Inference {
 public:
  RepulsionInference(std::unique_ptr<Inference> inner, const PairRepulsionSettings& repulsion,
                     const std::vector<std::string>& type_map)
      : inner_(std::move(inner)), zbl_(repulsion, type_map) {}

  std::string describe() const override { return inner_->describe() + " with ZBL repulsion"; }
  double cutoff() const override { return inner_->cutoff(); }
  InferenceInputs inputs() const override { return inner_->inputs(); }
  std::vector<Counter> counters() const override { return inner_->counters(); }

  InferenceResult evaluate(const Request& request) override {
    InferenceResult out = inner_->evaluate(request);
    add_pair_repulsion(zbl_, request, out);
    return out;
  }

 private:
  std::unique_ptr<Inference> inner_;
  ZblRepulsion zbl_;
};

}  // namespace

void add_pair_repulsion(const ZblRepulsion& zbl, const Request& request, InferenceResult& out) {
  RepulsionAdder adder(zbl, request, out);
  if (request.neighbors != nullptr) {
    const NeighborInput& input = *request.neighbors;
    if (input.list_double != nullptr)
      add_list(*input.list_double, input, adder);
    else if (input.list_float != nullptr)
      add_list(*input.list_float, input, adder);
  } else if (request.graph != nullptr) {
    const AtomGraph& g = *request.graph;
    for (int64_t p = 0; p < g.npairs; ++p) {
      const int64_t i = g.centre[p], j = g.neighbour[p];
      if (i >= g.nlocal) continue;  // a ghost's energy is its owner's
      adder.add(i, j, g.types[i], g.types[j], g.vectors + p * 3, p);
    }
  }
}

std::string own_inference_capability(const std::string& device, const PairRepulsionSettings& repulsion) {
  return repulsion.enabled() ? device + "+" + repulsion.type : device;
}

std::unique_ptr<Inference> with_pair_repulsion(std::unique_ptr<Inference> inner, const PairRepulsionSettings& repulsion,
                                               const std::vector<std::string>& type_map) {
  if (!repulsion.enabled() || !inner) return inner;
  return std::make_unique<RepulsionInference>(std::move(inner), repulsion, type_map);
}

}  // namespace mlip::models
