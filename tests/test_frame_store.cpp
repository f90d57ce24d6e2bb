// The frame store (src/train/frame_store.h): what it hands out equals a frame made directly,
// whatever the workers, the budget or the order; the cache stays within its budget; a wait is
// counted only when a frame was not ready. Training through it is checked bit for bit in
// test_train.cpp (streamed and cached runs).
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cmath>
#include <sstream>

#include "data/load.h"
#include "data/npy.h"
#include "models/registry.h"
#include "models/repulsion_labels.h"
#include "test_util.h"
#include "train/config.h"
#include "train/frame_store.h"

namespace {

using mlip::test::TempDir;

const char* kInput =
    "model:\n"
    "  type_map: [O, H]\n"
    "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8], axis_neuron: 4, seed: 3}\n"
    "  fitting_net: {neuron: [8, 8], seed: 3}\n"
    "training:\n"
    "  training_data: {systems: [sys]}\n"
    "  numb_steps: 1\n";

struct Fixture {
  TempDir dir;
  std::vector<mlip::data::System> systems;
  std::unique_ptr<mlip::models::Model> model;
  Fixture() {
    mlip::test::write_system(dir / "sys", 3, 6, 12, 7);
    std::vector<std::string> type_map{"O", "H"};
    systems = mlip::data::load_systems({dir / "sys"}, type_map, "", mlip::data::Loading::kStreamed);
    const auto config = mlip::train::parse_train_config(kInput, "test", dir.path());
    mlip::models::ModelContext context;
    context.training_systems = &systems;
    model = mlip::models::create_model(*config.model, context);
  }
};

/// The store's options: budget (bytes), worker threads, log.
mlip::train::FrameStoreOptions options(int64_t budget, int workers, std::ostream* log) {
  mlip::train::FrameStoreOptions o;
  o.budget_bytes = budget;
  o.workers = workers;
  o.log = log;
  return o;
}

/// The packed tensors of a made frame, for comparison (se_e2_a's input is opaque: compare
/// through predict, which reads every tensor of it).
torch::Tensor prediction_of(mlip::models::Model& model, const mlip::data::System& sys,
                            const mlip::train::PreparedFrame& frame) {
  mlip::models::SystemAtoms atoms;
  atoms.natoms = sys.natoms();
  atoms.types = sys.types;
  atoms.atype = torch::tensor(std::vector<int64_t>(sys.types.begin(), sys.types.end()), torch::kInt64);
  const auto p = model.predict(atoms, {frame.input.get()}, false);
  return torch::cat({p.energy.reshape({-1}), p.forces.to(torch::kFloat64).reshape({-1}),
                     p.virial.to(torch::kFloat64).reshape({-1}), frame.energy, frame.force.reshape({-1})});
}

TEST(FrameStore, FramesAreTheSameWhateverTheWorkersAndTheBudget) {
  Fixture fx;
  const auto& sys = fx.systems[0];
  // Reference: every frame made by the calling thread, nothing cached.
  std::vector<torch::Tensor> expected;
  {
    mlip::train::FrameStore store(*fx.model, torch::kCPU, options(0, 0, nullptr));
    const int set = store.add_set(fx.systems);
    for (int64_t f = 0; f < sys.nframes; ++f) expected.push_back(prediction_of(*fx.model, sys, *store.get(set, 0, f)));
    EXPECT_EQ(store.waits(), sys.nframes);
    EXPECT_EQ(store.cached_bytes(), 0);
  }
  for (int workers : {1, 3}) {
    for (int64_t budget : {int64_t(-1), int64_t(50000), int64_t(0)}) {
      std::ostringstream log;
      mlip::train::FrameStore store(*fx.model, torch::kCPU, options(budget, workers, &log));
      const int set = store.add_set(fx.systems);
      // Two passes in a scrambled order, prefetched two frames ahead.
      std::vector<int64_t> order;
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t k = 0; k < sys.nframes; ++k) order.push_back((k * 5 + pass) % sys.nframes);
      for (size_t k = 0; k < order.size(); ++k) {
        std::vector<int64_t> ahead;
        for (size_t a = k; a < std::min(order.size(), k + 3); ++a) ahead.push_back(order[a]);
        store.prefetch(set, 0, ahead);
        const auto frame = store.get(set, 0, order[k]);
        EXPECT_TRUE(torch::equal(prediction_of(*fx.model, sys, *frame), expected[size_t(order[k])]))
            << "workers " << workers << ", budget " << budget << ", frame " << order[k];
        if (budget >= 0) {
          EXPECT_LE(store.cached_bytes(), budget);
        }
      }
      if (budget < 0) {
        EXPECT_GT(store.cached_bytes(), 0);
      }
      // The budget smaller than one frame is said once.
      const std::string said = log.str();
      const size_t first = said.find("smaller than one made frame");
      EXPECT_EQ(first != std::string::npos, budget == 0) << said;
      if (first != std::string::npos) {
        EXPECT_EQ(said.find("smaller than one made frame", first + 1), std::string::npos);
      }
    }
  }
}

