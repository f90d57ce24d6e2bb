#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error.h"
#include "test_util.h"
#include "models/se_e2_a/se_e2_a_model.h"
#include "train/config.h"

namespace {

using mlip::test::contains;
using mlip::test::error_of;
using mlip::test::TempDir;
using mlip::test::write_text;
using mlip::train::BatchSize;
using mlip::train::load_train_config;
using mlip::train::parse_train_config;
using mlip::train::TrainConfig;

/// The se_e2_a settings of a parsed input.
const mlip::models::SeASettings& se(const TrainConfig& c) {
  return mlip::train::model_settings<mlip::models::SeASettings>(c);
}

/// DeePMD-kit's examples/water/se_e2_a/input.json, pretty-printed.
const char* const kWaterJson = R"({
  "_comment": "that's all",
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {
      "type": "se_e2_a",
      "sel": [46, 92],
      "rcut_smth": 0.50,
      "rcut": 6.00,
      "neuron": [25, 50, 100],
      "resnet_dt": false,
      "axis_neuron": 16,
      "type_one_side": true,
      "seed": 1,
      "_comment": " that's all"
    },
    "fitting_net": {
      "neuron": [240, 240, 240],
      "resnet_dt": true,
      "seed": 1,
      "_comment": " that's all"
    },
    "_comment": " that's all"
  },
  "learning_rate": {
    "type": "exp",
    "decay_steps": 5000,
    "start_lr": 0.001,
    "stop_lr": 3.51e-8,
    "_comment": "that's all"
  },
  "loss": {
    "type": "ener",
    "start_pref_e": 0.02,
    "limit_pref_e": 1,
    "start_pref_f": 1000,
    "limit_pref_f": 1,
    "start_pref_v": 0,
    "limit_pref_v": 0,
    "_comment": " that's all"
  },
  "training": {
    "training_data": {
      "systems": ["../data/data_0/", "../data/data_1/", "../data/data_2/"],
      "batch_size": "auto",
      "_comment": "that's all"
    },
    "validation_data": {
      "systems": ["../data/data_3"],
      "batch_size": 1,
      "numb_btch": 3,
      "_comment": "that's all"
    },
    "numb_steps": 1000000,
    "seed": 10,
    "disp_file": "lcurve.out",
    "disp_freq": 100,
    "save_freq": 1000,
    "_comment": "that's all"
  }
}
)";

/// The same input as YAML (block style, comments as '#').
const char* const kWaterYaml = R"(# DeePMD-kit's water example
model:
  type_map: [O, H]
  descriptor:
    type: se_e2_a
    sel: [46, 92]
    rcut_smth: 0.50
    rcut: 6.00
    neuron: [25, 50, 100]
    resnet_dt: false
    axis_neuron: 16
    type_one_side: true
    seed: 1
  fitting_net:
    neuron: [240, 240, 240]
    resnet_dt: true
    seed: 1
learning_rate:
  type: exp
  decay_steps: 5000
  start_lr: 0.001
  stop_lr: 3.51e-8
loss:
  type: ener
  start_pref_e: 0.02
  limit_pref_e: 1
  start_pref_f: 1000
  limit_pref_f: 1
  start_pref_v: 0
  limit_pref_v: 0
training:
  training_data:
    systems:
      - ../data/data_0/
      - ../data/data_1/
      - ../data/data_2/
    batch_size: auto
  validation_data:
    systems: [../data/data_3]
    batch_size: 1
    numb_btch: 3
  numb_steps: 1000000
  seed: 10
  disp_file: lcurve.out
  disp_freq: 100
  save_freq: 1000
)";

/// The smallest valid input: only the required keys.
const char* const kMinimal = R"(model:
  type_map: [O, H]
  descriptor:
    sel: [46, 92]
    rcut: 6.0
  fitting_net: {}
training:
  training_data:
    systems: [a, b]
  numb_steps: 100
)";

