// Task-aligned assigner — YOLO26's TaskAlignedAssigner on the GPU for a whole batch in three launches after six
// memsets (the four outputs, the claim counts and the owners), no host round trip (assigner.h defines the result; the
// CPU twin there computes the same selections):
//   assigner_topk (one CTA per (gt, image)): every anchor's align key for the gt (candidates by the STAL box, align =
//     σ^alpha · max(CIoU, 0)^beta, 0 for the others), a per-thread top-k list while scanning, then a block merge of
//     the lists (k rounds of a block max): the gt's top k over all anchors, ties toward the lower anchor index. Each
//     candidate among them is a claim: atomicAdd on its anchor's claim count and atomicMax of the gt on its owner
//     (order-independent, so deterministic; the owner is exact for an anchor of one claim).
//   assigner_resolve (one thread per (image, anchor) of two or more claims): the argmax over all valid gts of the
//     overlap (0 where the gt does not hold the anchor), first maximum = lowest gt (gt 0 when all are 0), claiming or
//     not — ultralytics' select_highest_overlaps — written to the anchor's owner.
//   assigner_finalize (one CTA per (gt, image)): the anchors the gt owns (a scan of the image's owners), topk2 (a block
//     top-topk2 of align · own over all anchors), the normalisation, and the outputs of its positive anchors (each
//     anchor has one owner, so no two CTAs write one element).
// Keys (u64): the value's f32 bits (values ≥ 0, so the bits order them) above, ~index below: a larger key ranks first.
// The candidate test, the CIoU and the align metric are assigner_math.cuh, which the CPU twin calls too: correctly
// rounded operations never contracted into FMA, so the value a key was ranked by is the value recomputed for it.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/loss/assigner_math.cuh"

namespace vision::models::yolo::kernels::loss {

namespace tal {

// Enumerators rather than constexpr variables: NVRTC emits a namespace-scope variable as a global whose internal name
// is not the same from one process to the next, which would make the PTX snapshots unstable.
enum : int {
  kTopkThreads = 256,
  kMaxTopk = 32,  // kAssignerMaxTopk
  kResolveThreads = 128,
  kFinalizeThreads = 256,
};

// Whether anchor a (centre (x, y)·stride) is a candidate of the candidate box, and then its overlap.
template <typename T>
__device__ __forceinline__ bool anchor_overlap(const T* __restrict__ boxes_b, const float* __restrict__ anchors,
                                               int64_t n, int64_t a, const float* gt, const float* cand, float eps,
                                               float& overlap) {
  const float s = anchors[2 * n + a];
  const float x = hd::mul_rn(anchors[a], s), y = hd::mul_rn(anchors[n + a], s);
  overlap = 0.0f;
  if (!tal_math::is_candidate(x, y, cand, eps)) return false;
  const float pred[4] = {hd::mul_rn(vk::to_float(boxes_b[a]), s), hd::mul_rn(vk::to_float(boxes_b[n + a]), s),
                         hd::mul_rn(vk::to_float(boxes_b[2 * n + a]), s),
                         hd::mul_rn(vk::to_float(boxes_b[3 * n + a]), s)};
  overlap = tal_math::overlap(gt, pred);
  return true;
}

// anchor_overlap, and then the align of a candidate (0 otherwise).
template <typename T>
__device__ __forceinline__ bool anchor_metrics(const T* __restrict__ logits_c, const T* __restrict__ boxes_b,
                                               const float* __restrict__ anchors, int64_t n, int64_t a, const float* gt,
                                               const float* cand, float alpha, float beta, float eps, float& align,
                                               float& overlap) {
  align = 0.0f;
  if (!anchor_overlap(boxes_b, anchors, n, a, gt, cand, eps, overlap)) return false;
  align = tal_math::align(vk::to_float(logits_c[a]), overlap, alpha, beta);
  return true;
}

// Row g of image b's targets when it is a valid gt (g < count clamped to [0, n_max], class an integer in [0, nc)):
// its class, else −1.
__device__ __forceinline__ int64_t gt_class(const float* __restrict__ targets, const int32_t* __restrict__ count,
                                            int64_t b, int64_t g, int64_t n_max, int64_t n_classes) {
  int64_t cnt = count[b];
  cnt = cnt < 0 ? 0 : (cnt > n_max ? n_max : cnt);
  const float cf = g < cnt ? targets[(b * n_max + g) * 5] : -1.0f;
  return cf >= 0.0f && cf < float(n_classes) && cf == floorf(cf) ? int64_t(cf) : -1;
}

__device__ __forceinline__ uint64_t key_of(float value, uint32_t index) {
  return (uint64_t(__float_as_uint(value)) << 32) | uint32_t(~index);
}

__device__ __forceinline__ uint64_t u64_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

// Inserts key into a thread's descending list local[0, nl) of at most k keys.
__device__ __forceinline__ void insert_key(uint64_t* local, int& nl, int k, uint64_t key) {
  if (nl == k && key <= local[k - 1]) return;
  int p = nl < k ? nl++ : k - 1;
  while (p > 0 && local[p - 1] < key) {
    local[p] = local[p - 1];
    --p;
  }
  local[p] = key;
}

// Block merge of the threads' lists (keys distinct and nonzero): k rounds, each taking the largest head, into
// selected[0, k) in descending order. Every thread of the block (kThreads of them) must call it.
template <int kThreads>
__device__ __forceinline__ void block_top(const uint64_t* local, int nl, int k, uint64_t* warp_best,
                                          uint64_t* selected) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int head = 0;
  for (int r = 0; r < k; ++r) {
    const uint64_t mine = head < nl ? local[head] : 0;
    uint64_t v = mine;
    for (int o = 16; o > 0; o >>= 1) v = u64_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) warp_best[warp] = v;
    __syncthreads();
    uint64_t top = 0;
    for (int w = 0; w < kThreads / 32; ++w) top = u64_max(top, warp_best[w]);
    if (head < nl && mine == top) ++head;
    if (tid == 0) selected[r] = top;
    __syncthreads();
  }
}

}  // namespace tal

