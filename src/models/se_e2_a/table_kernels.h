#pragma once

#include <cstdint>

namespace mlip::models {

// The compressed se_e2_a's inference kernels (docs/se_e2_a.md "Compression: the embedding nets
// as tables", "The fused lookup"): the table lookup fused with the product against the pairs'
// normalised rows, so that the embedding's outputs G [pairs, M] are never stored.
//
// Common arguments, for the q pairs of one centre atom and one embedding net:
//   table     [intervals, 6, M] the net's quintic coefficients (build_embedding_table), dtype R
//   outputs   M
//   interval  [q] the table interval of each pair's input ŝ (TableGrid::locate); a negative entry
//             marks a pair the table does not cover: the kernels skip it (the caller adds it)
//   offset    [q] ŝ - node(interval), dimensionless
//   rows      [q, 4] the pairs' normalised rows R̂ (column 0 is ŝ), dimensionless

/// t_matrix [4, M] += sum_p rows[p]^T G(ŝ_p): the pairs' share of T_i = R̂^T G.
void table_embed_accumulate(const double* table, int64_t outputs, const int64_t* interval, const double* offset,
                            const double* rows, int64_t q, double* t_matrix);
void table_embed_accumulate(const float* table, int64_t outputs, const int64_t* interval, const float* offset,
                            const float* rows, int64_t q, float* t_matrix);

/// The adjoint of table_embed_accumulate, given grad_t [4, M] = dE/dT_i: for each covered pair,
/// grad_rows[p, a] = sum_k G_k(ŝ_p) grad_t[a, k] (dE/dR̂ through the product) and
/// grad_s[p] = sum_k (sum_a rows[p, a] grad_t[a, k]) G'_k(ŝ_p) (dE/dŝ through the net).
/// Uncovered pairs' entries are left as they are.
void table_embed_adjoint(const double* table, int64_t outputs, const int64_t* interval, const double* offset,
                         const double* rows, int64_t q, const double* grad_t, double* grad_rows, double* grad_s);
void table_embed_adjoint(const float* table, int64_t outputs, const int64_t* interval, const float* offset,
                         const float* rows, int64_t q, const float* grad_t, float* grad_rows, float* grad_s);

}  // namespace mlip::models