TrainConfig parse(const std::string& text) {
  return parse_train_config(text, "input.yaml", "/work/in");
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

/// `text` with its only occurrence of `from` replaced by `to` (fails the test when absent).
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the input";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

void expect_water(const TrainConfig& c, const std::string& root) {
  EXPECT_EQ(c.model->type_map, (std::vector<std::string>{"O", "H"}));
  EXPECT_EQ(c.model->type, "se_e2_a");
  EXPECT_FALSE(se(c).sel.automatic);
  EXPECT_EQ(se(c).sel.values, (std::vector<int64_t>{46, 92}));
  EXPECT_DOUBLE_EQ(se(c).config.rcut, 6.0);
  EXPECT_DOUBLE_EQ(se(c).config.rcut_smth, 0.5);
  EXPECT_EQ(se(c).config.neuron, (std::vector<int64_t>{25, 50, 100}));
  EXPECT_EQ(se(c).config.axis_neuron, 16);
  EXPECT_TRUE(se(c).config.type_one_side);
  EXPECT_FALSE(se(c).config.resnet_dt);
  EXPECT_EQ(c.model->precision, "float64");
  EXPECT_EQ(se(c).descriptor_seed, std::optional<uint64_t>(1));
  EXPECT_EQ(se(c).config.fitting_neuron, (std::vector<int64_t>{240, 240, 240}));
  EXPECT_TRUE(se(c).config.fitting_resnet_dt);
  EXPECT_EQ(se(c).fitting_precision, "float64");
  EXPECT_EQ(se(c).fitting_seed, std::optional<uint64_t>(1));

  EXPECT_DOUBLE_EQ(c.learning_rate.start_lr, 0.001);
  EXPECT_DOUBLE_EQ(c.learning_rate.stop_lr, 3.51e-8);
  EXPECT_EQ(c.learning_rate.decay_steps, 5000);
  EXPECT_DOUBLE_EQ(c.learning_rate.decay_rate, 0.0);
  EXPECT_EQ(c.learning_rate.warmup_steps, 0);
  EXPECT_EQ(c.learning_rate.numb_steps, 1000000);
  EXPECT_EQ(c.scale_by_worker, "linear");

  EXPECT_DOUBLE_EQ(c.start_pref_e, 0.02);
  EXPECT_DOUBLE_EQ(c.limit_pref_e, 1.0);
  EXPECT_DOUBLE_EQ(c.start_pref_f, 1000.0);
  EXPECT_DOUBLE_EQ(c.limit_pref_f, 1.0);
  EXPECT_DOUBLE_EQ(c.start_pref_v, 0.0);
  EXPECT_DOUBLE_EQ(c.limit_pref_v, 0.0);

  EXPECT_EQ(c.training_data.systems,
            (std::vector<std::string>{root + "/data/data_0", root + "/data/data_1",
                                      root + "/data/data_2"}));
  EXPECT_EQ(c.training_data.batch_size.kind, BatchSize::Kind::kAuto);
  EXPECT_EQ(c.training_data.batch_size.value, 32);
  EXPECT_EQ(c.training_data.auto_prob, "prob_sys_size");
  EXPECT_TRUE(c.training_data.sys_probs.empty());
  ASSERT_TRUE(c.validation_data.has_value());
  EXPECT_EQ(c.validation_data->systems, (std::vector<std::string>{root + "/data/data_3"}));
  EXPECT_EQ(c.validation_data->batch_size.kind, BatchSize::Kind::kFixed);
  EXPECT_EQ(c.validation_data->batch_size.value, 1);
  EXPECT_EQ(c.validation_data->numb_btch, 3);
  EXPECT_FALSE(c.validation_data->single_rank);

  EXPECT_EQ(c.numb_steps, 1000000);
  EXPECT_EQ(c.seed, std::optional<uint64_t>(10));
  EXPECT_EQ(c.disp_file, "lcurve.out");
  EXPECT_EQ(c.disp_freq, 100);
  EXPECT_EQ(c.save_freq, 1000);
  EXPECT_EQ(c.save_ckpt, "model.ckpt");
  EXPECT_EQ(c.max_ckpt_keep, 5);
}

// ---------------------------------------------------------------------------------------------
// Valid inputs

TEST(TrainConfig, ReadsDeepmdWaterInputJsonUnchanged) {
  TempDir tmp;
  const std::string path = tmp / "se_e2_a/input.json";
  write_text(path, kWaterJson);
  const TrainConfig c = load_train_config(path);
  expect_water(c, tmp.path());
  EXPECT_EQ(c.input_path, path);
  EXPECT_EQ(c.input_dir, tmp / "se_e2_a");
  EXPECT_EQ(c.input_text, kWaterJson);
}

TEST(TrainConfig, ReadsTheSameInputAsYaml) {
  TempDir tmp;
  write_text(tmp / "se_e2_a/input.yaml", kWaterYaml);
  expect_water(load_train_config(tmp / "se_e2_a/input.yaml"), tmp.path());
}

TEST(TrainConfig, JsonOnOneLineWithTabsAndCommentsAnywhere) {
  const TrainConfig c = parse(
      "{\"model\": {\"type_map\": [\"O\"], \"_note\": {\"anything\": [1, {}]},\n"
      "\t\"descriptor\": {\"sel\": [4], \"rcut\": 5, \"_c\": 1}, \"fitting_net\": {}},\n"
      "\t\"training\": {\"training_data\": {\"systems\": \"x\"}, \"numb_steps\": 10}}");
  EXPECT_EQ(c.model->type_map, std::vector<std::string>{"O"});
  EXPECT_DOUBLE_EQ(se(c).config.rcut, 5.0);
  EXPECT_EQ(c.training_data.systems, std::vector<std::string>{"/work/in/x"});
}

TEST(TrainConfig, DefaultsWhenOptionalKeysAreAbsent) {
  const TrainConfig c = parse(kMinimal);
  const TrainConfig d;  // the header's defaults are DeePMD's
  // One set of se_e2_a defaults: the model's own hyperparameters start from the same.
  const mlip::models::SeAConfig model_defaults;
  EXPECT_EQ(se(c).config.neuron, model_defaults.neuron);
  EXPECT_EQ(se(c).config.axis_neuron, model_defaults.axis_neuron);
  EXPECT_EQ(se(c).config.type_one_side, model_defaults.type_one_side);
  EXPECT_EQ(se(c).config.fitting_neuron, model_defaults.fitting_neuron);
  EXPECT_EQ(se(c).config.fitting_resnet_dt, model_defaults.fitting_resnet_dt);
  EXPECT_EQ(c.model->statistics_batches, 10);
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.model->type, "se_e2_a");
  EXPECT_DOUBLE_EQ(se(c).config.rcut_smth, 0.5);
  EXPECT_EQ(se(c).config.neuron, (std::vector<int64_t>{10, 20, 40}));
  EXPECT_EQ(se(c).config.axis_neuron, 4);
  EXPECT_FALSE(se(c).config.type_one_side);
  EXPECT_FALSE(se(c).config.resnet_dt);
  EXPECT_EQ(c.model->precision, "float64");
  EXPECT_FALSE(se(c).descriptor_seed.has_value());
  EXPECT_EQ(se(c).config.fitting_neuron, (std::vector<int64_t>{120, 120, 120}));
  EXPECT_TRUE(se(c).config.fitting_resnet_dt);
  EXPECT_FALSE(se(c).fitting_seed.has_value());
  EXPECT_DOUBLE_EQ(c.learning_rate.start_lr, d.learning_rate.start_lr);
  EXPECT_DOUBLE_EQ(c.learning_rate.stop_lr, d.learning_rate.stop_lr);
  EXPECT_EQ(c.learning_rate.decay_steps, 5000);
  EXPECT_EQ(c.learning_rate.numb_steps, 100);
  EXPECT_EQ(c.scale_by_worker, "linear");
  EXPECT_DOUBLE_EQ(c.start_pref_e, 0.02);
  EXPECT_DOUBLE_EQ(c.start_pref_f, 1000.0);
  EXPECT_DOUBLE_EQ(c.limit_pref_v, 0.0);
  EXPECT_EQ(c.training_data.batch_size.kind, BatchSize::Kind::kAuto);
  EXPECT_EQ(c.training_data.batch_size.value, 32);
  EXPECT_EQ(c.training_data.auto_prob, "prob_sys_size");
  EXPECT_FALSE(c.validation_data.has_value());
  EXPECT_FALSE(c.seed.has_value());
  EXPECT_EQ(c.disp_file, "lcurve.out");
  EXPECT_EQ(c.disp_freq, 1000);
  EXPECT_EQ(c.save_freq, 1000);
  EXPECT_EQ(c.save_ckpt, "model.ckpt");
  EXPECT_EQ(c.max_ckpt_keep, 5);
  EXPECT_DOUBLE_EQ(c.ema_decay, 0.99);
  EXPECT_DOUBLE_EQ(c.cache_mb, 1024);
  EXPECT_EQ(c.data_workers, -1);  // auto
  EXPECT_EQ(c.input_path, "");
  EXPECT_EQ(c.input_dir, "/work/in");
  EXPECT_EQ(c.input_text, kMinimal);
}

