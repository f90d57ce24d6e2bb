// Declarations that Debian's LAMMPS headers (liblammps-dev 20220106) name but do not ship: their
// utils.h and error.h include "fmt/format.h" (LAMMPS' bundled copy, absent from the package) for
// formatting templates. mlip calls only LAMMPS' std::string overloads (Error::all/one,
// utils::logmesg), so these templates are never instantiated and a declaration of each name is
// enough for the headers to compile (docs/lammps.md "Building").
#pragma once

#include <string_view>

namespace fmt {
using string_view = std::string_view;
struct format_args {};
template <typename... Args, typename... Given>
format_args make_args_checked(const Given&...);
}  // namespace fmt
