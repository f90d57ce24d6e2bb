#include "models/inference.h"

#include "error.h"

namespace mlip::models {

void Inference::refuse(const Request& request) const {
  std::string what = request.neighbors ? "a neighbour list"
                     : request.exchange ? "a graph with features exchanged between ranks"
                     : request.graph    ? "a graph of atoms"
                                        : "a request without atoms";
  const InferenceInputs in = inputs();
  std::string accepted;
  if (in.neighbor_list) accepted = "a neighbour list";
  if (in.graph) accepted += std::string(accepted.empty() ? "" : " or ") + "a graph of atoms";
  if (in.exchange_width > 0) accepted += " (with features exchanged between ranks)";
  throw Error(describe() + ": evaluates " + accepted + ", not " + what);
}

}  // namespace mlip::models