// One CTA (kTopkThreads) per (gt g = blockIdx.x, image b = blockIdx.y). For a valid gt (tal::gt_class): its
// k = min(topk, A) best anchors by align key; for each candidate among them (a claim), claimers[b, a] += 1 and
// owner[b, a] = max(owner, g) (claimers zeroed and owner −1 beforehand).
template <typename T>
__global__ void __launch_bounds__(tal::kTopkThreads)
    assigner_topk(const T* __restrict__ logits, const T* __restrict__ boxes, const float* __restrict__ anchors,
                  const float* __restrict__ targets, const int32_t* __restrict__ count, int32_t* __restrict__ claimers,
                  int32_t* __restrict__ owner, int64_t n_anchors, int64_t n_classes, int64_t n_max, int32_t topk,
                  float alpha, float beta, float eps, float small_side, float widened_side) {
  __shared__ uint64_t warp_best[tal::kTopkThreads / 32];
  __shared__ uint64_t selected[tal::kMaxTopk];
  const int64_t b = blockIdx.y, g = blockIdx.x, n = n_anchors;
  const int64_t cls = tal::gt_class(targets, count, b, g, n_max, n_classes);
  if (cls < 0) return;
  const int k = int(int64_t(topk) < n ? int64_t(topk) : n);
  const float* row = targets + (b * n_max + g) * 5;
  const float gt[4] = {row[1], row[2], row[3], row[4]};
  float cand[4];
  tal_math::stal_box(gt, small_side, widened_side, cand);
  const T* logits_c = logits + (b * n_classes + cls) * n;
  const T* boxes_b = boxes + b * 4 * n;

  // This thread's top k keys, descending, then the block's.
  uint64_t local[tal::kMaxTopk];
  int nl = 0;
  for (int64_t a = threadIdx.x; a < n; a += blockDim.x) {
    float align, overlap;
    tal::anchor_metrics(logits_c, boxes_b, anchors, n, a, gt, cand, alpha, beta, eps, align, overlap);
    tal::insert_key(local, nl, k, tal::key_of(align, uint32_t(a)));
  }
  tal::block_top<tal::kTopkThreads>(local, nl, k, warp_best, selected);

  if (threadIdx.x == 0) {
    for (int r = 0; r < k; ++r) {
      const uint32_t a = ~uint32_t(selected[r]);
      float overlap;
      if (!tal::anchor_overlap(boxes_b, anchors, n, int64_t(a), gt, cand, eps, overlap)) continue;
      atomicAdd(claimers + b * n + a, 1);
      atomicMax(owner + b * n + a, int32_t(g));
    }
  }
}

