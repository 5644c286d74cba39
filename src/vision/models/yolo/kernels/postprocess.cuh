// Postprocess — YOLO26's detections on the GPU, the whole batch in a fixed number of launches with no host round trip
// (postprocess.h defines the results; the CPU twins there select the same rows bit for bit, through the same
// postprocess_math.cuh).
//   End-to-end: postprocess_e2e_anchor_keys (every anchor's max-class ranking key) → postprocess_e2e_select (one CTA
//   per image: radix-select the top k anchors, their k × nc pair keys, radix-select the top k pairs, bitonic sort,
//   filters, rows).
//   NMS: postprocess_nms_candidates (the anchors that pass conf and the class filter, compacted) → postprocess_nms_rank
//   (each candidate's rank by counting, scattered into score order) → postprocess_nms_select (one CTA per image:
//   greedy class-aware suppression tile by tile against the kept boxes, then within the tile through an IoU bitmask).
// Ranking keys (u64): high 32 bits the logit in an order-preserving encoding (NaN as −∞, −0 as +0), low 32 bits
// ~index, so a larger key ranks first and equal logits go to the lower index (anchor, or anchor · nc + class).
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/postprocess_math.cuh"

namespace vision::models::yolo::kernels {

namespace pp {

constexpr int kKeyThreadsX = 32;  // anchors per CTA of the key kernels
constexpr int kKeyThreadsY = 8;   // class slices per anchor
constexpr int kSelectThreads = 1024;
constexpr int kRankThreads = 256;
constexpr int kNmsTile = 256;  // candidates per NMS tile = threads of postprocess_nms_select

using pp_math::key_index;
using pp_math::key_logit;
using pp_math::rank_key;
using pp_math::sanitize;
using pp_math::sigmoid;

__device__ __forceinline__ float box_iou(float4 a, float4 b) {
  const float fa[4] = {a.x, a.y, a.z, a.w}, fb[4] = {b.x, b.y, b.z, b.w};
  return pp_math::box_iou(fa, fb);
}

// Box `anchor` of one image's boxes [4, A] in f32.
template <typename T>
__device__ __forceinline__ float4 load_box(const T* boxes_b, int64_t n_anchors, uint32_t anchor) {
  return make_float4(vk::to_float(boxes_b[anchor]), vk::to_float(boxes_b[n_anchors + anchor]),
                     vk::to_float(boxes_b[2 * n_anchors + anchor]), vk::to_float(boxes_b[3 * n_anchors + anchor]));
}

// The best class of anchor blockIdx.x · 32 + threadIdx.x of image blockIdx.y (the lowest on ties) and its sanitized
// logit, for a (32, 8) CTA: thread (x, y) scans classes y, y + 8, ...; the threads with y = 0 get the result.
template <typename T>
__device__ __forceinline__ void anchor_best_class(const T* __restrict__ logits, int64_t n_anchors, int64_t n_classes,
                                                  float& best, int32_t& best_class) {
  __shared__ float values[kKeyThreadsY][kKeyThreadsX];
  __shared__ int32_t classes[kKeyThreadsY][kKeyThreadsX];
  const int64_t b = blockIdx.y, a = int64_t(blockIdx.x) * kKeyThreadsX + threadIdx.x;
  best = -vk::infinity();
  best_class = -1;
  if (a < n_anchors) {
    const T* l = logits + b * n_classes * n_anchors + a;
    for (int64_t c = threadIdx.y; c < n_classes; c += kKeyThreadsY) {
      const float x = sanitize(vk::to_float(l[c * n_anchors]));
      if (best_class < 0 || x > best) best = x, best_class = int32_t(c);
    }
  }
  values[threadIdx.y][threadIdx.x] = best;
  classes[threadIdx.y][threadIdx.x] = best_class;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int y = 1; y < kKeyThreadsY; ++y) {
      const float v = values[y][threadIdx.x];
      const int32_t c = classes[y][threadIdx.x];
      if (c >= 0 && (best_class < 0 || v > best || (v == best && c < best_class))) best = v, best_class = c;
    }
  }
}

