// `mlip train --committee N` (docs/training.md "A committee of models"), run as a user would:
// the members' folders, seeds (member 0 is the plain run, bit for bit; the members differ), the
// scheduling (it does not change a member), --member, --restart, --init-model and --finetune per member, a
// failing member, Ctrl-C forwarded to the members, and the command-line errors. Tiny data and a
// few steps: nothing here depends on the machine's speed.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;

namespace {

using mlip::test::CommandResult;
using mlip::test::contains;
using mlip::test::read_file;
using mlip::test::run_command;
using mlip::test::TempDir;
using mlip::test::write_system;
using mlip::test::write_text;
const std::string kMlip = MLIP_EXE;

/// The model of a test: se_e2_a in either precision, or the equivariant model.
struct ModelCase {
  std::string name;
  std::string model_yaml;
};

const ModelCase kSeFloat64{"se_e2_a_float64",
                           "model:\n"
                           "  type_map: [O, H]\n"
                           "  descriptor: {type: se_e2_a, sel: [8, 16], rcut: 4.0, rcut_smth: 1.0, neuron: [4, 8],\n"
                           "               axis_neuron: 4, type_one_side: true, seed: 3, precision: float64}\n"
                           "  fitting_net: {neuron: [8, 8], resnet_dt: true, seed: 3, precision: float64}\n"};
const ModelCase kSeFloat32{"se_e2_a_float32",
                           std::regex_replace(kSeFloat64.model_yaml, std::regex("float64"), "float32")};
const ModelCase kEquivariant{"equivariant",
                             "model: {type: equivariant, type_map: [O, H], r_max: 4.0, num_features: 4, l_max: 1,\n"
                             "        num_layers: 2, radial_width: 8}\n"};

/// A training input of `steps` steps on the test's tiny systems, with training.seed 5.
std::string input_yaml(const ModelCase& model, int steps) {
  return model.model_yaml +
         "learning_rate: {type: exp, start_lr: 0.005, stop_lr: 1.0e-4, decay_steps: 5}\n"
         "loss: {type: ener, start_pref_e: 0.02, limit_pref_e: 1, start_pref_f: 1000, limit_pref_f: 1}\n"
         "training:\n"
         "  training_data: {systems: [data/sys_a, data/sys_b], batch_size: [2, 1]}\n"
         "  validation_data: {systems: [data/sys_v], batch_size: 2, numb_btch: 1}\n"
         "  numb_steps: " +
         std::to_string(steps) +
         "\n"
         "  seed: 5\n"
         "  disp_freq: 5\n"
         "  save_freq: 5\n";
}

std::vector<torch::Tensor> parameters_of(const std::string& path) {
  auto module = torch::jit::load(path);
  std::vector<torch::Tensor> out;
  for (const auto& p : module.named_parameters()) out.push_back(p.value.clone());
  return out;
}

bool same_parameters(const std::string& a, const std::string& b) {
  const auto pa = parameters_of(a), pb = parameters_of(b);
  if (pa.size() != pb.size()) return false;
  for (std::size_t k = 0; k < pa.size(); ++k)
    if (!torch::equal(pa[k], pb[k])) return false;
  return true;
}

class CommitteeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_system(dir_ / "data/sys_a", 2, 4, 8, 1);
    write_system(dir_ / "data/sys_b", 3, 6, 6, 2);
    write_system(dir_ / "data/sys_v", 2, 4, 5, 3);
  }
  /// Runs `<environment> mlip <args>` in the test folder.
  CommandResult mlip(const std::string& args, const std::string& environment = "") {
    return run_command("cd " + dir_.path() + " && " + environment + " " + kMlip + " " + args);
  }
  std::string read(const std::string& name) const { return read_file(dir_ / name); }
  TempDir dir_;
};

class CommitteeModelTest : public CommitteeTest, public ::testing::WithParamInterface<ModelCase> {};