// One thread per (image b, anchor a) (grid-stride over batch · A): an anchor of two or more claims gets as owner the
// argmax over the image's valid gts of the overlap (0 where the gt does not hold it), ties and all-zero to the lowest
// gt: the max of the (overlap, ~g) keys and (0, ~0).
template <typename T>
__global__ void __launch_bounds__(tal::kResolveThreads)
    assigner_resolve(const T* __restrict__ boxes, const float* __restrict__ anchors, const float* __restrict__ targets,
                     const int32_t* __restrict__ count, const int32_t* __restrict__ claimers,
                     int32_t* __restrict__ owner, int64_t batch, int64_t n_anchors, int64_t n_classes, int64_t n_max,
                     float eps, float small_side, float widened_side) {
  const int64_t n = n_anchors;
  for (int64_t i = vk::thread_index(); i < batch * n; i += vk::thread_count()) {
    if (claimers[i] < 2) continue;
    const int64_t b = i / n, a = i % n;
    int64_t cnt = count[b];
    cnt = cnt < 0 ? 0 : (cnt > n_max ? n_max : cnt);
    const T* boxes_b = boxes + b * 4 * n;
    uint64_t best = tal::key_of(0.0f, 0u);
    for (int64_t g = 0; g < cnt; ++g) {
      if (tal::gt_class(targets, count, b, g, n_max, n_classes) < 0) continue;
      const float* row = targets + (b * n_max + g) * 5;
      const float gt[4] = {row[1], row[2], row[3], row[4]};
      float cand[4], overlap;
      tal_math::stal_box(gt, small_side, widened_side, cand);
      if (tal::anchor_overlap(boxes_b, anchors, n, a, gt, cand, eps, overlap))
        best = tal::u64_max(best, tal::key_of(overlap, uint32_t(g)));
    }
    owner[i] = int32_t(~uint32_t(best));
  }
}

namespace tal {

// The outputs of anchor a, positive of gt g (row: its targets row, class cls), given the gt's maxima.
template <typename T>
__device__ __forceinline__ void write_positive(const T* __restrict__ logits_c, const T* __restrict__ boxes_b,
                                               const float* __restrict__ anchors, const float* row, const float* gt,
                                               const float* cand, int64_t b, int64_t g, int64_t cls, int64_t n,
                                               int64_t n_classes, int64_t a, float alpha, float beta, float eps,
                                               float max_align, float max_overlap, float* __restrict__ target_boxes,
                                               float* __restrict__ target_scores, uint8_t* __restrict__ fg_mask,
                                               int32_t* __restrict__ gt_index) {
  float align, overlap;
  anchor_metrics(logits_c, boxes_b, anchors, n, a, gt, cand, alpha, beta, eps, align, overlap);
  const float s = anchors[2 * n + a];
  gt_index[b * n + a] = int32_t(g);
  fg_mask[b * n + a] = 1;
  for (int q = 0; q < 4; ++q) target_boxes[(b * 4 + q) * n + a] = __fdiv_rn(row[1 + q], s);
  target_scores[(b * n_classes + cls) * n + a] = __fdiv_rn(__fmul_rn(align, max_overlap), __fadd_rn(max_align, eps));
}

}  // namespace tal