TEST(TrainConfig, SystemPathsAreResolvedAgainstTheInputFolder) {
  TrainConfig c = parse(edit(kMinimal, "systems: [a, b]", "systems: [./a/, ../b, /abs/c/, d/./e]"));
  EXPECT_EQ(c.training_data.systems,
            (std::vector<std::string>{"/work/in/a", "/work/b", "/abs/c", "/work/in/d/e"}));
  c = parse(edit(kMinimal, "systems: [a, b]", "systems: single/"));
  EXPECT_EQ(c.training_data.systems, std::vector<std::string>{"/work/in/single"});
}

TEST(TrainConfig, AcceptsDeepmdOptionsWithTheirSupportedValues) {
  std::string text = kMinimal;
  text =
      edit(text, "    rcut: 6.0\n",
           "    rcut: 6.0\n    type: se_a\n    precision: default\n    activation_function: tanh\n"
           "    trainable: true\n    exclude_types: []\n    set_davg_zero: false\n"
           "    env_protection: 0.0\n    seed: null\n");
  text = edit(text, "  fitting_net: {}",
              "  fitting_net: {type: ener, precision: float64, activation_function: tanh,\n"
              "                trainable: true, rcond: 0.001, seed: 7}\n"
              "  data_stat_nbatch: 20\n  data_stat_protect: 0.01");
  text = edit(text, "  numb_steps: 100\n",
              "  numb_steps: 100\n  disp_training: true\n  time_training: false\n"
              "  profiling: false\n  tensorboard: false\n  save_ckpt: ckpt/model\n"
              "  max_ckpt_keep: 2\n  validation_data: null\n");
  const TrainConfig c = parse(text);
  EXPECT_EQ(c.model->type, "se_e2_a");  // the alias is stored under its current name
  EXPECT_EQ(c.model->precision, "float64");
  EXPECT_FALSE(se(c).descriptor_seed.has_value());
  EXPECT_EQ(se(c).fitting_precision, "float64");
  EXPECT_EQ(se(c).fitting_seed, std::optional<uint64_t>(7));
  EXPECT_EQ(c.model->statistics_batches, 20);
  EXPECT_EQ(c.save_ckpt, "ckpt/model");
  EXPECT_EQ(c.max_ckpt_keep, 2);
  EXPECT_FALSE(c.validation_data.has_value());
}

TEST(TrainConfig, OldKeyNamesStopBatchAndAutoProbStyle) {
  std::string text = edit(kMinimal, "numb_steps: 100", "stop_batch: 300");
  text = edit(text, "systems: [a, b]", "systems: [a, b]\n    auto_prob_style: prob_uniform");
  const TrainConfig c = parse(text);
  EXPECT_EQ(c.numb_steps, 300);
  EXPECT_EQ(c.learning_rate.numb_steps, 300);
  EXPECT_EQ(c.training_data.auto_prob, "prob_uniform");

  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 100\n  stop_batch: 100")),
            "input.yaml: training: both 'numb_steps' and its old name 'stop_batch' are given; "
            "keep one");
}

// ---------------------------------------------------------------------------------------------
// batch_size, sel, auto_prob, sys_probs, learning rate