// Adds 1 to hist[digit] for each lane with take, one shared atomic per distinct digit of the warp. Every lane of the
// warp calls it (lanes without take form their own group under a digit no key has).
__device__ __forceinline__ void warp_histogram_add(uint32_t* hist, uint32_t digit, bool take) {
  const unsigned peers = __match_any_sync(0xffffffffu, take ? digit : 0x100u);
  if (take && int(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[digit], uint32_t(__popc(peers)));
}

struct SelectShared {
  uint32_t hist[256];
  uint32_t digit;
  uint32_t remaining;
  uint32_t counter;
  uint32_t warp_sums[32];
};

// The k-th largest of n distinct keys (1 ≤ k ≤ n) read from global memory, by a block-wide MSD radix select: eight
// passes of 8-bit digits, each a histogram of the keys that share the digits chosen so far. Every thread of a 1-D
// CTA (a multiple of 32 threads) calls it and gets the result. Keys written earlier by this CTA are visible after a
// __syncthreads, so they may come from this kernel's own workspace.
__device__ uint64_t block_select_kth_largest(const uint64_t* keys, int64_t n, uint32_t k, SelectShared& s) {
  uint64_t prefix = 0, mask = 0;
  uint32_t remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) s.hist[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      bool take = false;
      uint32_t digit = 0;
      if (i < n) {
        const uint64_t key = keys[i];
        take = (key & mask) == prefix;
        digit = uint32_t(key >> shift) & 255u;
      }
      warp_histogram_add(s.hist, digit, take);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns digits [8l, 8l + 8); the digit holding the remaining-th largest key is where the count of keys
      // in higher digits first reaches `remaining`.
      const int lane = threadIdx.x;
      uint32_t local = 0;
      for (int d = 0; d < 8; ++d) local += s.hist[8 * lane + d];
      uint32_t suffix = local;  // keys in digits ≥ 8l
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_down_sync(0xffffffffu, suffix, o);
        if (lane + o < 32) suffix += v;
      }
      uint32_t above = suffix - local;  // keys in digits ≥ 8(l + 1)
      if (above < remaining && remaining <= suffix) {
        for (int d = 8 * lane + 7; d >= 8 * lane; --d) {
          if (above + s.hist[d] >= remaining) {
            s.digit = uint32_t(d);
            s.remaining = remaining - above;
            break;
          }
          above += s.hist[d];
        }
      }
    }
    __syncthreads();
    prefix |= uint64_t(s.digit) << shift;
    mask |= uint64_t(255) << shift;
    remaining = s.remaining;
    __syncthreads();
  }
  return prefix;
}

// Sorts keys[0, p) (p a power of two) in shared memory into descending order: a bitonic network, one __syncthreads
// per stage.
__device__ void block_bitonic_sort_descending(uint64_t* keys, uint32_t p) {
  for (uint32_t size = 2; size <= p; size <<= 1)
    for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (uint32_t i = threadIdx.x; i < p; i += blockDim.x) {
        const uint32_t j = i ^ stride;
        if (j > i) {
          const uint64_t x = keys[i], y = keys[j];
          const bool descending = (i & size) == 0;
          if (descending ? x < y : x > y) keys[i] = y, keys[j] = x;
        }
      }
      __syncthreads();
    }
}

// The exclusive prefix sum of v over the threads of a 1-D CTA, and the total. Ends with a __syncthreads.
__device__ uint32_t block_exclusive_sum(uint32_t v, SelectShared& s, uint32_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
  uint32_t inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t u = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += u;
  }
  if (lane == 31) s.warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    uint32_t w = lane < n_warps ? s.warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t u = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += u;
    }
    s.warp_sums[lane] = w;
  }
  __syncthreads();
  total = s.warp_sums[n_warps - 1];
  const uint32_t before = warp == 0 ? 0u : s.warp_sums[warp - 1];
  __syncthreads();
  return before + inclusive - v;
}

__device__ __forceinline__ void write_row(float* row, float4 box, float score, int32_t cls) {
  row[0] = box.x, row[1] = box.y, row[2] = box.z, row[3] = box.w, row[4] = score, row[5] = float(cls);
}

}  // namespace pp

// ---------------------------------------------------------------------------------------------------------------
// End-to-end

// keys [B, A] (u64): each anchor's ranking key by its max class logit. Grid (⌈A / 32⌉, B), CTA (32, 8).
template <typename T>
__global__ void __launch_bounds__(pp::kKeyThreadsX* pp::kKeyThreadsY)
    postprocess_e2e_anchor_keys(const T* __restrict__ logits, uint64_t* __restrict__ keys, int64_t n_anchors,
                                int64_t n_classes) {
  float best;
  int32_t best_class;
  pp::anchor_best_class(logits, n_anchors, n_classes, best, best_class);
  const int64_t a = int64_t(blockIdx.x) * pp::kKeyThreadsX + threadIdx.x;
  if (threadIdx.y == 0 && a < n_anchors) keys[int64_t(blockIdx.y) * n_anchors + a] = pp::rank_key(best, uint32_t(a));
}

