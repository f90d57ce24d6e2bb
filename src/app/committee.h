#pragma once

#include <string>

#include "train/trainer.h"

namespace mlip::app {

/// `mlip train input.yaml --committee N`: N models for active learning that differ only in
/// their seeds (docs/training.md "A committee of models"). Member k trains into
/// `<output>/model_k` with seed offset k (train::TrainOptions::seed_offset), so member 0 is the
/// plain run of the same input. `--member k` trains that member alone, in this process; without
/// it, this process runs every member as a child process of its own executable, J at a time.

/// The committee options of `mlip train`.
struct CommitteeRequest {
  int size = 0;     ///< --committee N; 0: not a committee
  int member = -1;  ///< --member k (0 <= k < N); -1: all members, as child processes
  int jobs = 0;     ///< --committee-jobs J; 0: min(N, usable cores)
};

/// The folder of member `member`: `<output_dir>/model_<member>`.
std::string member_folder(const std::string& output_dir, int member);

/// What member `member` restarts or starts from, given `--restart` or `--init-model` `path`:
/// `<path>/model_<member>` when that folder exists (a committee's own folder), else `path` (one
/// model for every member).
std::string member_source(const std::string& path, int member);

/// Member `member`'s training options made from the committee's: the output folder
/// member_folder(), the sources of --restart and --init-model by member_source(), the
/// --step-times file with `.model_<member>` before its extension (a FIFO or a device is kept as
/// it is), and the seed offset `member`.
train::TrainOptions member_options(const train::TrainOptions& committee, int member);

/// Checks, before any member starts, that every member's --restart or --init-model source
/// (member_source) is a checkpoint or a training folder holding one. Throws mlip::Error naming the
/// member, e.g. `model_2: --init-model run: run: a folder without a 'checkpoint' pointer file ...`.
void check_member_sources(const train::TrainOptions& committee, int size);

/// The CPUs the members share: OMP_NUM_THREADS when it is set (as the trainer reads it), else
/// those of this process's affinity mask (taskset, Slurm), at least 1.
int usable_cores();

/// How a committee runs: `jobs` members at a time, each with `threads` threads.
struct CommitteePlan {
  int jobs = 1;
  int threads = 1;
};

/// The plan for `size` members on `cores` CPUs: `jobs_asked` (--committee-jobs) members at a
/// time, or min(size, cores) when it is 0, never more than `size`; each with max(1, cores / jobs)
/// threads.
CommitteePlan plan_committee(int size, int jobs_asked, int cores);

/// What the parent process of a committee passes to its members.
struct CommitteeLaunch {
  std::string input;            ///< the training input, as given
  int size = 0;                 ///< N
  train::TrainOptions options;  ///< the committee's options as given (-o, --restart, ...)
  std::string lcurve_name;      ///< training.disp_file, read for each member's last step
  CommitteePlan plan;
};

/// Runs the members as child processes of this executable (`train <input> --committee N
/// --member k -o <output> ...`, OMP_NUM_THREADS set to the plan's threads), each writing its
/// standard output and error to `<output>/model_k/train.log`, `plan.jobs` at a time. Prints a
/// line as each member starts and ends (exit status, wall time, last step), the end of a failed
/// member's log, and a summary. SIGINT and SIGTERM are forwarded to the running members (which
/// save a checkpoint and stop); members not yet started are not started. Returns 0 when every
/// member succeeded, 130 or 143 after SIGINT or SIGTERM, else 1. Holds the output folder's lock
/// (archive::RunLock) meanwhile. Throws mlip::Error when another mlip run holds it or a member's
/// folder cannot be made.
int run_committee(const CommitteeLaunch& launch);

}  // namespace mlip::app
