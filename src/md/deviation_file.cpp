#include "md/deviation_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "error.h"
#include "models/committee_deviation.h"

namespace mlip::md {

DeviationFile::DeviationFile(const DeviationSettings& settings, MPI_Comm world) : settings_(settings), world_(world) {
  MPI_Comm_rank(world_, &rank_);
  int opened = 1;
  std::string reason;
  if (rank_ == 0) {
    file_ = std::fopen(settings_.out_file.c_str(), "w");
    if (file_ == nullptr) {
      opened = 0;
      reason = std::strerror(errno);
    } else {
      const std::string line = models::deviation_columns_line(false, settings_.atomic);
      std::fputs(line.c_str(), file_);
      std::fflush(file_);
    }
  }
  MPI_Bcast(&opened, 1, MPI_INT, 0, world_);
  if (!opened)
    throw Error("out_file " + settings_.out_file + ": cannot write the model deviation file" +
                (reason.empty() ? std::string() : " (" + reason + ")"));
}

DeviationFile::~DeviationFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void DeviationFile::write_step(int64_t step, int64_t natoms, int64_t nlocal, const double* forces, size_t models,
                               const int64_t* ids, const double* virials) {
  // Forces: each owned atom's deviation here, then the largest, smallest and sum over all ranks.
  std::vector<double> mine(static_cast<size_t>(nlocal));
  for (int64_t i = 0; i < nlocal; ++i)
    mine[size_t(i)] = models::atom_force_deviation(forces + size_t(i) * models * 3, models, settings_.relative);
  double local[3] = {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), 0.0};
  for (double d : mine) {
    local[0] = std::max(local[0], d);
    local[1] = std::min(local[1], d);
    local[2] += d;
  }
  double largest = 0, smallest = 0, sum = 0;
  MPI_Reduce(&local[0], &largest, 1, MPI_DOUBLE, MPI_MAX, 0, world_);
  MPI_Reduce(&local[1], &smallest, 1, MPI_DOUBLE, MPI_MIN, 0, world_);
  MPI_Reduce(&local[2], &sum, 1, MPI_DOUBLE, MPI_SUM, 0, world_);
  // The virial: each model's sum over ranks, per atom.
  std::vector<double> virial_sums(models * 9, 0.0);
  MPI_Reduce(virials, virial_sums.data(), int(models * 9), MPI_DOUBLE, MPI_SUM, 0, world_);
  // With `atomic`: every atom's deviation, gathered on rank 0 and put in id order.
  std::vector<double> atoms;
  if (settings_.atomic) {
    const int count = int(nlocal);
    int ranks = 1;
    MPI_Comm_size(world_, &ranks);
    std::vector<int> counts(static_cast<size_t>(ranks)), offsets(static_cast<size_t>(ranks), 0);
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world_);
    int total = 0;
    if (rank_ == 0)
      for (int r = 0; r < ranks; ++r) {
        offsets[size_t(r)] = total;
        total += counts[size_t(r)];
      }
    std::vector<double> all_deviations(size_t(std::max(total, 1)));
    std::vector<long long> all_ids(size_t(std::max(total, 1))), my_ids(static_cast<size_t>(nlocal));
    for (int64_t i = 0; i < nlocal; ++i) my_ids[size_t(i)] = static_cast<long long>(ids[i]);
    MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all_deviations.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0,
                world_);
    MPI_Gatherv(my_ids.data(), count, MPI_LONG_LONG, all_ids.data(), counts.data(), offsets.data(), MPI_LONG_LONG, 0,
                world_);
    if (rank_ == 0) {
      std::vector<size_t> order(static_cast<size_t>(total));
      std::iota(order.begin(), order.end(), size_t(0));
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return all_ids[a] < all_ids[b]; });
      atoms.reserve(size_t(total));
      for (size_t k : order) atoms.push_back(all_deviations[k]);
    }
  }
  if (rank_ != 0) return;
  const double per_atom = natoms > 0 ? 1.0 / double(natoms) : 0.0;
  for (double& v : virial_sums) v *= per_atom;
  const models::VirialDeviation v = models::virial_deviation(virial_sums.data(), models, settings_.relative_v);
  if (natoms == 0) largest = smallest = 0;
  const std::string row = models::deviation_row(step, {v.max, v.min, v.avg, largest, smallest, sum * per_atom}, atoms);
  std::fputs(row.c_str(), file_);
  std::fflush(file_);  // loop tools read the file while the MD runs
}

}  // namespace mlip::md
