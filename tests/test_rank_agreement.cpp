// What ranks must agree on (train/rank_agreement.h): the flattened input and the data, and the
// message that names the first difference. Real ranks: tests/dist/ranks_disagree.sh.
#include <gtest/gtest.h>

#include "train/config.h"
#include "train/rank_agreement.h"

namespace train = mlip::train;
using train::AgreementItem;

namespace {

const char* const kInput = R"(model:
  type_map: [O, H]
  descriptor: {sel: [46, 92], rcut: 6.0}
  fitting_net: {}
  _comment: ignored
learning_rate: {start_lr: 1e-3}
training:
  training_data: {systems: [a, b]}
  numb_steps: 100
  cache_mb: 512
  data_workers: 2
  device: cpu
)";

std::vector<AgreementItem> items_of(const std::string& text) {
  const train::TrainConfig config = train::parse_train_config(text, "input.yaml", "/work/in");
  mlip::data::System system;
  system.name = "/work/in/a";
  system.types = {0, 1, 1};
  system.nframes = 7;
  return train::agreement_items(config, {system}, {});
}

}  // namespace

TEST(RankAgreement, TheInputFlattenedWithoutCommentsOrPerRankResources) {
  const auto items = items_of(kInput);
  const std::vector<AgreementItem> expected = {
      {"model.type_map[0]", "O"}, {"model.type_map[1]", "H"}, {"model.descriptor.sel[0]", "46"},
      {"model.descriptor.sel[1]", "92"}, {"model.descriptor.rcut", "6"}, {"model.fitting_net", "{}"},
      {"learning_rate.start_lr", "0.001"}, {"training.training_data.systems[0]", "a"},
      {"training.training_data.systems[1]", "b"}, {"training.numb_steps", "100"},
      {"data.training systems", "1"}, {"data.training[0]", "a (3 atoms, 7 frames)"},
      {"data.validation systems", "0"}};
  EXPECT_EQ(items, expected);
}

TEST(RankAgreement, NumbersAgreeByValueAndQuotingIsIgnored) {
  std::string other = kInput;
  other.replace(other.find("1e-3"), 4, "\"0.001\"");
  other.replace(other.find("cache_mb: 512"), 13, "cache_mb: 64");
  EXPECT_EQ(train::disagreement({items_of(kInput), items_of(other)}), "");
}

TEST(RankAgreement, TheFirstDifferenceIsNamedWithEveryDifferingRank) {
  std::string seed = kInput, size = kInput;
  seed.replace(seed.find("numb_steps: 100"), 15, "numb_steps: 100\n  seed: 4");
  size.replace(size.find("sel: [46, 92]"), 13, "sel: [46, 93]");
  EXPECT_EQ(train::disagreement({items_of(kInput), items_of(kInput), items_of(size), items_of(seed)}),
            "ranks disagree on model.descriptor.sel[1]: rank 0 has 92, rank 2 has 93 (every rank must train with "
            "the same input and data; docs/distributed.md \"Ranks that disagree\")");
  EXPECT_EQ(train::disagreement({items_of(kInput), items_of(seed)}).rfind(
                "ranks disagree on training.seed: rank 0 has (not set), rank 1 has 4 (", 0),
            0u);
  EXPECT_EQ(train::disagreement({items_of(seed), items_of(kInput)}).rfind(
                "ranks disagree on training.seed: rank 0 has 4, rank 1 has (not set) (", 0),
            0u);
}