TEST(BatchSize, FormsAndFramesPerSystem) {
  auto batch = [](const std::string& value) {
    return parse(edit(kMinimal, "systems: [a, b]", "systems: [a, b]\n    batch_size: " + value))
        .training_data.batch_size;
  };
  BatchSize b = batch("4");
  EXPECT_EQ(b.kind, BatchSize::Kind::kFixed);
  EXPECT_EQ(b.for_system(0, 192), 4);
  EXPECT_EQ(b.for_system(1, 3), 4);

  b = batch("[2, 5]");
  EXPECT_EQ(b.kind, BatchSize::Kind::kList);
  EXPECT_EQ(b.list, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(b.for_system(0, 10), 2);
  EXPECT_EQ(b.for_system(1, 10), 5);

  b = batch("auto");
  EXPECT_EQ(b.kind, BatchSize::Kind::kAuto);
  EXPECT_EQ(b.value, 32);
  EXPECT_EQ(b.for_system(0, 192), 1);  // ceil(32/192) = 1
  EXPECT_EQ(b.for_system(0, 32), 1);
  EXPECT_EQ(b.for_system(0, 31), 2);
  EXPECT_EQ(b.for_system(0, 3), 11);  // ceil(32/3)
  EXPECT_EQ(b.for_system(0, 1), 32);

  b = batch("\"auto:100\"");
  EXPECT_EQ(b.kind, BatchSize::Kind::kAuto);
  EXPECT_EQ(b.value, 100);
  EXPECT_EQ(b.for_system(0, 3), 34);
  EXPECT_EQ(b.for_system(0, 1000), 1);
}

TEST(BatchSize, ListWithoutAnEntryForTheSystem) {
  BatchSize b;
  b.kind = BatchSize::Kind::kList;
  b.list = {1, 2};
  EXPECT_TRUE(contains(error_of([&] { b.for_system(2, 3); }), "2 entries for 3 systems"));
  EXPECT_EQ(error_of([&] { b.for_system(1, 3); }), "(no error)");
}

TEST(BatchSize, BadValues) {
  auto err = [](const std::string& value) {
    return parse_error(
        edit(kMinimal, "systems: [a, b]", "systems: [a, b]\n    batch_size: " + value));
  };
  const std::string what =
      "input.yaml: training.training_data.batch_size: expected a positive integer, a list of "
      "positive integers, or \"auto[:N]\", got ";
  EXPECT_EQ(err("-3"), what + "-3");
  EXPECT_EQ(err("0"), what + "0");
  EXPECT_EQ(err("2.5"), what + "2.5");
  EXPECT_EQ(err("\"four\""), what + "\"four\"");
  EXPECT_EQ(err("auto:x"), what + "auto:x");
  EXPECT_EQ(err("auto:0"), what + "auto:0");
  EXPECT_EQ(err("mixed:4"), what + "mixed:4");
  EXPECT_EQ(err("{n: 1}"), what + "a mapping {n: 1}");
  EXPECT_EQ(
      err("[1, -2]"),
      "input.yaml: training.training_data.batch_size[1]: expected a positive integer, got -2");
  EXPECT_EQ(err("[1, 2, 3]"),
            "input.yaml: training.training_data.batch_size: 3 entries for 2 systems");
}

TEST(SelSpec, ListAutoAndAutoWithRatio) {
  TrainConfig c = parse(edit(kMinimal, "sel: [46, 92]", "sel: [0, 7]"));
  EXPECT_FALSE(se(c).sel.automatic);
  EXPECT_EQ(se(c).sel.values, (std::vector<int64_t>{0, 7}));
  c = parse(edit(kMinimal, "sel: [46, 92]", "sel: auto"));
  EXPECT_TRUE(se(c).sel.automatic);
  EXPECT_DOUBLE_EQ(se(c).sel.ratio, 1.1);
  c = parse(edit(kMinimal, "sel: [46, 92]", "sel: \"auto:1.25\""));
  EXPECT_TRUE(se(c).sel.automatic);
  EXPECT_DOUBLE_EQ(se(c).sel.ratio, 1.25);

  const std::string what =
      "input.yaml: model.descriptor.sel: expected a list of non-negative "
      "integers, or \"auto[:ratio]\", got ";
  EXPECT_EQ(parse_error(edit(kMinimal, "sel: [46, 92]", "sel: auto:x")), what + "auto:x");
  EXPECT_EQ(parse_error(edit(kMinimal, "sel: [46, 92]", "sel: 46")), what + "46");
  EXPECT_EQ(parse_error(edit(kMinimal, "sel: [46, 92]", "sel: [46, -1]")),
            "input.yaml: model.descriptor.sel[1]: expected a non-negative integer, got -1");
  EXPECT_EQ(parse_error(edit(kMinimal, "sel: [46, 92]", "sel: [46]")),
            "input.yaml: model.descriptor.sel: 1 entries for 2 types in model.type_map");
}

TEST(AutoProb, AcceptedForms) {
  auto prob = [](const std::string& value) {
    return parse(edit(kMinimal, "systems: [a, b]", "systems: [a, b, c]\n    auto_prob: " + value))
        .training_data.auto_prob;
  };
  EXPECT_EQ(prob("prob_uniform"), "prob_uniform");
  EXPECT_EQ(prob("prob_sys_size"), "prob_sys_size");
  EXPECT_EQ(prob("\"prob_sys_size;0:2:0.8;2:3:0.2\""), "prob_sys_size;0:2:0.8;2:3:0.2");
  EXPECT_EQ(prob("prob_sys_size;0:1:1;1:3:0"), "prob_sys_size;0:1:1;1:3:0");
}

TEST(AutoProb, BadForms) {
  auto err = [](const std::string& value) {
    return parse_error(
        edit(kMinimal, "systems: [a, b]", "systems: [a, b, c]\n    auto_prob: " + value));
  };
  EXPECT_EQ(err("prob_size"),
            "input.yaml: training.training_data.auto_prob: expected \"prob_sys_size\", "
            "\"prob_uniform\", or \"prob_sys_size;a:b:w;...\", got \"prob_size\"");
  const std::string block = "expected start:end:weight with integers 0 <= start < end <= 3";
  EXPECT_TRUE(contains(err("\"prob_sys_size;2:1:0.5\""), "block \"2:1:0.5\""));
  EXPECT_TRUE(contains(err("\"prob_sys_size;2:1:0.5\""), block));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:4:1\""), "block \"0:4:1\""));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:2:-1\""), "and a weight >= 0"));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:2\""), "block \"0:2\""));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:2:x\""), "block \"0:2:x\""));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:2:0.5;\""), "block \"\""));
  EXPECT_TRUE(contains(err("\"prob_sys_size;0:3:0\""), "with a positive weight"));
  EXPECT_EQ(err("[1]"),
            "input.yaml: training.training_data.auto_prob: expected a non-empty "
            "string, got a list [1]");
}

TEST(SysProbs, ListOfProbabilities) {
  auto text = [](const std::string& value) {
    return edit(kMinimal, "systems: [a, b]", "systems: [a, b]\n    sys_probs: " + value);
  };
  EXPECT_EQ(parse(text("[0.25, 0.75]")).training_data.sys_probs, (std::vector<double>{0.25, 0.75}));
  EXPECT_EQ(parse(text("[1, 0]")).training_data.sys_probs, (std::vector<double>{1, 0}));
  EXPECT_TRUE(parse(text("null")).training_data.sys_probs.empty());
  EXPECT_EQ(
      parse_error(text("[0.5, -0.5]")),
      "input.yaml: training.training_data.sys_probs[1]: expected a non-negative number, got -0.5");
  EXPECT_EQ(parse_error(text("[0, 0]")),
            "input.yaml: training.training_data.sys_probs: expected at least one positive "
            "probability, got a list [0, 0]");
  EXPECT_EQ(parse_error(text("[1]")),
            "input.yaml: training.training_data.sys_probs: 1 entries for 2 systems");
}

TEST(LearningRate, WarmupDecayRateAndScaleByWorker) {
  const std::string lr =
      "learning_rate:\n  type: exp\n  start_lr: 0.002\n  stop_lr: 1.0e-6\n  decay_steps: 10\n"
      "  decay_rate: 0.5\n  warmup_steps: 20\n  warmup_start_factor: 0.1\n  scale_by_worker: "
      "sqrt\n";
  const TrainConfig c = parse(lr + kMinimal);
  EXPECT_DOUBLE_EQ(c.learning_rate.start_lr, 0.002);
  EXPECT_DOUBLE_EQ(c.learning_rate.stop_lr, 1e-6);
  EXPECT_EQ(c.learning_rate.decay_steps, 10);
  EXPECT_DOUBLE_EQ(c.learning_rate.decay_rate, 0.5);
  EXPECT_EQ(c.learning_rate.warmup_steps, 20);
  EXPECT_DOUBLE_EQ(c.learning_rate.warmup_start_factor, 0.1);
  EXPECT_EQ(c.learning_rate.numb_steps, 100);
  EXPECT_EQ(c.scale_by_worker, "sqrt");
  EXPECT_DOUBLE_EQ(c.learning_rate.at(0), 0.1 * 0.002);

  EXPECT_EQ(parse_error(edit(lr, "warmup_start_factor: 0.1", "warmup_start_factor: 2") + kMinimal),
            "input.yaml: learning_rate.warmup_start_factor: expected a number in [0, 1], got 2");
  EXPECT_EQ(parse_error(edit(lr, "scale_by_worker: sqrt", "scale_by_worker: cubic") + kMinimal),
            "input.yaml: learning_rate.scale_by_worker: expected one of \"linear\", \"sqrt\" or "
            "\"none\", got cubic");
  EXPECT_EQ(parse_error("learning_rate: {warmup_steps: 100}\n" + std::string(kMinimal)),
            "input.yaml: learning_rate.warmup_steps: expected fewer than training.numb_steps "
            "(100), got 100");
  EXPECT_EQ(
      parse_error("learning_rate: {type: cosine}\n" + std::string(kMinimal)),
      "input.yaml: learning_rate.type: expected \"exp\" (the only one supported), got cosine");
}

