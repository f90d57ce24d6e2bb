#include "models/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "byte_size.h"
#include "error.h"

namespace mlip::models {

double MemoryEstimate::total() const {
  double sum = 0.0;
  for (const MemoryPart& p : parts) sum += p.bytes;
  return sum;
}

std::string list_text(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t k = 0; k < values.size(); ++k) out += (k ? ", " : "") + std::to_string(values[k]);
  return out + "]";
}

void check_memory(const MemoryEstimate& estimate, double available_bytes, const BatchSizes& batch,
                  const std::string& available_what) {
  const double total = estimate.total();
  if (!(available_bytes > 0.0) || estimate.parts.empty() || total <= available_bytes) return;
  const auto largest = std::max_element(estimate.parts.begin(), estimate.parts.end(),
                                        [](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });
  std::ostringstream msg;
  msg << largest->settings << ": training would need about " << bytes_in_words(total) << " of memory, "
      << bytes_in_words(largest->bytes) << " of it for " << largest->what << " (for a batch of " << batch.frames
      << " frame" << (batch.frames == 1 ? "" : "s") << " of " << batch.atoms << " atoms of " << batch.system
      << "), and " << bytes_in_words(available_bytes) << " " << available_what
      << "; is the size right? (docs/training.md \"Memory checked before the first allocation\")";
  throw Error(msg.str());
}

}  // namespace mlip::models
