#include "train/device.h"

#include <torch/cuda.h>

#include <cstdio>
#include <regex>

#include "error.h"

#ifdef MLIP_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace mlip::train {

bool build_has_cuda() {
#ifdef MLIP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

std::string visible_devices(int count) {
  if (count == 0) return "no CUDA device";
  std::string names;
  for (int k = 0; k < count; ++k) names += (k ? ", cuda:" : "cuda:") + std::to_string(k);
  return std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + " (" + names + ")";
}

}  // namespace

c10::Device resolve_device(const std::string& request, const std::string& what, int local_rank) {
  std::smatch m;
  static const std::regex kSyntax("(auto|cpu|cuda)(:([0-9]+))?");
  if (!std::regex_match(request, m, kSyntax) || (m[3].matched && m[1] != "cuda"))
    throw Error(what + ": expected auto, cpu, cuda or cuda:K, got \"" + request + "\"");
  const std::string kind = m[1];
  if (kind == "cpu") return c10::Device(c10::kCPU);
  const int count = build_has_cuda() ? int(torch::cuda::device_count()) : 0;
  if (kind == "auto") {
    if (count == 0) return c10::Device(c10::kCPU);
    return c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank % count));
  }
  if (!build_has_cuda()) throw Error(what + ": expected cpu (this build has no CUDA), got \"" + request + "\"");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string env = visible != nullptr ? std::string("; CUDA_VISIBLE_DEVICES=") + visible : std::string();
  if (count == 0) throw Error(what + " " + request + ": this machine has no CUDA device visible" + env);
  if (!m[3].matched) return c10::Device(c10::kCUDA, c10::DeviceIndex(local_rank % count));
  const long index = std::stol(m[3]);
  if (index >= count) throw Error(what + " " + request + ": this machine has " + visible_devices(count) + env);
  return c10::Device(c10::kCUDA, c10::DeviceIndex(index));
}

double device_memory_bytes(const c10::Device& device) {
#ifdef MLIP_HAVE_CUDA
  if (device.is_cuda()) return double(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  (void)device;
  return 0.0;
}

double reserved_memory_bytes(const c10::Device& device) {
#ifdef MLIP_HAVE_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    // Index 0: StatType::AGGREGATE (small and large segments together; its namespace moved
    // between LibTorch versions, its value did not).
    return double(stats.reserved_bytes[0].current);
  }
#endif
  (void)device;
  return 0.0;
}

std::string describe_device(const c10::Device& device) {
  if (!device.is_cuda()) return device.str();
#ifdef MLIP_HAVE_CUDA
  const auto* p = at::cuda::getDeviceProperties(device.index());
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", double(p->totalGlobalMem) / double(1ull << 30));
  return device.str() + " (" + std::string(p->name) + ", " + gib + " GiB)";
#else
  return device.str();
#endif
}

}  // namespace mlip::train
