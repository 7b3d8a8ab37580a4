// Decode attention straight from the paged K/V pool: one query token per sequence.
//
// The torch path gathers every sequence's blocks into a padded batch (a copy of
// all the K/V the step reads) and then runs SDPA over the copy: three passes over
// the bytes that dominate a CPU decode step. Here each (sequence, kv head) reads
// its K and V once, in place, through its block table, for all the query heads
// that share that kv head (GQA), accumulating in float32 as torch's kernels do.
// Built by paged_attention.py with torch's extension loader; registered as
// torch.ops.blendserve.paged_decode.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/library.h>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <type_traits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

inline float to_f32(float x) { return x; }

inline float to_f32(c10::BFloat16 x) {
  uint32_t bits = uint32_t(x.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// e^x for x <= 0, to ~2 ulp: 2^(x log2 e) split into an integer power (the
// exponent bits) and a polynomial on [0, 1). Branch-free, so loops over it
// vectorize (std::exp does not without -ffast-math).
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  float t = x * 1.44269504088896341f;
  float n = std::floor(t);
  float f = t - n;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// q . k for bfloat16 rows with AVX512-BF16 (pairs multiplied exactly, summed in float32), where the
// CPU has it and the head dimension is a multiple of 32; else nullptr-free generic code below.
#if defined(__AVX512BF16__)
constexpr bool kBf16Dot = true;
inline float dot_bf16(const c10::BFloat16* a, const c10::BFloat16* b, int64_t D) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; d += 32)
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(a + d), (__m512bh)_mm512_loadu_si512(b + d));
  return _mm512_reduce_add_ps(acc);
}
#else
constexpr bool kBf16Dot = false;
inline float dot_bf16(const c10::BFloat16*, const c10::BFloat16*, int64_t) { return 0.f; }
#endif

// Blocks lie scattered over the pool, where the hardware prefetcher cannot follow: ask for the next
// block's cache lines while this one is computed.
template <typename T>
inline void prefetch(const T* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t i = 0; i < n * int64_t(sizeof(T)); i += 64) __builtin_prefetch(c + i);
}

// One (sequence, kv head): its G query heads against its n positions. DIM > 0 fixes the head
// dimension at compile time (the loops then unroll and vectorize without remainders).
template <typename T, int DIM>
void attend_one(const T* q, int64_t q_head, const T* kh, const T* vh, const int32_t* table, int64_t n,
                int64_t block_size, int64_t G, int64_t dim, float scale, T* out, float* qf, float* acc, float* row,
                std::vector<float>& scores, float* top, float* inv) {
  const int64_t D = DIM > 0 ? DIM : dim;
  scores.resize(G * n);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) qf[g * D + d] = to_f32(q[g * q_head + d]) * scale;
  std::fill(top, top + G, -std::numeric_limits<float>::infinity());
  const int64_t blocks = (n + block_size - 1) / block_size;
  prefetch(kh + int64_t(table[0]) * block_size * D, block_size * D);
  for (int64_t blk = 0, t = 0; blk < blocks; ++blk) {   // scores: each key converted once, for all G queries
    const T* key = kh + int64_t(table[blk]) * block_size * D;
    if (blk + 1 < blocks) prefetch(kh + int64_t(table[blk + 1]) * block_size * D, block_size * D);
    for (const int64_t stop = std::min(n, t + block_size); t < stop; ++t, key += D) {
      if constexpr (std::is_same_v<T, c10::BFloat16> && kBf16Dot && DIM % 32 == 0 && DIM > 0) {
        for (int64_t g = 0; g < G; ++g) {
          const float dot = dot_bf16(q + g * q_head, key, D) * scale;
          scores[g * n + t] = dot;
          top[g] = std::max(top[g], dot);
        }
        continue;
      }
      for (int64_t d = 0; d < D; ++d) row[d] = to_f32(key[d]);
      for (int64_t g = 0; g < G; ++g) {
        const float* qg = qf + g * D;
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < D; ++d) dot += qg[d] * row[d];
        scores[g * n + t] = dot;
        top[g] = std::max(top[g], dot);
      }
    }
  }
  prefetch(vh + int64_t(table[0]) * block_size * D, block_size * D);
  for (int64_t g = 0; g < G; ++g) {
    float* sg = scores.data() + g * n;
    const float m = top[g];
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t t = 0; t < n; ++t) {
      sg[t] = exp_nonpositive(sg[t] - m);
      sum += sg[t];
    }
    inv[g] = 1.f / sum;
  }
  std::fill(acc, acc + G * D, 0.f);
  for (int64_t blk = 0, t = 0; blk < blocks; ++blk) {
    const T* value = vh + int64_t(table[blk]) * block_size * D;
    if (blk + 1 < blocks) prefetch(vh + int64_t(table[blk + 1]) * block_size * D, block_size * D);
    for (const int64_t stop = std::min(n, t + block_size); t < stop; ++t, value += D) {
      for (int64_t d = 0; d < D; ++d) row[d] = to_f32(value[d]);
      for (int64_t g = 0; g < G; ++g) {
        const float p = scores[g * n + t];
        float* ag = acc + g * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) ag[d] += p * row[d];
      }
    }
  }
  for (int64_t g = 0; g < G; ++g)
    for (int64_t d = 0; d < D; ++d) out[g * D + d] = T(acc[g * D + d] * inv[g]);
}