// One CTA (kSelectThreads) per image b = blockIdx.x, k = min(max_det, A) ≥ 1: the k anchors of the largest keys; the
// keys of their k × nc pairs into pair_keys [B, k · nc] (workspace); the k largest pair keys, sorted in shared memory
// (dynamic: next_pow2(k) u64); the rows that pass conf (logit > logit_threshold) and class_mask (nullable, [nc]),
// in order; zero rows after them; count[b].
template <typename T>
__global__ void __launch_bounds__(pp::kSelectThreads)
    postprocess_e2e_select(const T* __restrict__ boxes, const T* __restrict__ logits,
                           const uint64_t* __restrict__ anchor_keys, uint64_t* pair_keys,
                           const float* __restrict__ class_mask, float* __restrict__ detections,
                           int32_t* __restrict__ count, int64_t n_anchors, int64_t n_classes, int32_t max_det,
                           float logit_threshold) {
  extern __shared__ __align__(16) unsigned char pp_dynamic_shared[];
  uint64_t* sorted = reinterpret_cast<uint64_t*>(pp_dynamic_shared);  // next_pow2(k) keys
  uint32_t* selected = reinterpret_cast<uint32_t*>(pp_dynamic_shared);  // k anchors; used before `sorted`
  __shared__ pp::SelectShared s;

  const int64_t b = blockIdx.x, n = n_anchors, nc = n_classes;
  const uint32_t k = uint32_t(max_det < n ? max_det : n);
  uint32_t p = 1;
  while (p < k) p <<= 1;
  const T* logits_b = logits + b * nc * n;

  // Stage 1: the k anchors of the largest max-class keys (in no particular order).
  const uint64_t* keys_b = anchor_keys + b * n;
  const uint64_t t1 = pp::block_select_kth_largest(keys_b, n, k, s);
  if (threadIdx.x == 0) s.counter = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t key = keys_b[i];
    if (key >= t1) {
      const uint32_t slot = atomicAdd(&s.counter, 1u);
      if (slot < k) selected[slot] = pp::key_index(key);
    }
  }
  __syncthreads();

  // Stage 2: the pairs (selected[j % k], class j / k), then the k largest of their keys.
  const int64_t n_pairs = int64_t(k) * nc;
  uint64_t* pairs_b = pair_keys + b * n_pairs;
  for (int64_t j = threadIdx.x; j < n_pairs; j += blockDim.x) {
    const int64_t c = j / k;
    const uint32_t a = selected[j % k];
    pairs_b[j] = pp::rank_key(vk::to_float(logits_b[c * n + a]), uint32_t(int64_t(a) * nc + c));
  }
  __syncthreads();
  const uint64_t t2 = pp::block_select_kth_largest(pairs_b, n_pairs, k, s);
  if (threadIdx.x == 0) s.counter = 0;
  __syncthreads();
  for (int64_t j = threadIdx.x; j < n_pairs; j += blockDim.x) {
    const uint64_t key = pairs_b[j];
    if (key >= t2) {
      const uint32_t slot = atomicAdd(&s.counter, 1u);
      if (slot < k) sorted[slot] = key;
    }
  }
  for (uint32_t i = k + threadIdx.x; i < p; i += blockDim.x) sorted[i] = 0;  // below every real key
  __syncthreads();
  pp::block_bitonic_sort_descending(sorted, p);

  // Rows: the filters in rank order, compacted. Thread t holds the ranks [t · per, (t + 1) · per).
  const uint32_t per = (k + blockDim.x - 1) / blockDim.x;
  const uint32_t first = threadIdx.x * per, last = min(k, first + per);
  uint32_t keep = 0;
  for (uint32_t r = first; r < last; ++r) {
    const uint64_t key = sorted[r];
    const uint32_t c = pp::key_index(key) % uint32_t(nc);
    keep += pp::key_logit(key) > logit_threshold && (class_mask == nullptr || class_mask[c] != 0.0f);
  }
  uint32_t total = 0;
  uint32_t out = pp::block_exclusive_sum(keep, s, total);
  float* det_b = detections + b * int64_t(max_det) * 6;
  const T* boxes_b = boxes + b * 4 * n;
  for (uint32_t r = first; r < last; ++r) {
    const uint64_t key = sorted[r];
    const float logit = pp::key_logit(key);
    const uint32_t index = pp::key_index(key), a = index / uint32_t(nc), c = index % uint32_t(nc);
    if (!(logit > logit_threshold && (class_mask == nullptr || class_mask[c] != 0.0f))) continue;
    pp::write_row(det_b + int64_t(out) * 6, pp::load_box(boxes_b, n, a), pp::sigmoid(logit), int32_t(c));
    ++out;
  }
  for (int64_t i = int64_t(total) * 6 + threadIdx.x; i < int64_t(max_det) * 6; i += blockDim.x) det_b[i] = 0.0f;
  if (threadIdx.x == 0) count[b] = int32_t(total);
}

