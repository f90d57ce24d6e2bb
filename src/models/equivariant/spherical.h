#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mlip::models {

/// Highest angular momentum supported by the spherical harmonics and coupling coefficients.
constexpr int64_t kMaxL = 3;

/// TorchScript source of the method
///   def spherical_harmonics(self, d: Tensor, l_max: int) -> Tensor
/// d: [n, 3] unit vectors (any float dtype); returns [n, (l_max+1)^2], the real spherical
/// harmonics of l = 0..l_max concatenated (block l holds m = -l..l), in component normalisation:
/// Y_00 = 1 and sum_m Y_lm(d)^2 = 2l + 1 on the unit sphere. Basis (as the usual real
/// harmonics, times sqrt(4 pi)): l = 1 is sqrt(3) (y, z, x). Polynomials, so smooth in d.
/// The equivariant model includes this source, so a frozen model needs nothing else.
const std::string& spherical_harmonics_source();

/// Evaluates spherical_harmonics_source() (for C++ callers and tests). unit: [n, 3].
at::Tensor spherical_harmonics(const at::Tensor& unit, int64_t l_max);

/// The matrix D_l(R) [2l+1, 2l+1] (float64) of a rotation R [3, 3] in the basis above:
/// Y_l(R d) = D_l(R) Y_l(d) for every unit d. Found by least squares over fixed directions.
at::Tensor wigner_d(int64_t l, const at::Tensor& rotation);

/// Real coupling (Wigner-3j) coefficients C [2l1+1, 2l2+1, 2l3+1] (float64) in the basis
/// above: the tensor invariant under D_l1(R) x D_l2(R) x D_l3(R) for every rotation, with
/// sum C^2 = 1 and its sign fixed (its first entry of magnitude > 1e-8 is positive). Computed
/// as the null space of (D1 x D2 x D3 - 1) for fixed generic rotations. Throws mlip::Error
/// unless |l1 - l2| <= l3 <= l1 + l2 and all l <= kMaxL.
at::Tensor wigner_3j(int64_t l1, int64_t l2, int64_t l3);

}  // namespace mlip::models
