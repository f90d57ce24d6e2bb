// Where a test binary's calls into std::filesystem land at run time. pip's LibTorch wheels export
// their own copies of libstdc++'s std::filesystem functions (pytorch/pytorch#133437), some of
// them broken (std::filesystem::remove_all jumps to address 0). The build names libstdc++ first
// among the executables' libraries so that the dynamic linker takes libstdc++'s copies
// (CMakeLists.txt; docs/gpu_check.md "std::filesystem and pip's LibTorch"). This test checks
// that it worked: each function's run-time address must lie in libstdc++ (or in the executable
// itself, with a statically linked libstdc++), never in a LibTorch library.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace {

/// The file of the loaded object that holds `address`, or "(unknown)".
std::string object_of(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(unknown)";
  return info.dli_fname;
}

bool is_libtorch(const std::string& object) {
  const std::string name = fs::path(object).filename().string();
  return name.rfind("libtorch", 0) == 0 || name.rfind("libc10", 0) == 0;
}

template <typename F>
const void* address_of(F* f) {
  return reinterpret_cast<const void*>(f);
}

}  // namespace

TEST(StdBinding, FilesystemFunctionsComeFromLibstdcxxNotFromLibTorch) {
  // LibTorch must be loaded for the test to mean anything: a tensor is made.
  ASSERT_EQ(torch::ones({2}).sum().item<double>(), 2.0);
  using RemoveAll = std::uintmax_t(const fs::path&, std::error_code&);
  using CreateDirectories = bool(const fs::path&, std::error_code&);
  using Rename = void(const fs::path&, const fs::path&, std::error_code&);
  using Status = fs::file_status(const fs::path&, std::error_code&);
  using TempDirectoryPath = fs::path(std::error_code&);
  const std::vector<std::pair<std::string, const void*>> functions = {
      {"std::filesystem::remove_all", address_of<RemoveAll>(&fs::remove_all)},
      {"std::filesystem::create_directories", address_of<CreateDirectories>(&fs::create_directories)},
      {"std::filesystem::rename", address_of<Rename>(&fs::rename)},
      {"std::filesystem::status", address_of<Status>(&fs::status)},
      {"std::filesystem::temp_directory_path", address_of<TempDirectoryPath>(&fs::temp_directory_path)},
  };
  for (const auto& [name, address] : functions) {
    const std::string object = object_of(address);
    SCOPED_TRACE(name + " is in " + object);
    EXPECT_NE(object, "(unknown)");
    EXPECT_FALSE(is_libtorch(object))
        << name << " is bound to LibTorch's copy (" << object << "), not libstdc++'s: the link "
        << "did not put libstdc++ first among the executable's libraries";
  }
}
