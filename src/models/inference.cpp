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

void Inference::check_charge_coupling(const Request& request) const {
  const bool charges = inputs().charges;
  if (charges && request.charge_coupling == nullptr)
    throw Error(describe() + ": the model has charges (model.long_range): the request needs the long-range term's "
                "coupling (docs/lammps.md \"Long range across ranks\")");
  if (!charges && request.charge_coupling != nullptr)
    throw Error(describe() + ": the model has no charges (no model.long_range), but the request gives a charge "
                "coupling");
}

}  // namespace mlip::models
