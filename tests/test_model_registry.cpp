// A model defined here, in the test, registered with one line and trained through mlip::train:
// what docs/models.md "Adding a model" describes. Also the device checks of train/device.h.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "data/kokkos_runtime.h"
#include "data/neighbor_list.h"
#include "error.h"
#include "models/pair_list.h"
#include "models/registry.h"
#include "test_util.h"
#include "train/config.h"
#include "train/device.h"
#include "train/trainer.h"

namespace {

using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;
namespace models = mlip::models;

/// A pair model: E = sum_i e0[t_i] + 1/2 sum_{i != j, r < r_max} a[t_i, t_j] exp(-r) (1 - r/r_max)^2.
struct PairSettings : models::ModelSettings {
  double r_max = 3.0;
  double cutoff() const override { return r_max; }
};

struct PairFrame : models::FrameInput {
  int64_t bytes() const override { return models::tensor_bytes(d) + models::tensor_bytes(i) + models::tensor_bytes(j); }
  torch::Tensor d, i, j;  // [E, 3] pair vectors, [E] centres and neighbours
};

class PairModel final : public models::Model {
 public:
  PairModel(const PairSettings& s, const models::ModelContext& context) : settings_(s), device_(context.device) {
    const int64_t nt = int64_t(s.type_map.size());
    module_ = torch::jit::Module("pair_model");
    module_.register_parameter("a", torch::full({nt, nt}, 0.5, torch::kFloat64).requires_grad_(), false);
    module_.register_parameter("e0", torch::zeros({nt}, torch::kFloat64).requires_grad_(), false);
    module_.define(
        "def atomic_energy(self, d: Tensor, i: Tensor, j: Tensor, atype: Tensor) -> Tensor:\n"
        "    r = torch.sqrt((d * d).sum(1))\n"
        "    pair = self.a[atype[i], atype[j]] * torch.exp(-r) * (1.0 - r / " + std::to_string(s.r_max) + ") ** 2\n"
        "    return self.e0[atype] + 0.5 * torch.zeros_like(self.e0[atype]).index_add(0, i, pair)\n");
    module_.to(device_);
  }
  torch::jit::Module& module() override { return module_; }
  const models::ModelSettings& settings() const override { return settings_; }
  std::string summary() const override { return "pair (test model)"; }
  torch::Device device() const override { return device_; }

  std::unique_ptr<models::FrameInput> prepare_frame(const mlip::data::System& sys,
                                                    const mlip::data::Frame& frame) override {
    std::unique_lock<std::mutex> lock(mlip::data::kokkos_mutex());  // called on worker threads
    const auto pairs = models::pair_list(mlip::data::build_neighbor_list<double>(
        frame.coord.data(), sys.natoms(), frame.cell(), sys.pbc, settings_.r_max));
    lock.unlock();
    auto out = std::make_unique<PairFrame>();
    out->d = pairs.vector.to(device_);
    out->i = pairs.centre.to(device_);
    out->j = pairs.neighbor.to(device_);
    return out;
  }
  void compute_statistics(const std::vector<models::StatisticsFrames>& frames, const std::vector<double>&,
                          std::ostream& log) override {
    ++statistics_calls;
    log << "pair model: statistics from " << frames.size() << " system(s)\n";
  }
  models::Prediction predict(const models::SystemAtoms& atoms, const std::vector<const models::FrameInput*>& frames,
                             bool training) override {
    std::vector<torch::Tensor> es, fs, vs;
    for (const auto* input : frames) {
      const auto& g = static_cast<const PairFrame&>(*input);
      const auto x = g.d.detach().requires_grad_(true);
      const auto e = module_.run_method("atomic_energy", x, g.i, g.j, atoms.atype).toTensor();
      const auto grad = torch::autograd::grad({e.sum()}, {x}, {}, training, training)[0];
      es.push_back(e.sum());
      fs.push_back(torch::zeros({atoms.natoms, 3}, grad.options()).index_add(0, g.i, grad).index_add(0, g.j, -grad));
      vs.push_back(-x.detach().t().matmul(grad));
    }
    last_ = {torch::stack(es), torch::stack(fs), torch::stack(vs), {}};
    return last_;
  }
  void backward(const torch::Tensor& ge, const torch::Tensor& gf, const torch::Tensor& gv,
                const torch::Tensor& gq) override {
    models::backward_through_graph(last_, ge, gf, gv, gq);
  }