// model.pair_repulsion (docs/repulsion.md "In training"): the labels handed out are the frame's
// less the repulsion's energy, forces and virial; the model's input is unchanged.
TEST(FrameStore, ThePairRepulsionIsTakenOffTheLabels) {
  Fixture fx;
  const auto& sys = fx.systems[0];
  mlip::train::FrameStoreOptions plain = options(0, 0, nullptr), with = options(0, 1, nullptr);
  with.repulsion = mlip::models::repulsion_labels({"zbl", 0.5, 3.0}, {"O", "H"});
  mlip::train::FrameStore plain_store(*fx.model, torch::kCPU, plain), store(*fx.model, torch::kCPU, with);
  const int plain_set = plain_store.add_set(fx.systems), set = store.add_set(fx.systems);
  double largest = 0;
  for (int64_t f = 0; f < sys.nframes; ++f) {
    store.prefetch(set, 0, {f});
    const auto a = store.get(set, 0, f);
    const auto b = plain_store.get(plain_set, 0, f);
    const auto terms = with.repulsion->terms(sys, sys.frame(f));
    largest = std::max(largest, terms.energy);
    EXPECT_DOUBLE_EQ(a->energy.item<double>(), b->energy.item<double>() - terms.energy) << "frame " << f;
    const auto forces = torch::tensor(terms.forces, torch::kFloat64).reshape({-1, 3});
    EXPECT_TRUE(torch::allclose(a->force, b->force - forces, 0, 1e-12)) << "frame " << f;
    if (b->virial.defined()) {
      EXPECT_TRUE(torch::allclose(a->virial, b->virial - torch::tensor(terms.virial, torch::kFloat64), 0, 1e-12));
    }
    // The model's input is not the labels': the prediction part is the same.
    EXPECT_TRUE(torch::equal(prediction_of(*fx.model, sys, *a).slice(0, 0, 1 + sys.natoms() * 3 + 9),
                             prediction_of(*fx.model, sys, *b).slice(0, 0, 1 + sys.natoms() * 3 + 9)));
  }
  EXPECT_GT(largest, 0.1) << "the frames must have pairs within the repulsion";
}

