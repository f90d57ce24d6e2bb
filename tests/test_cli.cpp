#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace {

using mlip::test::run_command;
const std::string kMlip = MLIP_EXE;

TEST(Cli, HelpAndVersion) {
  auto h = run_command(kMlip + " --help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("usage: mlip"), std::string::npos);
  EXPECT_NE(h.out.find("neighbor-stat"), std::string::npos);
  auto v = run_command(kMlip + " --version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("mlip ", 0), 0u) << v.out;
  EXPECT_TRUE(std::regex_search(v.out, std::regex(R"(\(LibTorch [0-9]+\.[0-9]+\.[0-9]+)"))) << v.out;  // the build's LibTorch
  auto c = run_command(kMlip + " neighbor-stat --help");
  EXPECT_EQ(c.exit_code, 0);
  EXPECT_NE(c.out.find("usage: mlip neighbor-stat"), std::string::npos);
}

TEST(Cli, UnknownCommandOrFlagPrintsUsageAndExits2) {
  for (const char* args : {"", " frobnicate", " --frobnicate", " neighbor-stat --frobnicate -s x",
                           " neighbor-stat -r 6", " neighbor-stat -s x -r -1", " neighbor-stat -s x -r abc",
                           " neighbor-stat -s"}) {
    SCOPED_TRACE(args);
    auto r = run_command(kMlip + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("usage: mlip"), std::string::npos) << r.err;
  }
}

TEST(Cli, DistributedOptionsAreChecked) {
  const std::string input = std::string(MLIP_SOURCE_DIR) + "/examples/water/input.yaml";
  for (const char* args : {" --distributed maybe", " --backend carrier-pigeon", " --log-mode loud", " --timeout -5"}) {
    SCOPED_TRACE(args);
    auto r = run_command(kMlip + " train " + input + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("expected"), std::string::npos) << r.err;
  }
  // --distributed on outside a launcher names what is missing.
  auto r = run_command("env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK -u PMI_RANK " + kMlip +
                       " train " + input + " --distributed on");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--distributed on: no launcher environment found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MASTER_ADDR"), std::string::npos) << r.err;
  // A launcher's environment without the rendezvous address is an error, not a hang.
  r = run_command("env RANK=0 WORLD_SIZE=2 " + kMlip + " train " + input);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("torchrun with 2 ranks, but the environment lacks MASTER_ADDR, MASTER_PORT"), std::string::npos)
      << r.err;
}

/// An extended XYZ frame of two water molecules 3 Å apart along x; `cell` holds the comment
/// line's Lattice and pbc keys.
std::string two_waters(const std::string& cell) {
  return "6\n"
         "Properties=species:S:1:pos:R:3:forces:R:3 energy=-10.0 " + cell + "\n"
         "O 0.0 0.0 0.0 0 0 0\n"
         "H 0.9572 0.0 0.0 0 0 0\n"
         "H -0.24 0.9266 0.0 0 0 0\n"
         "O 3.0 0.0 0.0 0 0 0\n"
         "H 3.9572 0.0 0.0 0 0 0\n"
         "H 2.76 0.9266 0.0 0 0 0\n";
}

TEST(Cli, NeighborStatOnAnExtxyzFile) {
  mlip::test::TempDir dir;
  // Two water molecules, non-periodic.
  mlip::test::write_text(dir / "w.xyz", two_waters("pbc=\"F F F\""));
  auto r = run_command(kMlip + " neighbor-stat -s " + dir.path() + "/w.xyz -r 2.5 -t O H");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The closest pair is the second O-H of the first molecule: |(-0.24, 0.9266, 0)| = 0.957177 Å.
  EXPECT_NE(r.out.find("min_nbor_dist: 0.957177"), std::string::npos) << r.out;
  // Within 2.5 Å: the H at 0.9572 sees both O (0.957 and 2.043 Å); the O at 3.0 sees its two
  // H and the H at 0.9572 (2.043 Å).
  EXPECT_NE(r.out.find("max_nbor_size: [2, 3]"), std::string::npos) << r.out;
  auto missing = run_command(kMlip + " neighbor-stat -s " + dir.path() + "/nothing_here -r 6");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("mlip: error: "), std::string::npos);
  EXPECT_NE(missing.err.find("nothing_here"), std::string::npos);
}

TEST(Cli, NeighborStatRefusesARadiusWhoseListCannotFitInMemory) {
  mlip::test::TempDir dir;
  // Two water molecules in a periodic 6 Å cube.
  mlip::test::write_text(dir / "w.xyz", two_waters("Lattice=\"6 0 0 0 6 0 0 0 6\" pbc=\"T T T\""));
  auto fine = run_command(kMlip + " neighbor-stat -s " + dir.path() + "/w.xyz -r 5 -t O H");
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  // 6^2 x (1.61 x 10^5 / 6)^3 pairs: about 7e14, tens of PiB: refused before any allocation.
  auto huge = run_command(kMlip + " neighbor-stat -s " + dir.path() + "/w.xyz -r 100000 -t O H");
  EXPECT_EQ(huge.exit_code, 1);
  EXPECT_NE(huge.err.find("mlip: error: -r 100000: the neighbour list of"), std::string::npos) << huge.err;
  EXPECT_NE(huge.err.find("of memory;"), std::string::npos) << huge.err;
  EXPECT_EQ(huge.err.find("Kokkos"), std::string::npos) << huge.err;
  EXPECT_EQ(huge.err.find("Traceback"), std::string::npos) << huge.err;
}

TEST(Cli, InputsThatAreNotRegularFilesAreRefusedNamingThem) {
  mlip::test::TempDir dir;
  auto zero = run_command(kMlip + " train /dev/zero");
  EXPECT_EQ(zero.exit_code, 1);
  EXPECT_NE(zero.err.find("mlip: error: /dev/zero: cannot read the training input (it is a character device"),
            std::string::npos)
      << zero.err;
  auto folder = run_command(kMlip + " train " + dir.path());
  EXPECT_EQ(folder.exit_code, 1);
  EXPECT_NE(folder.err.find(dir.path() + ": cannot read the training input (it is a folder"), std::string::npos)
      << folder.err;
  auto model = run_command(kMlip + " freeze -c /dev/zero -o " + dir.path() + "/m.pt");
  EXPECT_EQ(model.exit_code, 1);
  EXPECT_NE(model.err.find("/dev/zero: cannot read the checkpoint (it is a character device"), std::string::npos)
      << model.err;
}

TEST(Cli, LammpsHelpAndArgumentsInMlipsWords) {
  auto help = run_command(kMlip + " lammps --help");
  // Exit 0; in a build without LAMMPS, the help, then that message and exit 1.
  const bool has_lammps = help.err.find("built without LAMMPS") == std::string::npos;
  EXPECT_EQ(help.exit_code, has_lammps ? 0 : 1) << help.err;
  EXPECT_NE(help.out.find("usage: mlip lammps"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("pair_style mlip"), std::string::npos) << help.out;
  EXPECT_EQ((help.out + help.err).find("Invalid command-line argument"), std::string::npos);
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --bogus", "unknown option '--bogus'"},
           {" -in", "-in: expected 1 value, got 0"},
           {" in.lammps", "unexpected argument 'in.lammps'"},
           {" -var x -log none", "-var: expected 2 values, got 1"}}) {
    SCOPED_TRACE(args);
    auto r = run_command(kMlip + " lammps" + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("mlip: lammps: " + message), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("usage: mlip lammps"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Invalid command-line argument"), std::string::npos) << r.err;
  }
}

}  // namespace