  static inline int statistics_calls = 0;

 private:
  PairSettings settings_;
  torch::Device device_;
  torch::jit::Module module_;
  models::Prediction last_;
};

/// The one registry line (here at run time, as a plug-in would do it).
void register_pair_model() {
  static const bool done = [] {
    models::ModelEntry e;
    e.name = "pair_test";
    e.keys = {"type", "type_map", "r_max", "data_stat_nbatch"};
    e.read = [](const mlip::input::Section& m, const std::vector<std::string>& type_map) {
      auto s = std::make_shared<PairSettings>();
      s->type = "pair_test";
      s->type_map = type_map;
      s->r_max = m.number("r_max", s->r_max, mlip::input::Bound::kPositive);
      return std::shared_ptr<models::ModelSettings>(s);
    };
    e.create = [](const models::ModelSettings& s, const models::ModelContext& c) -> std::unique_ptr<models::Model> {
      return std::make_unique<PairModel>(dynamic_cast<const PairSettings&>(s), c);
    };
    models::register_model(e);
    return true;
  }();
  (void)done;
}

std::vector<std::vector<double>> lcurve_rows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<double> row;
    for (double v; fields >> v;) row.push_back(v);
    rows.push_back(row);
  }
  return rows;
}

TEST(ModelRegistry, AModelDefinedInATestTrainsThroughTheTrainer) {
  register_pair_model();
  TempDir dir;
  write_system(dir / "data/a", 2, 4, 6, 11);
  write_text(dir / "input.yaml",
             "model: {type: pair_test, type_map: [O, H], r_max: 3.5}\n"
             "learning_rate: {start_lr: 0.3, stop_lr: 0.1, decay_steps: 10}\n"
             "loss: {start_pref_e: 1, limit_pref_e: 1, start_pref_f: 1, limit_pref_f: 1}\n"
             "training: {training_data: {systems: [data/a], batch_size: 2}, numb_steps: 40, seed: 1, disp_freq: 1,\n"
             "           save_freq: 40, ema_decay: 0}\n");
  const auto config = mlip::train::load_train_config(dir / "input.yaml");
  EXPECT_EQ(config.model->type, "pair_test");
  EXPECT_DOUBLE_EQ(config.model->cutoff(), 3.5);
  mlip::train::TrainOptions options;
  options.output_dir = dir / "run";
  options.device = "cpu";
  PairModel::statistics_calls = 0;
  ASSERT_EQ(mlip::train::train(config, options), 0);
  EXPECT_EQ(PairModel::statistics_calls, 1);
  const auto rows = lcurve_rows(dir / "run/lcurve.out");
  ASSERT_EQ(rows.size(), 40u);
  // The training loss (column 1) falls: the mean of the last five lines is below half the first.
  double last = 0;
  for (size_t k = rows.size() - 5; k < rows.size(); ++k) last += rows[k][1] / 5;
  EXPECT_LT(last, 0.5 * rows[0][1]) << "first " << rows[0][1] << ", last five " << last;
  // Its checkpoint holds the module and names the model type.
  std::ifstream ckpt(dir / "run/model.ckpt-40.pt");
  EXPECT_TRUE(ckpt.good());
}

TEST(ModelRegistry, UnknownTypesListTheRegisteredOnes) {
  register_pair_model();
  const std::string text = "model: {type: nequip, type_map: [O]}\ntraining: {training_data: {systems: [a]}, numb_steps: 1}\n";
  const std::string error = mlip::test::error_of([&] { mlip::train::parse_train_config(text, "in.yaml", "/"); });
  EXPECT_EQ(error, "in.yaml: model.type: expected one of \"standard\", \"equivariant\" or \"pair_test\", got nequip");
  EXPECT_THROW(models::register_model(*models::find_model("pair_test", false)), mlip::Error);
}

