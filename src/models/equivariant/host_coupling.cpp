#include "models/equivariant/host_coupling.h"

#include <mutex>
#include <string>

#include "error.h"

namespace mlip::models {
namespace {

using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

/// One converted pair: the tensors it came from (weakly: the cache does not keep them alive),
/// their versions, and the arrays.
struct Entry {
  const c10::TensorImpl* terms_impl;
  const c10::TensorImpl* coefficients_impl;
  WeakTensor terms, coefficients;
  int64_t terms_version, coefficients_version;
  std::shared_ptr<const HostCoupling> host;
};

std::shared_ptr<const HostCoupling> convert(const torch::Tensor& terms, const torch::Tensor& coefficients) {
  if (terms.dim() != 2 || coefficients.dim() != 1 || coefficients.size(0) != terms.size(0))
    throw Error("coupling table: expected terms [T, columns] and coefficients [T], got " + c10::str(terms.sizes()) +
                " and " + c10::str(coefficients.sizes()));
  auto host = std::make_shared<HostCoupling>();
  const auto t = terms.to(torch::kCPU, torch::kInt64).contiguous();
  const auto c = coefficients.to(torch::kCPU, torch::kFloat64).contiguous();
  host->columns = terms.size(1);
  host->terms.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  host->coefficients.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  return host;
}

}  // namespace

std::shared_ptr<const HostCoupling> host_coupling(const torch::Tensor& terms, const torch::Tensor& coefficients) {
  static std::mutex mutex;
  static std::vector<Entry> cache;
  const auto* ti = terms.unsafeGetTensorImpl();
  const auto* ci = coefficients.unsafeGetTensorImpl();
  const int64_t tv = int64_t(terms._version()), cv = int64_t(coefficients._version());
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : cache)
      // The same live tensors, unchanged (an address reused by a new tensor has the old weak
      // pointer expired).
      if (e.terms_impl == ti && e.coefficients_impl == ci && !e.terms.expired() && !e.coefficients.expired() &&
          e.terms_version == tv && e.coefficients_version == cv)
        return e.host;
  }
  auto host = convert(terms, coefficients);
  std::lock_guard<std::mutex> lock(mutex);
  // Drop the entries of tables that are gone, then keep this one.
  std::vector<Entry> live;
  for (auto& e : cache)
    if (!e.terms.expired() && !e.coefficients.expired()) live.push_back(std::move(e));
  cache = std::move(live);
  cache.push_back({ti, ci, WeakTensor(terms.getIntrusivePtr()), WeakTensor(coefficients.getIntrusivePtr()), tv, cv, host});
  return host;
}

}  // namespace mlip::models
