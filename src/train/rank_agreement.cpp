#include "train/rank_agreement.h"

#include <ATen/ops/zeros.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "error.h"
#include "input/section.h"
#include "archive/sha256.h"

namespace mlip::train {

using archive::sha256_hex;
namespace {

/// Keys that may differ between ranks: resources of one rank, not of the training.
const char* kPerRankKeys[] = {"training.cache_mb", "training.data_workers", "training.device"};

std::string scalar_value(const YAML::Node& node) {
  double number = 0;
  if (input::parse_number(node.Scalar(), number)) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", number);
    return text;
  }
  return node.Scalar();
}

void flatten(const YAML::Node& node, const std::string& path, std::vector<AgreementItem>& out) {
  if (std::find(std::begin(kPerRankKeys), std::end(kPerRankKeys), path) != std::end(kPerRankKeys)) return;
  if (node.IsMap()) {
    if (node.size() == 0) out.emplace_back(path, "{}");
    for (const auto& kv : node) {
      const std::string key = kv.first.Scalar();
      if (!key.empty() && key[0] == '_') continue;
      flatten(kv.second, path.empty() ? key : path + "." + key, out);
    }
  } else if (node.IsSequence()) {
    if (node.size() == 0) out.emplace_back(path, "[]");
    for (size_t i = 0; i < node.size(); ++i) flatten(node[i], path + "[" + std::to_string(i) + "]", out);
  } else if (node.IsNull()) {
    out.emplace_back(path, "null");
  } else {
    out.emplace_back(path, scalar_value(node));
  }
}

void add_systems(const std::vector<data::System>& systems, const std::string& set, const std::string& input_dir,
                 std::vector<AgreementItem>& out) {
  out.emplace_back("data." + set + " systems", std::to_string(systems.size()));
  for (size_t i = 0; i < systems.size(); ++i) {
    const data::System& s = systems[i];
    std::string name = s.name;
    if (!input_dir.empty()) {
      const std::filesystem::path relative = std::filesystem::path(name).lexically_relative(input_dir);
      if (!relative.empty() && relative.string().rfind("..", 0) != 0) name = relative.string();
    }
    out.emplace_back("data." + set + "[" + std::to_string(i) + "]",
                     name + " (" + std::to_string(s.natoms()) + " atoms, " + std::to_string(s.nframes) + " frames)");
  }
}

/// Lines "key\tvalue\n", with newlines, tabs and backslashes in keys and values escaped.
std::string encode(const std::vector<AgreementItem>& items) {
  auto escaped = [](const std::string& s) {
    std::string e;
    for (char c : s) {
      if (c == '\\') e += "\\\\";
      else if (c == '\n') e += "\\n";
      else if (c == '\t') e += "\\t";
      else e += c;
    }
    return e;
  };
  std::string text;
  for (const auto& [key, value] : items) text += escaped(key) + "\t" + escaped(value) + "\n";
  return text;
}

std::vector<AgreementItem> decode(const std::string& text) {
  auto unescaped = [](const std::string& s) {
    std::string u;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\\' && i + 1 < s.size()) {
        const char c = s[++i];
        u += c == 'n' ? '\n' : c == 't' ? '\t' : c;
      } else {
        u += s[i];
      }
    }
    return u;
  };
  std::vector<AgreementItem> items;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    const size_t tab = line.find('\t');
    items.emplace_back(unescaped(line.substr(0, tab)), tab == std::string::npos ? "" : unescaped(line.substr(tab + 1)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return items;
}

}  // namespace

std::vector<AgreementItem> agreement_items(const TrainConfig& config, const std::vector<data::System>& training,
                                           const std::vector<data::System>& validation) {
  std::vector<AgreementItem> items;
  try {
    flatten(YAML::Load(config.input_text), "", items);
  } catch (const YAML::Exception& e) {
    throw Error(config.input_path + ": cannot read the input again to compare it across ranks (" + e.what() + ")");
  }
  add_systems(training, "training", config.input_dir, items);
  add_systems(validation, "validation", config.input_dir, items);
  return items;
}

std::string disagreement(const std::vector<std::vector<AgreementItem>>& by_rank) {
  const size_t ranks = by_rank.size();
  // Keys in rank 0's order, then those only other ranks have.
  std::vector<std::string> keys;
  std::vector<std::map<std::string, std::string>> values(ranks);
  for (size_t r = 0; r < ranks; ++r)
    for (const auto& [key, value] : by_rank[r]) {
      if (values[r].emplace(key, value).second && std::find(keys.begin(), keys.end(), key) == keys.end())
        keys.push_back(key);
    }
  const std::string absent = "(not set)";
  for (const std::string& key : keys) {
    auto value_of = [&](size_t r) {
      auto it = values[r].find(key);
      return it == values[r].end() ? absent : it->second;
    };
    const std::string reference = value_of(0);
    std::string differing;
    int shown = 0, more = 0;
    for (size_t r = 1; r < ranks; ++r) {
      const std::string v = value_of(r);
      if (v == reference) continue;
      if (shown++ < 4) differing += ", rank " + std::to_string(r) + " has " + v;
      else ++more;
    }
    if (differing.empty()) continue;
    if (more > 0) differing += " (and " + std::to_string(more) + " more ranks differ)";
    return "ranks disagree on " + key + ": rank 0 has " + reference + differing +
           " (every rank must train with the same input and data; docs/distributed.md \"Ranks that disagree\")";
  }
  return "";
}

void check_ranks_agree(dist::Communicator& comm, const std::vector<AgreementItem>& items, const c10::Device& device) {
  const int64_t ranks = comm.size(), rank = comm.rank();
  if (ranks <= 1) return;
  const std::string text = encode(items);
  // First the texts' hashes and lengths; the texts themselves only when the hashes differ.
  const int64_t hash = int64_t(std::stoull(sha256_hex(text).substr(0, 15), nullptr, 16));
  auto options = at::TensorOptions(at::kLong);
  at::Tensor header = at::zeros({2 * ranks}, options);
  header[rank] = hash;
  header[ranks + rank] = int64_t(text.size());
  header = header.to(device);
  comm.all_reduce_sum(header);
  header = header.cpu();
  const auto h = header.accessor<int64_t, 1>();
  bool equal = true;
  int64_t longest = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    equal = equal && h[r] == h[0] && h[ranks + r] == h[ranks];
    longest = std::max(longest, h[ranks + r]);
  }
  if (equal) return;
  at::Tensor bytes = at::zeros({ranks, longest}, options);
  auto own = bytes.accessor<int64_t, 2>();
  for (size_t i = 0; i < text.size(); ++i) own[rank][int64_t(i)] = static_cast<unsigned char>(text[i]);
  bytes = bytes.reshape({ranks * longest}).to(device);
  comm.all_reduce_sum(bytes);
  bytes = bytes.cpu().reshape({ranks, longest});
  const auto all = bytes.accessor<int64_t, 2>();
  std::vector<std::vector<AgreementItem>> by_rank;
  for (int64_t r = 0; r < ranks; ++r) {
    std::string other(size_t(h[ranks + r]), '\0');
    for (int64_t i = 0; i < h[ranks + r]; ++i) other[size_t(i)] = char(all[r][i]);
    by_rank.push_back(decode(other));
  }
  std::string message = disagreement(by_rank);
  if (message.empty()) message = "ranks disagree on the input or data (their fingerprints differ)";
  throw Error::on_every_rank(message);
}

}  // namespace mlip::train