template <typename T, int DIM>
void decode(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool, const at::Tensor& tables,
            const at::Tensor& lengths, int64_t block_size, double scale, at::Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), KH = k_pool.size(0), G = H / KH;
  const int64_t q_seq = q.stride(0), q_head = q.stride(1), pool_head = k_pool.stride(0), width = tables.size(1);
  const T* qp = q.data_ptr<T>();
  const T* kp = k_pool.data_ptr<T>();
  const T* vp = v_pool.data_ptr<T>();
  const int32_t* tp = tables.data_ptr<int32_t>();
  const int32_t* lp = lengths.data_ptr<int32_t>();
  T* op = out.data_ptr<T>();
  // Sequences differ in length: items are handed out one at a time, not split in equal ranges.
#pragma omp parallel num_threads(at::get_num_threads())
  {
    std::vector<float> qf(G * D), acc(G * D), row(D), scores, top(G), inv(G);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < B * KH; ++i) {
      const int64_t b = i / KH, h = i % KH;
      attend_one<T, DIM>(qp + b * q_seq + h * G * q_head, q_head, kp + h * pool_head, vp + h * pool_head,
                         tp + b * width, lp[b], block_size, G, D, float(scale), op + (b * H + h * G) * D,
                         qf.data(), acc.data(), row.data(), scores, top.data(), inv.data());
    }
  }
}

template <typename T>
void decode_any(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool, const at::Tensor& tables,
                const at::Tensor& lengths, int64_t block_size, double scale, at::Tensor& out) {
  switch (q.size(2)) {
    case 64: return decode<T, 64>(q, k_pool, v_pool, tables, lengths, block_size, scale, out);
    case 128: return decode<T, 128>(q, k_pool, v_pool, tables, lengths, block_size, scale, out);
    default: return decode<T, 0>(q, k_pool, v_pool, tables, lengths, block_size, scale, out);
  }
}

// q [B, H, D] (any strides, last dim dense); k_pool, v_pool [KH, slots, D] dense; tables [B, W] int32 block
// ids; lengths [B] int32, the positions each sequence attends to (its new token's K/V already in the pool).
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                        const at::Tensor& tables, const at::Tensor& lengths, int64_t block_size, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_pool.dim() == 3 && q.stride(2) == 1, "q [B, H, D], pools [KH, slots, D]");
  TORCH_CHECK(k_pool.is_contiguous() && v_pool.is_contiguous() && k_pool.sizes() == v_pool.sizes(),
              "dense, equal K and V pools");
  TORCH_CHECK(q.size(1) % k_pool.size(0) == 0 && q.size(2) == k_pool.size(2), "heads and head_dim");
  TORCH_CHECK(q.scalar_type() == k_pool.scalar_type() && k_pool.scalar_type() == v_pool.scalar_type(),
              "q and the pools in one dtype");
  TORCH_CHECK(tables.scalar_type() == at::kInt && lengths.scalar_type() == at::kInt && tables.is_contiguous() &&
              lengths.is_contiguous() && tables.size(0) == q.size(0) && lengths.size(0) == q.size(0),
              "int32 tables [B, W] and lengths [B]");
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2)}, q.options());
  if (q.scalar_type() == at::kBFloat16)
    decode_any<c10::BFloat16>(q, k_pool, v_pool, tables, lengths, block_size, scale, out);
  else if (q.scalar_type() == at::kFloat)
    decode_any<float>(q, k_pool, v_pool, tables, lengths, block_size, scale, out);
  else
    TORCH_CHECK(false, "bfloat16 or float32");
  return out;
}

}  // namespace

TORCH_LIBRARY(blendserve, m) {
  m.def("paged_decode(Tensor q, Tensor k_pool, Tensor v_pool, Tensor tables, Tensor lengths, int block_size, "
        "float scale) -> Tensor");
  m.impl("paged_decode", c10::DispatchKey::CPU, &paged_decode);
}