TEST(FrameStore, CachedFramesAreNotWaitedForAndTheLeastRecentlyUsedGoFirst) {
  Fixture fx;
  mlip::train::FrameStore probe(*fx.model, torch::kCPU, options(-1, 0, nullptr));
  const int probe_set = probe.add_set(fx.systems);
  const int64_t frame_bytes = probe.get(probe_set, 0, 0)->bytes;
  ASSERT_GT(frame_bytes, 0);
  // Room for about three frames.
  mlip::train::FrameStore store(*fx.model, torch::kCPU, options(3 * frame_bytes + frame_bytes / 2, 0, nullptr));
  const int set = store.add_set(fx.systems);
  for (int64_t f : {0, 1, 2}) store.get(set, 0, f);
  EXPECT_EQ(store.waits(), 3);
  store.get(set, 0, 0);  // a hit; 0 becomes the most recently used
  EXPECT_EQ(store.waits(), 3);
  store.get(set, 0, 3);  // evicts 1, the least recently used
  EXPECT_EQ(store.waits(), 4);
  store.get(set, 0, 0);
  store.get(set, 0, 2);
  EXPECT_EQ(store.waits(), 4);
  store.get(set, 0, 1);  // was evicted
  EXPECT_EQ(store.waits(), 5);
}

TEST(FrameStore, FramesMadeIntoTheCacheAreNotWaitedForAndNeverPushOthersOut) {
  // make_into_cache (the trainer's frames made before the first step): a frame made this way is
  // a hit for get() and equals one made on demand; once the budget is reached it caches nothing
  // and keeps what is cached.
  Fixture fx;
  const auto& sys = fx.systems[0];
  mlip::train::FrameStore probe(*fx.model, torch::kCPU, options(-1, 0, nullptr));
  const int probe_set = probe.add_set(fx.systems);
  const int64_t frame_bytes = probe.get(probe_set, 0, 0)->bytes;
  mlip::train::FrameStore store(*fx.model, torch::kCPU, options(2 * frame_bytes + frame_bytes / 2, 0, nullptr));
  const int set = store.add_set(fx.systems);
  EXPECT_TRUE(store.make_into_cache(set, 0, 2));
  EXPECT_TRUE(store.make_into_cache(set, 0, 0));
  EXPECT_TRUE(store.make_into_cache(set, 0, 2)) << "cached already";
  const int64_t cached = store.cached_bytes();
  EXPECT_EQ(cached, 2 * frame_bytes);
  EXPECT_FALSE(store.make_into_cache(set, 0, 1)) << "a third frame does not fit";
  EXPECT_EQ(store.cached_bytes(), cached);
  EXPECT_EQ(store.make_time().frames, 3);
  for (int64_t f : {0, 2}) {
    const auto made_first = prediction_of(*fx.model, sys, *store.get(set, 0, f));
    const auto made_on_demand = prediction_of(*fx.model, sys, *probe.get(probe_set, 0, f));
    EXPECT_TRUE(torch::equal(made_first, made_on_demand)) << "frame " << f;
  }
  EXPECT_EQ(store.waits(), 0);
  store.get(set, 0, 1);
  EXPECT_EQ(store.waits(), 1);
}

TEST(FrameStore, AWorkersErrorReachesTheCaller) {
  Fixture fx;
  // Frame 1 holds a NaN coordinate; the streamed system reads only the headers at open, so the
  // error comes when the frame is made (by a worker) and must reach the caller of get().
  const std::string coord = fx.dir / "sys/set.000/coord.npy";
  auto array = mlip::data::read_npy(coord);
  array.values[size_t(array.shape[1]) + 4] = std::nan("");
  mlip::data::write_npy(coord, array.shape, array.values);
  std::vector<std::string> type_map{"O", "H"};
  fx.systems = mlip::data::load_systems({fx.dir / "sys"}, type_map, "", mlip::data::Loading::kStreamed);
  mlip::train::FrameStore store(*fx.model, torch::kCPU, options(-1, 1, nullptr));
  const int set = store.add_set(fx.systems);
  store.prefetch(set, 0, {0, 1, 2});
  EXPECT_NE(store.get(set, 0, 0), nullptr);
  const std::string message = mlip::test::error_of([&] { store.get(set, 0, 1); });
  EXPECT_TRUE(mlip::test::contains(message, "frame 1, atom 1: coordinate y is NaN")) << message;
  EXPECT_NE(store.get(set, 0, 2), nullptr);
}

}  // namespace
