#include "vision/cpu/conv1x1.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "vision/core/error.h"
#include "vision/cpu/parallel.h"

namespace vision::cpu {

namespace {

constexpr int kPanel = 64;      // output channels per packed panel: four 16-float vectors
constexpr int kMaxRows = 6;     // pixels per register tile: 6 × 4 accumulators
constexpr int64_t kBlock = 96;  // pixels per thread work item (16 tiles): its rows stay in L1/L2 across the panels

#define VISION_AVX512 __attribute__((target("avx512f,fma")))
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge source of their unmasked forms, which
// -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// x · sigmoid(x), with e = e^-|x| ≤ 1 so that nothing overflows: sigmoid(x) = 1 / (1 + e) for x ≥ 0 and e / (1 + e)
// below. e = 2^n · p(r) (n = round(-|x|·log2 e), r = -|x| - n·ln 2 in two parts, p the degree-7 Taylor polynomial of
// e^r, |r| ≤ ln2/2: truncation < 5e-9 relative), scaled by vscalefps; the reciprocal by vrcp14ps and one Newton step
// (relative error ≈ 2^-28). Where |x| ≥ 103.9, e^-|x| is below the smallest subnormal float: e = 0 there (the exponent
// is capped first, so that p stays finite). A NaN input stays NaN through the last product.
VISION_AVX512 inline __m512 silu16(__m512 v) {
  const __m512 a = _mm512_abs_ps(v), one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), a), _mm512_set1_ps(-103.9f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);  // ln 2's leading bits, exact in n·hi
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);   // and the rest
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, one);
  p = _mm512_fmadd_ps(p, r, one);
  const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(103.9f), _CMP_LT_OQ), _mm512_scalef_ps(p, n));
  const __m512 d = _mm512_add_ps(e, one);
  const __m512 r0 = _mm512_rcp14_ps(d);
  const __m512 inv = _mm512_fmadd_ps(r0, _mm512_fnmadd_ps(d, r0, one), r0);
  const __m512 sig = _mm512_mask_mul_ps(inv, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), e, inv);
  return _mm512_mul_ps(v, sig);
}

// One register tile: ROWS pixels × VECS·16 channels of one panel (`valid` of them real: the last vector's tail is
// masked). x: the tile's first pixel row (cin floats a pixel); panel: [cin][64]; y: the tile's first output row at
// the panel's first channel (ldy floats a pixel).
template <int ROWS, int VECS>
VISION_AVX512 void tile(const float* x, int64_t cin, const float* panel, const float* bias, float* y, int64_t ldy,
                        int valid, bool silu) {
  __mmask16 mask[VECS];
  __m512 acc[ROWS][VECS];
#pragma GCC unroll 4
  for (int j = 0; j < VECS; ++j) {
    const int n = std::clamp(valid - 16 * j, 0, 16);
    mask[j] = static_cast<__mmask16>((1u << n) - 1u);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask[j], bias + 16 * j) : _mm512_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < ROWS; ++i) acc[i][j] = b;
  }
  for (int64_t k = 0; k < cin; ++k) {
    __m512 w[VECS];
#pragma GCC unroll 4
    for (int j = 0; j < VECS; ++j) w[j] = _mm512_loadu_ps(panel + k * kPanel + 16 * j);
#pragma GCC unroll 6
    for (int i = 0; i < ROWS; ++i) {
      const __m512 xv = _mm512_set1_ps(x[i * cin + k]);
#pragma GCC unroll 4
      for (int j = 0; j < VECS; ++j) acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < ROWS; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < VECS; ++j) {
      const __m512 v = silu ? silu16(acc[i][j]) : acc[i][j];
      if (mask[j] == 0xFFFF)
        _mm512_storeu_ps(y + i * ldy + 16 * j, v);
      else
        _mm512_mask_storeu_ps(y + i * ldy + 16 * j, mask[j], v);
    }
}

using TileFn = void (*)(const float*, int64_t, const float*, const float*, float*, int64_t, int, bool);

template <int ROWS>
constexpr TileFn tile_for(int vecs) {
  return vecs == 1 ? &tile<ROWS, 1> : vecs == 2 ? &tile<ROWS, 2> : vecs == 3 ? &tile<ROWS, 3> : &tile<ROWS, 4>;
}

TileFn tile_fn(int rows, int vecs) {
  switch (rows) {
    case 1: return tile_for<1>(vecs);
    case 2: return tile_for<2>(vecs);
    case 3: return tile_for<3>(vecs);
    case 4: return tile_for<4>(vecs);
    case 5: return tile_for<5>(vecs);
    default: return tile_for<6>(vecs);
  }
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

bool conv1x1_available() {
  static const bool available = [] {
    const char* env = std::getenv("VISION_CPU_CONV1X1");
    return cpu_has_avx512() && !(env && std::strcmp(env, "0") == 0);
  }();
  return available;
}

std::vector<float> conv1x1_pack(const float* w, int64_t cout, int64_t cin) {
  VISION_CHECK(cout > 0 && cin > 0, "conv1x1_pack: {} output and {} input channels", cout, cin);
  const int64_t panels = (cout + kPanel - 1) / kPanel;
  std::vector<float> packed(static_cast<size_t>(panels * cin * kPanel), 0.0f);
  for (int64_t co = 0; co < cout; ++co)
    for (int64_t k = 0; k < cin; ++k)
      packed[static_cast<size_t>(((co / kPanel) * cin + k) * kPanel + co % kPanel)] = w[co * cin + k];
  return packed;
}

void conv1x1_nhwc(const float* x, const float* packed, const float* bias, float* y, int64_t pixels, int64_t cin,
                  int64_t cout, bool silu) {
  VISION_CHECK(conv1x1_available(), "conv1x1_nhwc: this CPU has no AVX-512 F");
  const int64_t panels = (cout + kPanel - 1) / kPanel, blocks = (pixels + kBlock - 1) / kBlock;
  parallel_for(
      blocks,
      [&](int64_t blk) {
        const int64_t p0 = blk * kBlock, p1 = std::min(pixels, p0 + kBlock);
        for (int64_t pn = 0; pn < panels; ++pn) {
          const int valid = static_cast<int>(std::min<int64_t>(kPanel, cout - pn * kPanel));
          const int vecs = (valid + 15) / 16;
          const float* panel = packed + pn * cin * kPanel;
          const float* b = bias ? bias + pn * kPanel : nullptr;
          for (int64_t p = p0; p < p1; p += kMaxRows) {
            const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, p1 - p));
            tile_fn(rows, vecs)(x + p * cin, cin, panel, b, y + p * cout + pn * kPanel, cout, valid, silu);
          }
        }
      },
      pixels * cin * cout / 16);
}

#pragma GCC diagnostic pop
#undef VISION_AVX512

}  // namespace vision::cpu