// One CTA (kFinalizeThreads) per (gt g = blockIdx.x, image b = blockIdx.y), valid gts only: the anchors it owns; with
// topk2 (0 < topk2 ≠ topk) only those among the top min(topk2, A) keys of (align if owned else 0, ~a) over all
// anchors; the normalisation over them and their outputs. target_boxes, target_scores and fg_mask must be zero and
// gt_index −1 beforehand.
template <typename T>
__global__ void __launch_bounds__(tal::kFinalizeThreads)
    assigner_finalize(const T* __restrict__ logits, const T* __restrict__ boxes, const float* __restrict__ anchors,
                      const float* __restrict__ targets, const int32_t* __restrict__ count,
                      const int32_t* __restrict__ owner, float* __restrict__ target_boxes,
                      float* __restrict__ target_scores, uint8_t* __restrict__ fg_mask, int32_t* __restrict__ gt_index,
                      int64_t n_anchors, int64_t n_classes, int64_t n_max, int32_t topk, int32_t topk2, float alpha,
                      float beta, float eps, float small_side, float widened_side) {
  __shared__ uint64_t warp_best[tal::kFinalizeThreads / 32];
  __shared__ uint64_t selected[tal::kMaxTopk];
  __shared__ float warp_max[2][tal::kFinalizeThreads / 32];
  const int64_t b = blockIdx.y, g = blockIdx.x, n = n_anchors;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t cls = tal::gt_class(targets, count, b, g, n_max, n_classes);
  if (cls < 0) return;
  const float* row = targets + (b * n_max + g) * 5;
  const float gt[4] = {row[1], row[2], row[3], row[4]};
  float cand[4];
  tal_math::stal_box(gt, small_side, widened_side, cand);
  const T* logits_c = logits + (b * n_classes + cls) * n;
  const T* boxes_b = boxes + b * 4 * n;
  const int32_t* owner_b = owner + b * n;
  const bool use_topk2 = topk2 > 0 && topk2 != topk;
  const int k2 = use_topk2 ? int(int64_t(topk2) < n ? int64_t(topk2) : n) : 0;

  uint64_t local[tal::kMaxTopk];
  int nl = 0;
  float max_align = 0.0f, max_overlap = 0.0f;
  for (int64_t a = tid; a < n; a += blockDim.x) {
    const bool own = owner_b[a] == int32_t(g);
    float align = 0.0f, overlap = 0.0f;
    if (own) tal::anchor_metrics(logits_c, boxes_b, anchors, n, a, gt, cand, alpha, beta, eps, align, overlap);
    if (use_topk2) {
      tal::insert_key(local, nl, k2, tal::key_of(own ? align : 0.0f, uint32_t(a)));
    } else if (own) {
      max_align = fmaxf(max_align, align);
      max_overlap = fmaxf(max_overlap, overlap);
    }
  }

  if (use_topk2) {
    tal::block_top<tal::kFinalizeThreads>(local, nl, k2, warp_best, selected);
    if (tid == 0) {
      for (int r = 0; r < k2; ++r) {
        const int64_t a = ~uint32_t(selected[r]);
        if (owner_b[a] != int32_t(g)) continue;
        float align, overlap;
        tal::anchor_metrics(logits_c, boxes_b, anchors, n, a, gt, cand, alpha, beta, eps, align, overlap);
        max_align = fmaxf(max_align, align);
        max_overlap = fmaxf(max_overlap, overlap);
      }
      for (int r = 0; r < k2; ++r) {
        const int64_t a = ~uint32_t(selected[r]);
        if (owner_b[a] == int32_t(g))
          tal::write_positive(logits_c, boxes_b, anchors, row, gt, cand, b, g, cls, n, n_classes, a, alpha, beta, eps,
                              max_align, max_overlap, target_boxes, target_scores, fg_mask, gt_index);
      }
    }
    return;
  }

  // Block maxima (order-independent), then the outputs of every owned anchor.
  for (int o = 16; o > 0; o >>= 1) {
    max_align = fmaxf(max_align, __shfl_xor_sync(0xffffffffu, max_align, o));
    max_overlap = fmaxf(max_overlap, __shfl_xor_sync(0xffffffffu, max_overlap, o));
  }
  if (lane == 0) {
    warp_max[0][warp] = max_align;
    warp_max[1][warp] = max_overlap;
  }
  __syncthreads();
  for (int w = 0; w < tal::kFinalizeThreads / 32; ++w) {
    max_align = fmaxf(max_align, warp_max[0][w]);
    max_overlap = fmaxf(max_overlap, warp_max[1][w]);
  }
  for (int64_t a = tid; a < n; a += blockDim.x)
    if (owner_b[a] == int32_t(g))
      tal::write_positive(logits_c, boxes_b, anchors, row, gt, cand, b, g, cls, n, n_classes, a, alpha, beta, eps,
                          max_align, max_overlap, target_boxes, target_scores, fg_mask, gt_index);
}

}  // namespace vision::models::yolo::kernels::loss