// ---------------------------------------------------------------------------------------------------------------
// NMS

// Per anchor of image blockIdx.y: its best class; when the logit passes conf (> logit_threshold) and class_mask
// (nullable, [nc]), it becomes a candidate at slot atomicAdd(n_valid[b]): keys [B, A] (u64, the ranking key by anchor)
// and classes [B, A] (i32). n_valid [B] must be zero beforehand; the slots' order is arbitrary (the rank kernel sorts).
// Grid (⌈A / 32⌉, B), CTA (32, 8).
template <typename T>
__global__ void __launch_bounds__(pp::kKeyThreadsX* pp::kKeyThreadsY)
    postprocess_nms_candidates(const T* __restrict__ logits, const float* __restrict__ class_mask,
                               uint64_t* __restrict__ keys, int32_t* __restrict__ classes,
                               int32_t* __restrict__ n_valid, int64_t n_anchors, int64_t n_classes,
                               float logit_threshold) {
  float best;
  int32_t best_class;
  pp::anchor_best_class(logits, n_anchors, n_classes, best, best_class);
  const int64_t b = blockIdx.y, a = int64_t(blockIdx.x) * pp::kKeyThreadsX + threadIdx.x;
  if (threadIdx.y != 0 || a >= n_anchors || best_class < 0) return;
  if (!(best > logit_threshold) || (class_mask != nullptr && class_mask[best_class] == 0.0f)) return;
  const int32_t slot = atomicAdd(&n_valid[b], 1);
  keys[b * n_anchors + slot] = pp::rank_key(best, uint32_t(a));
  classes[b * n_anchors + slot] = best_class;
}

// order [B, order_stride]: the slot of the candidate of rank r (r < min(n_valid[b], max_nms)), ranks by descending key
// (the keys are distinct), each candidate's rank counted over all candidates of its image. Grid (⌈A / 256⌉, B), CTA
// kRankThreads. T is unused (the kernel reads no element data).
template <typename T>
__global__ void __launch_bounds__(pp::kRankThreads)
    postprocess_nms_rank(const uint64_t* __restrict__ keys, const int32_t* __restrict__ n_valid,
                         int32_t* __restrict__ order, int64_t n_anchors, int64_t order_stride, int32_t max_nms) {
  __shared__ uint64_t tile[pp::kRankThreads];
  const int64_t b = blockIdx.y;
  const int64_t n = n_valid[b], i = int64_t(blockIdx.x) * pp::kRankThreads + threadIdx.x;
  if (int64_t(blockIdx.x) * pp::kRankThreads >= n) return;  // the whole CTA
  const uint64_t* keys_b = keys + b * n_anchors;
  const uint64_t mine = i < n ? keys_b[i] : 0;
  int64_t rank = 0;
  for (int64_t t0 = 0; t0 < n; t0 += pp::kRankThreads) {
    const int64_t j = t0 + threadIdx.x;
    tile[threadIdx.x] = j < n ? keys_b[j] : 0;
    __syncthreads();
    const int64_t m = n - t0 < pp::kRankThreads ? n - t0 : pp::kRankThreads;
    for (int64_t q = 0; q < m; ++q) rank += tile[q] > mine;
    __syncthreads();
  }
  if (i < n && rank < max_nms) order[b * order_stride + rank] = int32_t(i);
}