// ---------------------------------------------------------------------------------------------
// Strictness: unknown keys, wrong types, unsupported values, missing keys

TEST(TrainConfigErrors, MisspelledKeysSuggestTheNearestKnownKey) {
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps:", "numb_step:")),
            "input.yaml: training.numb_step: unknown key; did you mean 'numb_steps'?");
  EXPECT_EQ(parse_error(edit(kMinimal, "    rcut: 6.0", "    rcut: 6.0\n    rcut_smoth: 0.5")),
            "input.yaml: model.descriptor.rcut_smoth: unknown key; did you mean 'rcut_smth'?");
  EXPECT_EQ(
      parse_error(edit(kMinimal, "systems: [a, b]", "systems: [a, b]\n    batchsize: 1")),
      "input.yaml: training.training_data.batchsize: unknown key; did you mean 'batch_size'?");
  EXPECT_EQ(parse_error(edit(kMinimal, "  type_map:", "  typemap:")),
            "input.yaml: model.typemap: unknown key; did you mean 'type_map'?");
  EXPECT_EQ(parse_error("learnig_rate: {}\n" + std::string(kMinimal)),
            "input.yaml: learnig_rate: unknown key; did you mean 'learning_rate'?");
  EXPECT_EQ(parse_error(edit(kMinimal, "fitting_net: {}", "fitting_net: {nueron: [10]}")),
            "input.yaml: model.fitting_net.nueron: unknown key; did you mean 'neuron'?");
  EXPECT_EQ(parse_error("loss: {start_pref_x: 1}\n" + std::string(kMinimal)),
            "input.yaml: loss.start_pref_x: unknown key; did you mean 'start_pref_e'?");
}

// A charge loss (docs/long_range.md "Charge labels") needs a model with charges.
TEST(TrainConfigErrors, AChargeLossNeedsAModelWithCharges) {
  EXPECT_EQ(parse_error("loss: {limit_pref_q: 0.5}\n" + std::string(kMinimal)),
            "input.yaml: loss.limit_pref_q: expected 0 for a model without charges (the charge loss trains the "
            "charges of model.long_range, which this model has not), got 0.5");
  EXPECT_EQ(parse_error("loss: {start_pref_q: -1}\n" + std::string(kMinimal)),
            "input.yaml: loss.start_pref_q: expected a non-negative number, got -1");
  const TrainConfig c = parse(edit(kMinimal, "fitting_net: {}", "fitting_net: {}\n  long_range: {sigma: 1.0}") +
                              "loss: {start_pref_q: 2, limit_pref_q: 0.5}\n");
  EXPECT_EQ(c.start_pref_q, 2.0);
  EXPECT_EQ(c.limit_pref_q, 0.5);
  EXPECT_EQ(parse(kMinimal).start_pref_q, 0.0);
}

TEST(TrainConfigErrors, UnknownKeyWithoutANearOneListsTheKnownKeys) {
  EXPECT_EQ(parse_error(edit(kMinimal, "  type_map:", "  foo: 1\n  type_map:")),
            "input.yaml: model.foo: unknown key (known: type, type_map, descriptor, fitting_net, "
            "data_stat_nbatch, data_stat_protect, e0s, pair_repulsion, long_range)");
  // model.type: equivariant has its own keys.
  EXPECT_EQ(parse_error("model: {type: equivariant, type_map: [O], foo: 1}\ntraining: {training_data: {systems: [a]}, "
                        "numb_steps: 1}\n"),
            "input.yaml: model.foo: unknown key (known: type, type_map, r_max, num_features, l_max, parity, pseudotensors, "
            "num_layers, num_bessels, polynomial_p, radial_width, radial_depth, avg_num_neighbors, precision, seed, correlation, "
            "readout, data_stat_nbatch, e0s, pair_repulsion, long_range)");
  EXPECT_EQ(parse_error("model: {type: equivariant, type_map: [O], correlation: 4}\ntraining: {training_data: {systems: [a]}, "
                        "numb_steps: 1}\n"),
            "input.yaml: model.correlation: expected 1, 2 or 3, got 4");
  EXPECT_EQ(parse_error("model: {type: equivariant, type_map: [O], readout: all}\ntraining: {training_data: {systems: [a]}, "
                        "numb_steps: 1}\n"),
            "input.yaml: model.readout: expected one of \"last\" or \"every_layer\", got all");
  EXPECT_EQ(parse_error("model: {type: equivariant, type_map: [O], l_max: 4}\ntraining: {training_data: {systems: [a]}, "
                        "numb_steps: 1}\n"),
            "input.yaml: model.l_max: expected an integer from 0 to 3, got 4");
  EXPECT_EQ(parse_error("model: {type: equivariant, type_map: [O], parity: false, pseudotensors: false}\n"
                        "training: {training_data: {systems: [a]}, numb_steps: 1}\n"),
            "input.yaml: model.pseudotensors: expected true when model.parity is false (without parity every irrep is "
            "natural), got false");
  EXPECT_EQ(parse_error(edit(kMinimal, "  type_map:", "  type: nequip\n  type_map:")),
            "input.yaml: model.type: expected one of \"standard\" or \"equivariant\", got nequip");
  EXPECT_EQ(parse_error("nvnmd: {}\n" + std::string(kMinimal)),
            "input.yaml: nvnmd: unknown key (known: model, learning_rate, loss, training)");
}

TEST(TrainConfigErrors, StringWhereANumberIsExpected) {
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: \"six\"")),
            "input.yaml: model.descriptor.rcut: expected a positive number, got \"six\"");
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: six")),
            "input.yaml: model.descriptor.rcut: expected a positive number, got six");
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: .nan")),
            "input.yaml: model.descriptor.rcut: expected a positive number, got .nan");
  EXPECT_EQ(parse_error("loss: {start_pref_f: -1}\n" + std::string(kMinimal)),
            "input.yaml: loss.start_pref_f: expected a non-negative number, got -1");
}

