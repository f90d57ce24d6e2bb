#pragma once

#include <string>
#include <vector>

namespace mlip::archive {

/// A path a command reads, for the check below.
struct ReadPath {
  /// The path as given (a file or a folder; a folder is a data system or a training folder).
  std::string path;
  /// What the command reads there, in words for messages: "the model", "the trajectory".
  std::string holds;
};

/// Throws mlip::Error when `output`, a file the command is about to write, is one of the files it
/// reads (docs/robustness.md "An output is never one of the inputs"), so that no command replaces
/// its own input: `model-devi -o b.pt: that is the model b.pt, which this command reads; expected
/// another file name (b.pt is left as it is)`. Called before anything is written.
///
/// The same file by any name counts: the same path, `./b.pt`, a symbolic or a hard link (the
/// file's device and inode are compared). An input that is a folder (a DeePMD system) counts
/// through the files its reader reads there: an output inside it named `*.npy`, `*.raw` or
/// `nopbc` that already exists. An output that does not exist yet, or that is not a regular file
/// (/dev/null, a FIFO: written into as a stream, never replaced), is no input. `given` names the
/// output in messages: the option and the path ("model-devi -o b.pt").
void check_output_is_not_an_input(const std::string& output, const std::string& given,
                                  const std::vector<ReadPath>& inputs);

/// Throws mlip::Error when two outputs of one command are the same file (one would replace the
/// other): `model-devi --candidates out.txt: that is also -o out.txt; expected another file name`.
/// `first_given`, `second_given`: each output's option and path. Paths that do not exist yet are
/// compared as given, after making them absolute and lexically normal.
void check_outputs_differ(const std::string& first, const std::string& first_given, const std::string& second,
                          const std::string& second_given);

}  // namespace mlip::archive