// model.long_range (docs/long_range.md): read and checked by the input reader for every model type
// that says it computes the term, refused naming the type otherwise, and written into the record.
TEST(ModelRegistry, TheLongRangeSectionIsCheckedAndRecorded) {
  register_pair_model();
  static const bool done = [] {
    models::ModelEntry e = *models::find_model("pair_test", false);
    e.name = "pair_test_long_range";
    e.long_range = true;
    e.read = [](const mlip::input::Section& m, const std::vector<std::string>& type_map) {
      auto s = std::make_shared<PairSettings>();
      s->type = "pair_test_long_range";
      s->type_map = type_map;
      return std::shared_ptr<models::ModelSettings>(s);
    };
    models::register_model(e);
    return true;
  }();
  (void)done;
  auto parse = [](const std::string& model) {
    return models::parse_model_settings("model: " + model + "\n", "in.yaml");
  };
  const auto s = parse("{type: pair_test_long_range, type_map: [O], long_range: {sigma: 0.8, kspace_spacing: 1.5, total_charge: -1}}");
  EXPECT_TRUE(s->long_range.enabled);
  EXPECT_DOUBLE_EQ(s->long_range.sigma, 0.8);
  EXPECT_DOUBLE_EQ(s->long_range.kspace_spacing, 1.5);
  EXPECT_DOUBLE_EQ(s->long_range.total_charge, -1.0);
  const auto defaults = parse("{type: pair_test_long_range, type_map: [O], long_range: {}}");
  EXPECT_TRUE(defaults->long_range.enabled);
  EXPECT_DOUBLE_EQ(defaults->long_range.sigma, 1.0);
  EXPECT_DOUBLE_EQ(defaults->long_range.kspace_spacing, 2.0);
  EXPECT_FALSE(parse("{type: pair_test_long_range, type_map: [O]}")->long_range.enabled);
  // Round trip through the record a frozen model carries.
  models::SettingsRecord record;
  models::record_long_range(record, s->long_range);
  const models::LongRangeSettings back = models::long_range_from(record);
  EXPECT_TRUE(back.enabled);
  EXPECT_DOUBLE_EQ(back.sigma, 0.8);
  EXPECT_DOUBLE_EQ(back.total_charge, -1.0);
  auto error = [&](const std::string& model) { return mlip::test::error_of([&] { parse(model); }); };
  EXPECT_EQ(error("{type: pair_test_long_range, type_map: [O], long_range: {sigma: -1}}"),
            "in.yaml: model.long_range.sigma: expected a positive number, got -1");
  EXPECT_EQ(error("{type: pair_test_long_range, type_map: [O], long_range: {kspace_spacing: 0}}"),
            "in.yaml: model.long_range.kspace_spacing: expected a positive number, got 0");
  EXPECT_NE(error("{type: pair_test_long_range, type_map: [O], long_range: {sigm: 1}}").find("model.long_range.sigm"),
            std::string::npos);
  EXPECT_NE(error("{type: pair_test_long_range, type_map: [O], long_range: ewald}").find("model.long_range: expected a mapping"),
            std::string::npos);
  EXPECT_EQ(error("{type: pair_test, type_map: [O], long_range: {}}"),
            "in.yaml: model.long_range: the model type \"pair_test\" has no long-range term");
}

TEST(Device, CpuAndAutoAndClearErrors) {
  EXPECT_EQ(mlip::train::resolve_device("cpu", "--device").str(), "cpu");
  EXPECT_EQ(mlip::train::describe_device(mlip::train::resolve_device("cpu", "--device")), "cpu");
  EXPECT_EQ(mlip::test::error_of([] { mlip::train::resolve_device("gpu", "--device"); }),
            "--device: expected auto, cpu, cuda or cuda:K, got \"gpu\"");
  EXPECT_EQ(mlip::test::error_of([] { mlip::train::resolve_device("cpu:1", "training.device"); }),
            "training.device: expected auto, cpu, cuda or cuda:K, got \"cpu:1\"");
  if (!mlip::train::build_has_cuda()) {
    EXPECT_EQ(mlip::train::resolve_device("auto", "training.device").str(), "cpu");
    EXPECT_EQ(mlip::test::error_of([] { mlip::train::resolve_device("cuda", "training.device"); }),
              "training.device: expected cpu (this build has no CUDA), got \"cuda\"");
    EXPECT_EQ(mlip::test::error_of([] { mlip::train::resolve_device("cuda:3", "--device"); }),
              "--device: expected cpu (this build has no CUDA), got \"cuda:3\"");
  } else {
    const int count = int(torch::cuda::device_count());
    const std::string error = mlip::test::error_of([&] {
      mlip::train::resolve_device("cuda:" + std::to_string(count), "--device");
    });
    EXPECT_NE(error.find("--device cuda:" + std::to_string(count) + ": this machine has "), std::string::npos) << error;
    if (count > 0) {
      EXPECT_EQ(mlip::train::resolve_device("auto", "training.device", 1).index(), 1 % count);
    }
  }
}

}  // namespace
