#include "archive/output_not_input.h"

#include <sys/stat.h>

#include <filesystem>

#include "error.h"

namespace fs = std::filesystem;

namespace mlip::archive {
namespace {

/// stat(2) of `path`, following links; false when it does not exist.
bool stat_of(const std::string& path, struct stat& st) { return ::stat(path.c_str(), &st) == 0; }

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

/// The path with links and `.`/`..` resolved as far as it exists (the rest lexically).
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

/// Whether `inner` lies strictly inside the folder `outer` (both resolved).
bool lies_inside(const fs::path& inner, const fs::path& outer) {
  const std::string a = inner.string(), b = outer.string();
  return a.size() > b.size() + 1 && a.compare(0, b.size(), b) == 0 && (b == "/" || a[b.size()] == '/');
}

/// Whether a file of this name is one a DeePMD system's reader reads (docs/data.md).
bool is_system_file_name(const std::string& name) {
  auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "nopbc" || ends_with(".npy") || ends_with(".raw");
}

}  // namespace

void check_output_is_not_an_input(const std::string& output, const std::string& given,
                                  const std::vector<ReadPath>& inputs) {
  struct stat out {};
  if (!stat_of(output, out) || !S_ISREG(out.st_mode)) return;
  for (const ReadPath& input : inputs) {
    struct stat in {};
    if (input.path.empty() || !stat_of(input.path, in)) continue;
    if (same_file(out, in)) {
      const bool same_name = resolved(output) == resolved(input.path) && fs::path(output).lexically_normal() ==
                                                                             fs::path(input.path).lexically_normal();
      throw Error(given + ": that is " + input.holds + " " + input.path +
                  (same_name ? "" : " (the same file by another name)") +
                  ", which this command reads; expected another file name (" + input.path +
                  " is left as it is)");
    }
    if (S_ISDIR(in.st_mode) && is_system_file_name(fs::path(output).filename().string()) &&
        lies_inside(resolved(output), resolved(input.path)))
      throw Error(given + ": that is a file of " + input.holds + " " + input.path +
                  ", which this command reads; expected a file name outside it (" + input.path +
                  " is left as it is)");
  }
}

void check_outputs_differ(const std::string& first, const std::string& first_given, const std::string& second,
                          const std::string& second_given) {
  struct stat a {}, b {};
  const bool both_exist = stat_of(first, a) && stat_of(second, b);
  if (both_exist ? (S_ISREG(a.st_mode) && same_file(a, b)) : resolved(first) == resolved(second))
    throw Error(second_given + ": that is also " + first_given + "; expected another file name (each output is a "
                "file of its own)");
}

}  // namespace mlip::archive