// One CTA (kNmsTile threads) per image b = blockIdx.x: the first min(n_valid[b], max_nms) candidates of `order`,
// kNmsTile at a time; a candidate suppressed by a box kept in an earlier tile (same class, IoU > iou_threshold) is out;
// the others resolve in rank order through the tile's IoU bitmask (one thread walks the set bits, so the work is per
// kept box); stops at max_det kept. Kept boxes and classes in dynamic shared memory (max_det · 20 bytes). Rows in
// kept order, zero rows after them, count[b].
template <typename T>
__global__ void __launch_bounds__(pp::kNmsTile)
    postprocess_nms_select(const T* __restrict__ boxes, const uint64_t* __restrict__ keys,
                           const int32_t* __restrict__ classes, const int32_t* __restrict__ n_valid,
                           const int32_t* __restrict__ order, float* __restrict__ detections,
                           int32_t* __restrict__ count, int64_t n_anchors, int64_t order_stride, int32_t max_det,
                           int32_t max_nms, float iou_threshold) {
  constexpr int kTile = pp::kNmsTile, kWords = kTile / 64;
  extern __shared__ __align__(16) unsigned char pp_dynamic_shared[];
  float4* kept_box = reinterpret_cast<float4*>(pp_dynamic_shared);
  int32_t* kept_class = reinterpret_cast<int32_t*>(kept_box + max_det);
  __shared__ float4 tile_box[kTile];
  __shared__ int32_t tile_class[kTile];
  __shared__ uint64_t tile_key[kTile];
  __shared__ uint64_t tile_mask[kTile][kWords];  // bit j of row i: j > i, same class, IoU > threshold
  __shared__ uint32_t alive_bits[kTile / 32];
  __shared__ int32_t tile_kept[kTile];
  __shared__ int32_t tile_kept_count;

  const int64_t b = blockIdx.x, n = n_anchors;
  const int32_t n_cand = min(n_valid[b], max_nms);
  const T* boxes_b = boxes + b * 4 * n;
  float* det_b = detections + b * int64_t(max_det) * 6;
  const int tid = threadIdx.x;
  int32_t kept = 0;  // the same in every thread
  for (int32_t t0 = 0; t0 < n_cand && kept < max_det; t0 += kTile) {
    const int32_t i = t0 + tid, tile_n = min(kTile, n_cand - t0);
    const bool valid = tid < tile_n;
    float4 box = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int32_t cls = -1;
    uint64_t key = 0;
    if (valid) {
      const int32_t slot = order[b * order_stride + i];
      key = keys[b * n + slot];
      cls = classes[b * n + slot];
      box = pp::load_box(boxes_b, n, pp::key_index(key));
    }
    bool alive = valid;
    for (int32_t j = 0; alive && j < kept; ++j)
      if (kept_class[j] == cls && pp::box_iou(kept_box[j], box) > iou_threshold) alive = false;
    tile_box[tid] = box;
    tile_class[tid] = cls;
    tile_key[tid] = key;
    const unsigned alive_warp = __ballot_sync(0xffffffffu, alive);
    if ((tid & 31) == 0) alive_bits[tid >> 5] = alive_warp;
    __syncthreads();
    if (alive) {
      for (int w = 0; w < kWords; ++w) {
        uint64_t bits = 0;
        for (int q = 0; q < 64; ++q) {
          const int j = 64 * w + q;
          if (j > tid && j < tile_n && tile_class[j] == cls && pp::box_iou(box, tile_box[j]) > iou_threshold)
            bits |= uint64_t(1) << q;
        }
        tile_mask[tid][w] = bits;
      }
    }
    __syncthreads();
    if (tid == 0) {
      uint64_t removed[kWords];
      for (int w = 0; w < kWords; ++w) removed[w] = 0;
      int32_t nk = 0;
      for (int w = 0; w < kWords && kept + nk < max_det; ++w) {
        const uint64_t alive_w = uint64_t(alive_bits[2 * w]) | (uint64_t(alive_bits[2 * w + 1]) << 32);
        uint64_t open = alive_w & ~removed[w];
        while (open != 0 && kept + nk < max_det) {
          const int q = __ffsll(static_cast<long long>(open)) - 1;
          const int r = 64 * w + q;
          tile_kept[nk++] = r;
          for (int v = w; v < kWords; ++v) removed[v] |= tile_mask[r][v];
          open = alive_w & ~removed[w] & ((~uint64_t(0) << q) << 1);
        }
      }
      tile_kept_count = nk;
    }
    __syncthreads();
    const int32_t nk = tile_kept_count;
    if (tid < nk) {
      const int r = tile_kept[tid];
      kept_box[kept + tid] = tile_box[r];
      kept_class[kept + tid] = tile_class[r];
      pp::write_row(det_b + int64_t(kept + tid) * 6, tile_box[r], pp::sigmoid(pp::key_logit(tile_key[r])),
                    tile_class[r]);
    }
    kept += nk;
    __syncthreads();
  }
  for (int64_t q = int64_t(kept) * 6 + tid; q < int64_t(max_det) * 6; q += blockDim.x) det_b[q] = 0.0f;
  if (tid == 0) count[b] = kept;
}

}  // namespace vision::models::yolo::kernels