TEST(TrainConfig, EmaDecayIsANumberInZeroToOne) {
  EXPECT_DOUBLE_EQ(parse(edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n  ema_decay: 0.999\n")).ema_decay, 0.999);
  EXPECT_DOUBLE_EQ(parse(edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n  ema_decay: 0\n")).ema_decay, 0.0);
  // Quoted reads as plain (docs/input.md).
  EXPECT_DOUBLE_EQ(parse(edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n  ema_decay: \"0.9\"\n")).ema_decay, 0.9);
  for (const char* bad : {"1", "1.5", "-0.1", "yes", "\"no\""})
    EXPECT_EQ(parse_error(edit(kMinimal, "  numb_steps: 100\n", std::string("  numb_steps: 100\n  ema_decay: ") + bad + "\n")),
              std::string("input.yaml: training.ema_decay: expected ") +
                  (std::string(bad) == "yes" || bad[0] == '"' ? "a number, got " + std::string(bad)
                                                              : "a number in [0, 1) (0 turns the moving average off), got " +
                                                                    std::string(bad)))
        << bad;
}

TEST(TrainConfig, CacheBudgetAndDataWorkers) {
  auto with = [](const std::string& lines) { return edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n" + lines); };
  EXPECT_DOUBLE_EQ(parse(with("  cache_mb: 0.5\n")).cache_mb, 0.5);
  EXPECT_DOUBLE_EQ(parse(with("  cache_mb: 0\n")).cache_mb, 0);
  EXPECT_DOUBLE_EQ(parse(with("  cache_mb: all\n")).cache_mb, -1);
  EXPECT_EQ(parse(with("  data_workers: 3\n")).data_workers, 3);
  EXPECT_EQ(parse(with("  data_workers: auto\n")).data_workers, -1);
  EXPECT_EQ(parse_error(with("  cache_mb: -3\n")),
            "input.yaml: training.cache_mb: expected a non-negative number of megabytes or \"all\", got -3");
  EXPECT_EQ(parse_error(with("  cache_mb: lots\n")),
            "input.yaml: training.cache_mb: expected a non-negative number of megabytes or \"all\", got lots");
  EXPECT_EQ(parse_error(with("  data_workers: -1\n")),
            "input.yaml: training.data_workers: expected an integer in [0, 64] or \"auto\", got -1");
  EXPECT_EQ(parse_error(with("  data_workers: 100\n")),
            "input.yaml: training.data_workers: expected an integer in [0, 64] or \"auto\", got 100");
}

TEST(TrainConfig, CudaGraphs) {
  auto with = [](const std::string& lines) {
    return edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n" + lines);
  };
  EXPECT_EQ(parse(kMinimal).cuda_graphs, std::optional<bool>(false));  // until verified on a GPU
  EXPECT_FALSE(parse(with("  cuda_graphs: auto\n")).cuda_graphs.has_value());
  EXPECT_EQ(parse(with("  cuda_graphs: true\n")).cuda_graphs, std::optional<bool>(true));
  EXPECT_EQ(parse(with("  cuda_graphs: false\n")).cuda_graphs, std::optional<bool>(false));
  EXPECT_EQ(parse_error(with("  cuda_graphs: sometimes\n")),
            "input.yaml: training.cuda_graphs: expected true, false or \"auto\", got sometimes");
  EXPECT_EQ(parse_error(with("  cuda_graphs: [true]\n")),
            "input.yaml: training.cuda_graphs: expected true, false or \"auto\", got a list [true]");
}

TEST(TrainConfigErrors, IntegersMustBeWrittenAsIntegers) {
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 1000.5")),
            "input.yaml: training.numb_steps: expected a positive integer, got 1000.5");
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 1e3")),
            "input.yaml: training.numb_steps: expected a positive integer, got 1e3");
  EXPECT_EQ(
      parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 99999999999999999999")),
      "input.yaml: training.numb_steps: expected a positive integer, got 99999999999999999999");
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 100\n  disp_freq: 0")),
            "input.yaml: training.disp_freq: expected a positive integer, got 0");
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 100\n  seed: -1")),
            "input.yaml: training.seed: expected a non-negative integer or null, got -1");
}

TEST(TrainConfigErrors, MappingWhereAScalarIsExpectedAndViceVersa) {
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: {value: 100}")),
            "input.yaml: training.numb_steps: expected a positive integer, got a mapping "
            "{value: 100}");
  EXPECT_EQ(parse_error(edit(kMinimal, "fitting_net: {}", "fitting_net: ener")),
            "input.yaml: model.fitting_net: expected a mapping, got ener");
  EXPECT_EQ(parse_error(edit(kMinimal, "fitting_net: {}", "fitting_net: {}\nloss: [ener]")),
            "input.yaml: loss: expected a mapping with keys type, start_pref_e, limit_pref_e, "
            "start_pref_f, limit_pref_f, start_pref_v, limit_pref_v, start_pref_q, limit_pref_q, got a list [ener]");
  EXPECT_EQ(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: {O: 0, H: 1}")),
            "input.yaml: model.type_map: expected a non-empty list of strings, got a mapping "
            "{O: 0, H: 1}");
  EXPECT_EQ(parse_error("[1, 2]"),
            "input.yaml: expected a mapping with keys model, learning_rate, loss, training at the "
            "top level, got a list [1, 2]");
}

TEST(TrainConfigErrors, WrongListElements) {
  const std::string text = edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    neuron: [25, \"x\", 100]");
  EXPECT_EQ(parse_error(text),
            "input.yaml: model.descriptor.neuron[1]: expected a positive integer, got \"x\"");
  EXPECT_EQ(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, [H]]")),
            "input.yaml: model.type_map[1]: expected a non-empty string, got a list [H]");
  EXPECT_EQ(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, O]")),
            "input.yaml: model.type_map: \"O\" appears twice");
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    neuron: []")),
            "input.yaml: model.descriptor.neuron: expected a non-empty list of positive integers, "
            "got a list []");
}

TEST(TrainConfigErrors, BooleansAreTrueOrFalse) {
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    resnet_dt: yes")),
            "input.yaml: model.descriptor.resnet_dt: expected true or false, got yes");
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    type_one_side: 1")),
            "input.yaml: model.descriptor.type_one_side: expected true or false, got 1");
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    type_one_side: \"yes\"")),
            "input.yaml: model.descriptor.type_one_side: expected true or false, got \"yes\"");
}