// Two members side by side, one thread each: ordinary training folders whose weights differ;
// member 0 is the plain run of the same input with the same thread count, bit for bit; each
// member freezes like any run.
TEST_P(CommitteeModelTest, MembersDifferAndMemberZeroIsThePlainRun) {
  write_text(dir_ / "input.yaml", input_yaml(GetParam(), 5));
  const CommandResult run = mlip("train input.yaml --committee 2 -o cmt", "OMP_NUM_THREADS=2");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err << read("cmt/model_0/train.log") << read("cmt/model_1/train.log");
  EXPECT_TRUE(contains(run.out, "committee of 2 models in cmt/model_0 ... cmt/model_1: 2 at a time, 1 thread each"))
      << run.out;
  for (const char* member : {"model_0", "model_1"})
    EXPECT_TRUE(std::regex_search(run.out, std::regex(std::string(member) +
                                                      ": finished step 5 in [0-9.]+ s, rmse_e_val "
                                                      "\\S+, rmse_f_val \\S+ \\(cmt/" +
                                                      member + "/train.log\\)\n")))
        << run.out;
  EXPECT_TRUE(contains(run.out, "committee: 2 of 2 models trained in ")) << run.out;
  for (const char* member : {"cmt/model_0", "cmt/model_1"}) {
    const std::string folder = member;
    EXPECT_TRUE(fs::exists(dir_ / (folder + "/model.ckpt-5.pt"))) << folder;
    EXPECT_EQ(read(folder + "/checkpoint"), "model.ckpt-5.pt\n") << folder;
    EXPECT_TRUE(contains(read(folder + "/train.log"), "model: ")) << folder;
    EXPECT_TRUE(contains(read(folder + "/train.log"), "1 thread(s)")) << read(folder + "/train.log");
  }
  EXPECT_TRUE(contains(read("cmt/model_1/train.log"), "committee member 1 of 2: seeds + 1, output cmt/model_1"));
  EXPECT_NE(read("cmt/model_0/lcurve.out"), read("cmt/model_1/lcurve.out"));
  EXPECT_FALSE(same_parameters(dir_ / "cmt/model_0/model.ckpt-5.pt", dir_ / "cmt/model_1/model.ckpt-5.pt"));

  const CommandResult plain = mlip("train input.yaml -o plain", "OMP_NUM_THREADS=1");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(read("plain/lcurve.out"), read("cmt/model_0/lcurve.out"));
  EXPECT_TRUE(same_parameters(dir_ / "plain/model.ckpt-5.pt", dir_ / "cmt/model_0/model.ckpt-5.pt"));

  for (const char* member : {"model_0", "model_1"}) {
    const std::string name = member;
    const CommandResult freeze = mlip("freeze -c cmt/" + name + " -o " + name + ".pt");
    ASSERT_EQ(freeze.exit_code, 0) << freeze.err;
    const CommandResult test = mlip("test -m " + name + ".pt -s data/sys_v");
    ASSERT_EQ(test.exit_code, 0) << test.err;
    EXPECT_TRUE(contains(test.out, "Force  RMSE")) << test.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CommitteeModelTest, ::testing::Values(kSeFloat64, kSeFloat32, kEquivariant),
                         [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

// Seeds, not scheduling, decide a member: member 1 trained side by side, one after another, and
// alone with --member 1 (as a Slurm array task would) is the same, bit for bit. One thread per
// member in all three (OMP_NUM_THREADS=1), since the thread count may change the last bits.
TEST_F(CommitteeTest, SchedulingDoesNotChangeAMember) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 5));
  const CommandResult side = mlip("train input.yaml --committee 2 --committee-jobs 2 -o side", "OMP_NUM_THREADS=1");
  ASSERT_EQ(side.exit_code, 0) << side.out << side.err;
  EXPECT_TRUE(contains(side.out, ": 2 at a time, 1 thread each")) << side.out;
  const CommandResult one = mlip("train input.yaml --committee 2 -o one", "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_TRUE(contains(one.out, ": 1 at a time, 1 thread each")) << one.out;
  const CommandResult alone = mlip("train input.yaml --committee 2 --member 1 -o alone", "OMP_NUM_THREADS=1");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_FALSE(fs::exists(dir_ / "alone/model_0")) << "--member 1 trains member 1 only";
  for (const char* other : {"one", "alone"}) {
    const std::string folder = std::string(other) + "/model_1";
    EXPECT_EQ(read(folder + "/lcurve.out"), read("side/model_1/lcurve.out")) << folder;
    EXPECT_TRUE(same_parameters(dir_ / (folder + "/model.ckpt-5.pt"), dir_ / "side/model_1/model.ckpt-5.pt")) << folder;
  }
  // --committee-jobs 1 gives the one member at a time every core.
  const CommandResult plan = mlip("train input.yaml --committee 2 --committee-jobs 1 -o plan", "OMP_NUM_THREADS=2");
  ASSERT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  EXPECT_TRUE(contains(plan.out, ": 1 at a time, 2 threads each")) << plan.out;
  EXPECT_TRUE(contains(read("plan/model_1/train.log"), "2 thread(s)")) << read("plan/model_1/train.log");
}

// --restart <committee folder> continues each member from its own folder; --init-model <one
// model> starts every member from it.
TEST_F(CommitteeTest, RestartAndInitModelTakeEachMembersFolderOrTheOneGiven) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 5));
  ASSERT_EQ(mlip("train input.yaml --committee 2 -o cmt").exit_code, 0);
  ASSERT_EQ(mlip("train input.yaml -o one").exit_code, 0);
  write_text(dir_ / "longer.yaml", input_yaml(kSeFloat64, 10));
  const CommandResult restart = mlip("train longer.yaml --committee 2 -o cmt --restart cmt");
  ASSERT_EQ(restart.exit_code, 0) << restart.out << restart.err;
  EXPECT_TRUE(contains(restart.out, "model_1: finished step 10 in ")) << restart.out;
  for (const char* member : {"model_0", "model_1"}) {
    const std::string log = read("cmt/" + std::string(member) + "/train.log");
    EXPECT_TRUE(contains(log, "restarted from cmt/" + std::string(member) + "/model.ckpt-5.pt at step 5")) << log;
    EXPECT_TRUE(contains(log, "committee member")) << "a restart appends to the log: " << log;
  }
  const CommandResult init = mlip("train input.yaml --committee 2 -o from_one --init-model one");
  ASSERT_EQ(init.exit_code, 0) << init.out << init.err;
  for (const char* member : {"model_0", "model_1"})
    EXPECT_FALSE(contains(read("from_one/" + std::string(member) + "/train.log"), "statistics from"))
        << "--init-model keeps the statistics of 'one'";
  // A committee folder for --init-model that lacks a member's folder: that member would take the
  // folder itself, which holds no checkpoint. Found before any member starts.
  const CommandResult three = mlip("train input.yaml --committee 3 -o three --init-model cmt");
  EXPECT_EQ(three.exit_code, 1);
  EXPECT_TRUE(contains(three.err, "mlip: error: model_2: --init-model cmt: cmt: a folder without a 'checkpoint'"))
      << three.err;
  EXPECT_FALSE(fs::exists(dir_ / "three"));
}

