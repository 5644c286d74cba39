#include "vision/cpu/conv_nhwc.h"

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

// One register tile: ROWS output pixels × VECS·16 channels of one panel (`valid` of them real: the last vector's tail
// is masked). Tap t reads pixel i's input at tap_x[t] + i·xs (cin floats) and the panel's weights at tap_w[t]
// ([cin][64]); y: the tile's first output pixel at the panel's first channel (ldy floats a pixel).
template <int ROWS, int VECS>
VISION_AVX512 void tile(const float* const* tap_x, const float* const* tap_w, int taps, int64_t xs, int64_t cin,
                        const float* bias, float* y, int64_t ldy, int valid, bool silu) {
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
  for (int t = 0; t < taps; ++t) {
    const float* x = tap_x[t];
    const float* panel = tap_w[t];
    for (int64_t k = 0; k < cin; ++k) {
      __m512 w[VECS];
#pragma GCC unroll 4
      for (int j = 0; j < VECS; ++j) w[j] = _mm512_loadu_ps(panel + k * kPanel + 16 * j);
#pragma GCC unroll 6
      for (int i = 0; i < ROWS; ++i) {
        const __m512 xv = _mm512_set1_ps(x[i * xs + k]);
#pragma GCC unroll 4
        for (int j = 0; j < VECS; ++j) acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);
      }
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

using TileFn = void (*)(const float* const*, const float* const*, int, int64_t, int64_t, const float*, float*, int64_t,
                        int, bool);

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

// VISION_CPU_CONV, read once: "0" (oneDNN only), "all" (these kernels wherever they apply) or anything else.
const char* conv_mode() {
  static const char* mode = [] {
    const char* env = std::getenv("VISION_CPU_CONV");
    return env ? env : "";
  }();
  return mode;
}

}  // namespace

bool conv_nhwc_available() {
  static const bool available = cpu_has_avx512() && std::strcmp(conv_mode(), "0") != 0;
  return available;
}

bool conv_nhwc_supports(int64_t kernel, int64_t stride, int64_t dilation, int64_t groups) {
  return kernel % 2 == 1 && kernel <= 7 && stride >= 1 && stride <= 2 && dilation == 1 && groups == 1;
}

bool conv_nhwc_prefers(int64_t kernel, int64_t cin, int64_t cout, int64_t out_height, int64_t out_width) {
  if (std::strcmp(conv_mode(), "all") == 0) return true;
  return out_height * out_width >= 80 * 80 && (kernel == 1 || (cin <= 64 && cout >= 32 && out_width >= 80));
}

std::vector<float> conv_nhwc_pack(const float* w, int64_t cout, int64_t cin, int64_t k) {
  VISION_CHECK(cout > 0 && cin > 0 && k > 0, "conv_nhwc_pack: {} output, {} input channels, kernel {}", cout, cin, k);
  const int64_t panels = (cout + kPanel - 1) / kPanel, taps = k * k;
  std::vector<float> packed(static_cast<size_t>(panels * taps * cin * kPanel), 0.0f);
  for (int64_t co = 0; co < cout; ++co)
    for (int64_t ci = 0; ci < cin; ++ci)
      for (int64_t t = 0; t < taps; ++t)
        packed[static_cast<size_t>((((co / kPanel) * taps + t) * cin + ci) * kPanel + co % kPanel)] =
            w[(co * cin + ci) * taps + t];
  return packed;
}

void conv_nhwc(const float* x, const float* packed, const float* bias, float* y, const ConvNhwcShape& s, bool silu) {
  VISION_CHECK(conv_nhwc_available(), "conv_nhwc: this CPU has no AVX-512 F");
  VISION_CHECK(conv_nhwc_supports(s.kernel, s.stride, 1, 1), "conv_nhwc: kernel {} stride {} is not supported",
               s.kernel, s.stride);
  const int64_t cin = s.cin, cout = s.cout, k = s.kernel, st = s.stride, pad = k / 2, taps = k * k;
  const int64_t oh = s.out_height(), ow = s.out_width(), panels = (cout + kPanel - 1) / kPanel;
  const int64_t panel_floats = taps * cin * kPanel;
  if (k == 1 && st == 1) {  // a GEMM over the pixels: tiles of 6 consecutive pixels, 96 per work item
    const int64_t pixels = s.batch * s.height * s.width, blocks = (pixels + kBlock - 1) / kBlock;
    parallel_for(
        blocks,
        [&](int64_t blk) {
          const int64_t p0 = blk * kBlock, p1 = std::min(pixels, p0 + kBlock);
          for (int64_t pn = 0; pn < panels; ++pn) {
            const int valid = static_cast<int>(std::min<int64_t>(kPanel, cout - pn * kPanel));
            const float* panel = packed + pn * panel_floats;
            const float* b = bias ? bias + pn * kPanel : nullptr;
            for (int64_t p = p0; p < p1; p += kMaxRows) {
              const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, p1 - p));
              const float* xp = x + p * cin;
              tile_fn(rows, (valid + 15) / 16)(&xp, &panel, 1, cin, cin, b, y + p * cout + pn * kPanel, cout, valid,
                                               silu);
            }
          }
        },
        pixels * cin * cout / 16);
    return;
  }
  // k×k: one work item per output row. Output columns whose taps all lie inside the input go in tiles of 6; the
  // columns at the left and right borders one at a time, with the taps that fall outside left out (zero padding).
  const int64_t lo = std::min(ow, (pad + st - 1) / st);                                     // first interior column
  const int64_t hi = std::max(lo, std::min(ow, (s.width - 1 - (k - 1) + pad) / st + 1));  // one past the last
  parallel_for(
      s.batch * oh,
      [&](int64_t row) {
        const int64_t n = row / oh, oy = row % oh;
        const float* image = x + n * s.height * s.width * cin;
        float* out = y + row * ow * cout;
        const float* tap_x[49];
        const float* tap_w[49];
        for (int64_t pn = 0; pn < panels; ++pn) {
          const int valid = static_cast<int>(std::min<int64_t>(kPanel, cout - pn * kPanel));
          const int vecs = (valid + 15) / 16;
          const float* panel = packed + pn * panel_floats;
          const float* b = bias ? bias + pn * kPanel : nullptr;
          // The taps of output column ox (those inside the input when edge), then its tile.
          auto run = [&](int64_t ox, int rows, bool edge) {
            int used = 0;
            for (int64_t ky = 0; ky < k; ++ky) {
              const int64_t iy = oy * st + ky - pad;
              if (iy < 0 || iy >= s.height) continue;
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t ix = ox * st + kx - pad;
                if (edge && (ix < 0 || ix >= s.width)) continue;
                tap_x[used] = image + (iy * s.width + ix) * cin;
                tap_w[used] = panel + (ky * k + kx) * cin * kPanel;
                ++used;
              }
            }
            tile_fn(rows, vecs)(tap_x, tap_w, used, st * cin, cin, b, out + ox * cout + pn * kPanel, cout, valid, silu);
          };
          for (int64_t ox = 0; ox < lo; ++ox) run(ox, 1, true);
          for (int64_t ox = lo; ox < hi; ox += kMaxRows) run(ox, static_cast<int>(std::min<int64_t>(kMaxRows, hi - ox)), false);
          for (int64_t ox = hi; ox < ow; ++ox) run(ox, 1, true);
        }
      },
      s.batch * oh * ow * cin * cout * taps / 16);
}

#pragma GCC diagnostic pop
#undef VISION_AVX512

}  // namespace vision::cpu