// Quoting never changes how a value reads: YAML's quoted and plain scalars, and JSON's strings,
// give the same input.
TEST(TrainConfig, QuotedAndPlainScalarsReadTheSame) {
  const TrainConfig plain = parse(kMinimal);
  const TrainConfig quoted = parse(edit(edit(edit(kMinimal, "rcut: 6.0", "rcut: \"6.0\"\n    type_one_side: \"true\""),
                                             "numb_steps: 100", "numb_steps: '100'"),
                                        "sel: [46, 92]", "sel: [\"46\", '92']"));
  EXPECT_EQ(se(quoted).config.rcut, se(plain).config.rcut);
  EXPECT_TRUE(se(quoted).config.type_one_side);
  EXPECT_EQ(se(quoted).sel.values, se(plain).sel.values);
  EXPECT_EQ(quoted.numb_steps, plain.numb_steps);
  // The model type quoted, in YAML and in JSON.
  const std::string equivariant =
      "model: {type: \"equivariant\", type_map: [O, H], r_max: 4.0}\n"
      "training: {training_data: {systems: [x]}, numb_steps: 5}\n";
  EXPECT_EQ(parse(equivariant).model->type, "equivariant");
  const std::string json =
      "{\"model\": {\"type\": \"equivariant\", \"type_map\": [\"O\", \"H\"], \"r_max\": 4.0},\n"
      " \"training\": {\"training_data\": {\"systems\": [\"x\"]}, \"numb_steps\": 5}}\n";
  EXPECT_EQ(parse(json).model->type, "equivariant");
}

TEST(TrainConfigErrors, StopLrAboveStartLrIsRefused) {
  EXPECT_EQ(parse_error("learning_rate: {start_lr: 0.001, stop_lr: 0.01}\n" + std::string(kMinimal)),
            "input.yaml: learning_rate.stop_lr: expected at most start_lr (0.001), got 0.01");
  // Equal is a constant rate.
  const TrainConfig c = parse("learning_rate: {start_lr: 0.001, stop_lr: 0.001}\n" + std::string(kMinimal));
  EXPECT_DOUBLE_EQ(c.learning_rate.at(c.numb_steps - 1), 0.001);
}

TEST(TrainConfigErrors, UnsupportedValues) {
  auto desc = [](const std::string& line) {
    return parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    " + line));
  };
  EXPECT_EQ(desc("activation_function: relu"),
            "input.yaml: model.descriptor.activation_function: expected \"tanh\" (the only one "
            "supported), got relu");
  EXPECT_EQ(desc("type: se_e3"),
            "input.yaml: model.descriptor.type: expected \"se_e2_a\" (the only one supported), "
            "got se_e3");
  EXPECT_EQ(desc("precision: float16"),
            "input.yaml: model.descriptor.precision: expected one of \"float64\" or \"float32\", "
            "got float16");
  EXPECT_EQ(desc("trainable: false"),
            "input.yaml: model.descriptor.trainable: expected true (other values are not "
            "supported), got false");
  EXPECT_EQ(desc("exclude_types: [[0, 1]]"),
            "input.yaml: model.descriptor.exclude_types: expected an empty list (other values are "
            "not supported), got a list [[0, 1]]");
  EXPECT_EQ(desc("set_davg_zero: true"),
            "input.yaml: model.descriptor.set_davg_zero: expected false (other values are not "
            "supported), got true");
  EXPECT_EQ(desc("env_protection: 1e-6"),
            "input.yaml: model.descriptor.env_protection: expected 0 (other values are not "
            "supported), got 1e-6");
  EXPECT_EQ(parse_error("loss: {type: tensor}\n" + std::string(kMinimal)),
            "input.yaml: loss.type: expected \"ener\" (the only one supported), got tensor");
  EXPECT_EQ(
      parse_error(edit(kMinimal, "fitting_net: {}", "fitting_net: {type: dipole}")),
      "input.yaml: model.fitting_net.type: expected \"ener\" (the only one supported), got dipole");
  EXPECT_EQ(parse_error(edit(kMinimal, "fitting_net: {}",
                             "fitting_net: {\"activation_function\": \"gelu\"}")),
            "input.yaml: model.fitting_net.activation_function: expected \"tanh\" (the only one "
            "supported), got \"gelu\"");
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 100\n  tensorboard: true")),
            "input.yaml: training.tensorboard: expected false (other values are not supported), "
            "got true");
}

TEST(TrainConfigErrors, InconsistentDescriptorSizes) {
  EXPECT_EQ(parse_error(edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    rcut_smth: 6.5")),
            "input.yaml: model.descriptor.rcut_smth: expected a number below rcut (6.0), got 6.5");
  EXPECT_EQ(
      parse_error(
          edit(kMinimal, "rcut: 6.0", "rcut: 6.0\n    neuron: [8, 16]\n    axis_neuron: 32")),
      "input.yaml: model.descriptor.axis_neuron: expected at most the last neuron (16), got 32");
}

TEST(TrainConfigErrors, MissingRequiredKeys) {
  EXPECT_EQ(parse_error(edit(kMinimal, "  numb_steps: 100\n", "")),
            "input.yaml: training.numb_steps: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "  type_map: [O, H]\n", "")),
            "input.yaml: model.type_map: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "    sel: [46, 92]\n", "")),
            "input.yaml: model.descriptor.sel: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "    rcut: 6.0\n", "")),
            "input.yaml: model.descriptor.rcut: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "  fitting_net: {}\n", "")),
            "input.yaml: model.fitting_net: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "    systems: [a, b]\n", "    batch_size: 1\n")),
            "input.yaml: training.training_data.systems: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "  numb_steps: 100\n",
                             "  numb_steps: 100\n  validation_data: {numb_btch: 2}\n")),
            "input.yaml: training.validation_data.systems: required key is missing");
  EXPECT_EQ(parse_error("model: {}\n"), "input.yaml: training: required key is missing");
  EXPECT_EQ(parse_error("training: {}\n"), "input.yaml: model: required key is missing");
  EXPECT_EQ(parse_error(edit(kMinimal, "  fitting_net: {}", "  fitting_net:")),
            "input.yaml: model.fitting_net: expected a mapping, got null");
  EXPECT_EQ(parse_error(""),
            "input.yaml: expected a mapping with keys model, learning_rate, loss, training at the "
            "top level, got null");
}

TEST(TrainConfigErrors, DuplicateKey) {
  EXPECT_EQ(parse_error(edit(kMinimal, "numb_steps: 100", "numb_steps: 100\n  numb_steps: 200")),
            "input.yaml: training.numb_steps: duplicate key");
}