// --finetune with a committee: a frozen model is every member's start; a committee folder gives
// member k its own model_k (docs/training.md "A committee of models").
TEST_F(CommitteeTest, FinetuneTakesEachMembersFolderOrTheModelGiven) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 5));
  ASSERT_EQ(mlip("train input.yaml --committee 2 -o cmt").exit_code, 0);
  ASSERT_EQ(mlip("train input.yaml -o one").exit_code, 0);
  ASSERT_EQ(mlip("freeze -c one -o one.pt").exit_code, 0);
  const CommandResult from_one = mlip("train input.yaml --committee 2 -o from_one --finetune one.pt");
  ASSERT_EQ(from_one.exit_code, 0) << from_one.out << from_one.err;
  const CommandResult from_cmt = mlip("train input.yaml --committee 2 -o from_cmt --finetune cmt");
  ASSERT_EQ(from_cmt.exit_code, 0) << from_cmt.out << from_cmt.err;
  for (const std::string member : {"model_0", "model_1"}) {
    const std::string one_log = read("from_one/" + member + "/train.log");
    EXPECT_TRUE(contains(one_log, "fine-tune: pretrained model one.pt (")) << one_log;
    const std::string cmt_log = read("from_cmt/" + member + "/train.log");
    EXPECT_TRUE(contains(cmt_log, "fine-tune: pretrained model cmt/" + member + "/")) << cmt_log;
    EXPECT_TRUE(fs::exists(dir_ / ("from_cmt/" + member + "/model.ckpt-5.pt")));
  }
  // The members start from different models (and seeds): their weights differ.
  EXPECT_FALSE(same_parameters(dir_ / "from_cmt/model_0/model.ckpt-5.pt", dir_ / "from_cmt/model_1/model.ckpt-5.pt"));
}

