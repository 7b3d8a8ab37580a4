// Structured output's token mask, applied to a step's rows of logits in place.
//
// xgrammar's bitmask is int32 words, bit j of word w allowing token 32 w + j.
// Its own CPU kernel tests every token's bit; here a word of all ones (most of
// the vocabulary inside a free JSON string) is skipped, and only the other
// words are read bit by bit, so a row costs about its number of words. Rows are
// split over the ATen thread pool. Built with paged_attention.cpp by native.py;
// registered as torch.ops.blendserve.apply_token_mask.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace {

void apply_token_mask(at::Tensor logits, const at::Tensor& bitmask, const at::Tensor& rows, int64_t vocab) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
              "float32 contiguous logits [S, V]");
  TORCH_CHECK(bitmask.dim() == 2 && bitmask.scalar_type() == at::kInt && bitmask.is_contiguous(),
              "int32 contiguous bitmask [S, W]");
  TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == at::kLong && rows.is_contiguous(), "int64 rows [R]");
  const int64_t width = logits.size(1), words = bitmask.size(1), n = rows.size(0);
  TORCH_CHECK(0 < vocab && vocab <= width && (vocab + 31) / 32 <= words, "vocab exceeds the logits or the bitmask");
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(0 <= r[i] && r[i] < logits.size(0) && r[i] < bitmask.size(0), "row ", r[i], " out of range");
  float* out = logits.data_ptr<float>();
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(bitmask.data_ptr<int32_t>());
  const float ninf = -std::numeric_limits<float>::infinity();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = out + r[i] * width;
      const uint32_t* mask = bits + r[i] * words;
      for (int64_t lo = 0, w = 0; lo < vocab; lo += 32, ++w) {
        const uint32_t m = mask[w];
        if (m == 0xFFFFFFFFu) continue;
        const int64_t hi = std::min<int64_t>(lo + 32, vocab);
        if (m == 0) {
          std::fill(row + lo, row + hi, ninf);
          continue;
        }
        for (int64_t t = lo; t < hi; ++t)
          if (!((m >> (t - lo)) & 1u)) row[t] = ninf;
      }
    }
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(blendserve, m) {
  m.def("apply_token_mask(Tensor(a!) logits, Tensor bitmask, Tensor rows, int vocab) -> ()");
  m.impl("apply_token_mask", c10::DispatchKey::CPU, &apply_token_mask);
}