TEST(TrainConfigErrors, YamlSyntaxErrorNamesTheLine) {
  const std::string text = edit(kMinimal, "    sel: [46, 92]\n", "    sel: [46, 92]\n   bad: 1\n");
  const std::string e = parse_error(text);
  EXPECT_TRUE(contains(e, "input.yaml:5:")) << e;
  EXPECT_TRUE(contains(e, ": YAML syntax error: ")) << e;

  TempDir tmp;
  write_text(tmp / "input.json",
             "{\"model\": {\"type_map\": [\"O\"],\n \"descriptor\": {\"sel\": [1]]}\n");
  const std::string j = error_of([&] { load_train_config(tmp / "input.json"); });
  EXPECT_TRUE(contains(j, tmp / "input.json:2:")) << j;
  EXPECT_TRUE(contains(j, "YAML syntax error")) << j;
}

TEST(TrainConfigErrors, MissingOrUnreadableFile) {
  TempDir tmp;
  EXPECT_EQ(error_of([&] { load_train_config(tmp / "nope.yaml"); }),
            tmp / "nope.yaml: cannot read the training input (No such file or directory)");
  EXPECT_EQ(error_of([&] { load_train_config(tmp.path()); }),
            tmp.path() + ": cannot read the training input (Is a directory)");
}

TEST(TrainConfigErrors, EveryMessageStartsWithTheFileName) {
  TempDir tmp;
  write_text(tmp / "in.yaml", edit(kMinimal, "numb_steps:", "numb_step:"));
  EXPECT_EQ(error_of([&] { load_train_config(tmp / "in.yaml"); }),
            tmp / "in.yaml: training.numb_step: unknown key; did you mean 'numb_steps'?");
  EXPECT_EQ(error_of([&] {
              parse_train_config("learning_rate: {start_lr: -1}\n" + std::string(kMinimal),
                                 "x.json", "");
            }),
            "x.json: learning_rate.start_lr: expected a positive number, got -1");
}

}  // namespace

namespace {

TEST(TrainConfigErrors, ModelAndDeviceKeys) {
  EXPECT_EQ(parse_error(edit(kMinimal, "  fitting_net: {}", "  fitting_net: {precision: float32}")),
            "input.yaml: model.fitting_net.precision: expected the descriptor's precision (\"float64\"; one model "
            "has one precision), got \"float32\"");
  EXPECT_EQ(parse_error(edit(kMinimal, "  type_map:", "  data_stat_nbatch: 0\n  type_map:")),
            "input.yaml: model.data_stat_nbatch: expected a positive integer, got 0");
  EXPECT_EQ(parse_error(edit(kMinimal, "  numb_steps: 100\n", "  numb_steps: 100\n  device: gpu\n")),
            "input.yaml: training.device: expected auto, cpu, cuda or cuda:K, got gpu");
  for (const char* ok : {"auto", "cpu", "cuda", "cuda:1"})
    EXPECT_EQ(parse(edit(kMinimal, "  numb_steps: 100\n", std::string("  numb_steps: 100\n  device: \"") + ok + "\"\n"))
                  .device,
              ok);
}

}  // namespace

// Label keys (docs/data.md "Label keys"): per data section; validation data takes the training
// data's keys unless it names its own; a key must be a name.
TEST(LabelKeys, PerDataSectionWithValidationInheriting) {
  const std::string keys = "systems: [a, b]\n    energy_key: REF_energy\n    forces_key: REF_forces\n"
                           "    stress_key: REF_stress";
  TrainConfig c = parse(edit(kMinimal, "systems: [a, b]", keys) + "  validation_data: {systems: [c]}\n");
  EXPECT_EQ(c.training_data.keys.energy, "REF_energy");
  EXPECT_EQ(c.training_data.keys.forces, "REF_forces");
  EXPECT_EQ(c.training_data.keys.stress, "REF_stress");
  EXPECT_EQ(c.training_data.keys.virial, "");
  ASSERT_TRUE(c.validation_data.has_value());
  EXPECT_EQ(c.validation_data->keys.energy, "REF_energy") << "inherited";
  c = parse(edit(kMinimal, "systems: [a, b]", keys) + "  validation_data: {systems: [c], energy_key: E}\n");
  EXPECT_EQ(c.validation_data->keys.energy, "E");
  EXPECT_EQ(c.validation_data->keys.forces, "") << "its own keys, none inherited";
  EXPECT_TRUE(parse(kMinimal).training_data.keys.defaults());
  EXPECT_EQ(parse_error(edit(kMinimal, "systems: [a, b]", "systems: [a, b]\n    energy_key: \"REF energy\"")),
            "input.yaml: training.training_data.energy_key: expected a key name (no spaces, quotes or '='), got "
            "\"REF energy\"");
}

// model.e0s (docs/training.md "Reference energies"): fit (default), isolated, {isolated: FILE},
// or an energy for every type; anything else names the key.
TEST(ReferenceEnergies, FormsAndErrors) {
  using Kind = mlip::models::ReferenceEnergies::Kind;
  EXPECT_EQ(parse(kMinimal).model->e0s.kind, Kind::kFit);
  EXPECT_EQ(parse(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: isolated")).model->e0s.kind,
            Kind::kIsolated);
  const auto given = parse(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {O: -2035.5, H: -13.6}"));
  EXPECT_EQ(given.model->e0s.kind, Kind::kGiven);
  EXPECT_EQ(given.model->e0s.given.at("O"), -2035.5);
  EXPECT_EQ(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: average")),
            "input.yaml: model.e0s: expected fit, isolated, {isolated: FILE of isolated atoms}, or a mapping "
            "{element: eV} for every type of type_map, got average");
  const auto from_file = parse(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {isolated: iso.xyz}"));
  EXPECT_EQ(from_file.model->e0s.kind, Kind::kIsolated);
  EXPECT_EQ(from_file.model->e0s.file, "iso.xyz");
  EXPECT_EQ(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {isolated: [a]}")),
            "input.yaml: model.e0s.isolated: expected the path of a file of isolated atoms, got a list [a]");
  EXPECT_TRUE(contains(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {O: -2035.5}")),
                       "model.e0s: has no energy for the type \"H\" of type_map"));
  EXPECT_TRUE(contains(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {O: -1, H: -1, C: -3}")),
                       "model.e0s.C: is not a type of type_map"));
  EXPECT_TRUE(contains(parse_error(edit(kMinimal, "type_map: [O, H]", "type_map: [O, H]\n  e0s: {O: x, H: -1}")),
                       "model.e0s.O: expected a number (eV), got x"));
}