// A member that fails is reported with the end of its log; the other one finishes; exit code 1.
TEST_F(CommitteeTest, AFailingMemberIsReportedAndTheOthersFinish) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 5));
  fs::create_directories(dir_ / "cmt/model_1/lcurve.out");  // a folder where member 1 writes its learning curve
  const CommandResult run = mlip("train input.yaml --committee 2 -o cmt");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(contains(run.out, "model_0: finished step 5 in ")) << run.out;
  EXPECT_TRUE(contains(run.out, "model_1: failed (exit code 1) after ")) << run.out;
  EXPECT_TRUE(contains(run.out,
                       "the end of cmt/model_1/train.log:\n    committee member 1 of 2: seeds + 1, output cmt/model_1\n"
                       "    mlip: error: cmt/model_1/lcurve.out: cannot write the learning curve"))
      << run.out;
  EXPECT_TRUE(contains(run.out, "committee: 1 of 2 models trained")) << run.out;
  EXPECT_TRUE(contains(run.err, "mlip: error: committee: model_1 failed (1 of 2)")) << run.err;
  EXPECT_TRUE(fs::exists(dir_ / "cmt/model_0/model.ckpt-5.pt"));
}

// Ctrl-C to the committee is passed on to its members: each saves a checkpoint and stops; 130.
TEST_F(CommitteeTest, SigintReachesEveryMember) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 100000));
  const std::string run = "sigint_" + std::to_string(::getpid());
  const std::string command = kMlip + " train input.yaml --committee 2 -o " + run;
  ASSERT_EQ(std::system(("cd " + dir_.path() + " && (" + command + " > log.txt 2>&1; echo $? > rc.txt) &").c_str()), 0);
  auto at_step_5 = [&](const std::string& member) {
    return contains(read(run + "/" + member + "/lcurve.out"), "\n      5 ");
  };
  for (int k = 0; k < 1200 && !(at_step_5("model_0") && at_step_5("model_1")); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(at_step_5("model_0") && at_step_5("model_1")) << read("log.txt");
  // Anchored on the whole command line: the members' own (with --member) do not match.
  ASSERT_EQ(std::system(("pkill -INT -f '^" + command + "$'").c_str()), 0);
  for (int k = 0; k < 1200 && !fs::exists(dir_ / "rc.txt"); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string log = read("log.txt");
  EXPECT_EQ(read("rc.txt"), "130\n") << log;
  EXPECT_TRUE(contains(log, "model_0: interrupted (exit code 130) after ")) << log;
  EXPECT_TRUE(contains(log, "model_1: interrupted (exit code 130) after ")) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(": interrupted at step \\d+: saved " + run + "/model_1/"))) << log;
  EXPECT_TRUE(contains(log, "mlip: interrupted (SIGINT): passed on to the running members")) << log;
  EXPECT_TRUE(contains(log, "continue them all with --restart " + run)) << log;
  for (const char* member : {"model_0", "model_1"}) {
    const std::string member_log = read(run + "/" + member + "/train.log");
    std::smatch saved;
    ASSERT_TRUE(std::regex_search(member_log, saved, std::regex(R"(interrupted at step \d+: saved (\S+))")))
        << member_log;
    EXPECT_TRUE(fs::exists(dir_ / saved[1].str())) << saved[1].str();
  }
}

