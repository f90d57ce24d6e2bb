#include "dist/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "error.h"

namespace {

using mlip::dist::detect_launch;
using mlip::dist::Launcher;

struct FakeEnv {
  std::map<std::string, std::string> vars;
  std::function<const char*(const char*)> fn() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

TEST(LaunchEnv, NoLauncherIsSingleProcess) {
  FakeEnv env;
  auto l = detect_launch(env.fn());
  EXPECT_EQ(l.launcher, Launcher::kNone);
  EXPECT_EQ(l.world_size, 1);
  EXPECT_EQ(l.rank, 0);
  EXPECT_FALSE(l.missing.empty());
}

TEST(LaunchEnv, Torchrun) {
  FakeEnv env{{{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
               {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "x"}}};
  auto l = detect_launch(env.fn());
  EXPECT_EQ(l.launcher, Launcher::kTorchrun);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.master_addr, "10.0.0.1");
  EXPECT_EQ(l.master_port, 29500);
  EXPECT_TRUE(l.missing.empty());
}

TEST(LaunchEnv, SlurmDerivesAddressAndPort) {
  FakeEnv env{{{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "8"},
               {"SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1"}, {"SLURM_JOB_ID", "123456"}}};
  auto l = detect_launch(env.fn());
  EXPECT_EQ(l.launcher, Launcher::kSlurm);
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.master_addr, "gpu07");
  EXPECT_EQ(l.master_port, 15000 + 123456 % 20000);
  EXPECT_EQ(l.node_list, "gpu[07-09,12],cpu1");
}

TEST(LaunchEnv, TorchrunInsideSlurmWins) {
  FakeEnv env{{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
               {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "1234"}}};
  EXPECT_EQ(detect_launch(env.fn()).launcher, Launcher::kTorchrun);
}

TEST(LaunchEnv, OpenMpiAndPmi) {
  FakeEnv ompi{{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}};
  auto l = detect_launch(ompi.fn());
  EXPECT_EQ(l.launcher, Launcher::kMpi);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world_size, 2);
  FakeEnv pmi{{{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}}};
  auto p = detect_launch(pmi.fn());
  EXPECT_EQ(p.launcher, Launcher::kMpi);
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.world_size, 4);
}

TEST(LaunchEnv, MalformedVariablesAreErrors) {
  FakeEnv env{{{"RANK", "one"}, {"WORLD_SIZE", "2"}}};
  try {
    detect_launch(env.fn());
    FAIL();
  } catch (const mlip::Error& e) {
    EXPECT_STREQ(e.what(), "environment variable RANK: expected a non-negative integer, got 'one'");
  }
  FakeEnv big{{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}};
  EXPECT_THROW(detect_launch(big.fn()), mlip::Error);
}

TEST(LaunchEnv, FirstSlurmHost) {
  EXPECT_EQ(mlip::dist::first_slurm_host("node1"), "node1");
  EXPECT_EQ(mlip::dist::first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(mlip::dist::first_slurm_host("nid[0012-0020]"), "nid0012");
  EXPECT_EQ(mlip::dist::first_slurm_host("a[3,5-7]"), "a3");
}

}  // namespace