TEST_F(CommitteeTest, BadOptionsAreUsageErrors) {
  write_text(dir_ / "input.yaml", input_yaml(kSeFloat64, 5));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--committee 0", "mlip: --committee: expected a positive integer, got '0'"},
      {"--committee 1.5", "mlip: --committee: expected a positive integer, got '1.5'"},
      {"--committee two", "mlip: --committee: expected a positive integer, got 'two'"},
      {"--committee 2 --member 2", "mlip: train: --member 2 is not a member of --committee 2 (members 0 to 1)"},
      {"--committee 2 --member -1", "mlip: --member: expected an integer >= 0, got '-1'"},
      {"--member 0", "mlip: train: --member 0 needs --committee <N>"},
      {"--committee 2 --committee-jobs 0", "mlip: --committee-jobs: expected a positive integer, got '0'"},
      {"--committee-jobs 2", "mlip: train: --committee-jobs needs --committee <N>"},
      {"--committee 2 --member 0 --committee-jobs 2", "mlip: train: --committee-jobs chooses how a whole committee"},
      // A size no machine runs: named with its limit, not "out of memory while training a committee".
      {"--committee 1e9",
       "mlip: --committee: expected at most 1000 members (each is a training run with a folder of its own), got '1e9'"},
      {"--committee 1001", "expected at most 1000 members"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult r = mlip("train input.yaml " + args + " -o bad");
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_TRUE(contains(r.err, message)) << args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "usage: mlip train")) << args;
  }
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
  // Under a launcher with several ranks, the members must be started one per task.
  const CommandResult ranks = mlip("train input.yaml --committee 2 -o bad",
                                   "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_ID=7 SLURM_JOB_NODELIST=n1");
  EXPECT_EQ(ranks.exit_code, 1);
  EXPECT_TRUE(contains(ranks.err, "--committee 2 under srun with 2 ranks: run each member with --member k instead"))
      << ranks.err;
  // A bad input is reported once, by the committee, before any member starts.
  write_text(dir_ / "typo.yaml", std::regex_replace(input_yaml(kSeFloat64, 5), std::regex("numb_steps"), "numb_step"));
  const CommandResult typo = mlip("train typo.yaml --committee 2 -o bad");
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_TRUE(contains(typo.err, "training.numb_step: unknown key")) << typo.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
  // A committee refused after it made its folders leaves none of them: member 1's folder is held
  // by another run (a lock file of a live process), so the committee stops before any member.
  fs::create_directories(dir_ / "held/run/model_1");
  const CommandResult holder = run_command("cd " + dir_.path() +
                                           " && (flock -n held/run/model_1/.mlip.lock sleep 60 > /dev/null 2>&1 &"
                                           " echo $!)");
  ASSERT_EQ(holder.exit_code, 0);
  for (int k = 0; k < 100 && !fs::exists(dir_ / "held/run/model_1/.mlip.lock"); ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const CommandResult held = mlip("train input.yaml --committee 3 -o held/run");
  run_command("kill " + holder.out);
  EXPECT_EQ(held.exit_code, 1) << held.out << held.err;
  EXPECT_TRUE(contains(held.err, "-o held/run/model_1: the folder is in use by another mlip run")) << held.err;
  EXPECT_FALSE(fs::exists(dir_ / "held/run/model_0")) << "the refused committee left model_0";
  EXPECT_FALSE(fs::exists(dir_ / "held/run/model_2"));
  EXPECT_TRUE(fs::exists(dir_ / "held/run/model_1")) << "a folder that was there before stays";
}

}  // namespace
