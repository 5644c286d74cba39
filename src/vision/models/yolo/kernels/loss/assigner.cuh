// Task-aligned assigner — YOLO26's TaskAlignedAssigner on the GPU for a whole batch in two launches after five
// memsets (the four outputs and the resolution keys), no host round trip (assigner.h defines the result; the CPU
// twin there computes the same selections):
//   assigner_topk (one CTA per (gt, image)): every anchor's align key for the gt (candidates by the STAL box, align =
//     σ^alpha · max(CIoU, 0)^beta, 0 for the others), a per-thread top-k list while scanning, then a block merge of
//     the lists (k rounds of a block max): the gt's top k over all anchors, ties toward the lower anchor index. The
//     candidates among them are its claims (workspace [B, M, topk]); each claim bids (overlap, ~gt) into its anchor's
//     u64 slot by atomicMax (order-independent, so deterministic): the highest overlap wins, ties to the lower gt.
//   assigner_finalize (one thread per (image, gt)): the claims the gt won, topk2, the normalisation, and the outputs
//     of its positive anchors (each anchor has one winner, so no two threads write one element).
// Keys (u64): the value's f32 bits (values ≥ 0, so the bits order them) above, ~index below: a larger key ranks first.
// Arithmetic of the candidate test and the CIoU uses the _rn intrinsics (never contracted into FMA), so the value a
// key was ranked by is the value recomputed for it, and both follow the CPU twin's operation order.
#pragma once

#include "vision/cuda/kernel_common.cuh"

namespace vision::models::yolo::kernels::loss {

namespace tal {

// Enumerators rather than constexpr variables: NVRTC emits a namespace-scope variable as a global whose internal name
// is not the same from one process to the next, which would make the PTX snapshots unstable.
enum : int {
  kTopkThreads = 256,
  kMaxTopk = 32,  // kAssignerMaxTopk
  kFinalizeThreads = 128,
};

__device__ __forceinline__ float ciou(const float* b1, const float* b2) {
  const float e = 1e-7f;
  const float w1 = __fsub_rn(b1[2], b1[0]), h1 = __fadd_rn(__fsub_rn(b1[3], b1[1]), e);
  const float w2 = __fsub_rn(b2[2], b2[0]), h2 = __fadd_rn(__fsub_rn(b2[3], b2[1]), e);
  const float iw = fmaxf(__fsub_rn(fminf(b1[2], b2[2]), fmaxf(b1[0], b2[0])), 0.0f);
  const float ih = fmaxf(__fsub_rn(fminf(b1[3], b2[3]), fmaxf(b1[1], b2[1])), 0.0f);
  const float inter = __fmul_rn(iw, ih);
  const float uni = __fadd_rn(__fsub_rn(__fadd_rn(__fmul_rn(w1, h1), __fmul_rn(w2, h2)), inter), e);
  const float iou = __fdiv_rn(inter, uni);
  const float cw = __fsub_rn(fmaxf(b1[2], b2[2]), fminf(b1[0], b2[0]));
  const float ch = __fsub_rn(fmaxf(b1[3], b2[3]), fminf(b1[1], b2[1]));
  const float c2 = __fadd_rn(__fadd_rn(__fmul_rn(cw, cw), __fmul_rn(ch, ch)), e);
  const float dx = __fsub_rn(__fsub_rn(__fadd_rn(b2[0], b2[2]), b1[0]), b1[2]);
  const float dy = __fsub_rn(__fsub_rn(__fadd_rn(b2[1], b2[3]), b1[1]), b1[3]);
  const float rho2 = __fmul_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), 0.25f);
  const float d = __fsub_rn(atanf(__fdiv_rn(w2, h2)), atanf(__fdiv_rn(w1, h1)));
  const float v = __fmul_rn(0.405284735f, __fmul_rn(d, d));
  const float a = __fdiv_rn(v, __fadd_rn(__fsub_rn(v, iou), __fadd_rn(1.0f, e)));
  return __fsub_rn(iou, __fadd_rn(__fdiv_rn(rho2, c2), __fmul_rn(v, a)));
}

// The STAL candidate box of gt (x1, y1, x2, y2): each side shorter than small_side widened to widened_side about the
// centre, through (c, side) as upstream does.
__device__ __forceinline__ void stal_box(const float* gt, float small_side, float widened_side, float* out) {
  for (int d = 0; d < 2; ++d) {
    const float c = __fmul_rn(__fadd_rn(gt[d], gt[d + 2]), 0.5f);
    float side = __fsub_rn(gt[d + 2], gt[d]);
    if (side < small_side) side = widened_side;
    out[d] = __fsub_rn(c, __fmul_rn(side, 0.5f));
    out[d + 2] = __fadd_rn(c, __fmul_rn(side, 0.5f));
  }
}

// Whether anchor a (centre (x, y)·stride) is a candidate of the candidate box, and then its overlap and align.
template <typename T>
__device__ __forceinline__ bool anchor_metrics(const T* __restrict__ logits_c, const T* __restrict__ boxes_b,
                                               const float* __restrict__ anchors, int64_t n, int64_t a, const float* gt,
                                               const float* cand, float alpha, float beta, float eps, float& align,
                                               float& overlap) {
  const float s = anchors[2 * n + a];
  const float x = __fmul_rn(anchors[a], s), y = __fmul_rn(anchors[n + a], s);
  align = 0.0f;
  overlap = 0.0f;
  const bool candidate = __fsub_rn(x, cand[0]) > eps && __fsub_rn(y, cand[1]) > eps && __fsub_rn(cand[2], x) > eps &&
                         __fsub_rn(cand[3], y) > eps;
  if (!candidate) return false;
  const float pred[4] = {__fmul_rn(vk::to_float(boxes_b[a]), s), __fmul_rn(vk::to_float(boxes_b[n + a]), s),
                         __fmul_rn(vk::to_float(boxes_b[2 * n + a]), s),
                         __fmul_rn(vk::to_float(boxes_b[3 * n + a]), s)};
  overlap = fmaxf(ciou(gt, pred), 0.0f);  // NaN → 0
  const float score = __frcp_rn(__fadd_rn(1.0f, expf(-vk::to_float(logits_c[a]))));
  align = __fmul_rn(powf(score, alpha), powf(overlap, beta));
  if (!(align > 0.0f)) align = 0.0f;  // NaN → 0
  return true;
}

__device__ __forceinline__ uint64_t key_of(float value, uint32_t index) {
  return (uint64_t(__float_as_uint(value)) << 32) | uint32_t(~index);
}

__device__ __forceinline__ uint64_t u64_max(uint64_t a, uint64_t b) { return a > b ? a : b; }

}  // namespace tal

// One CTA (kTopkThreads) per (gt g = blockIdx.x, image b = blockIdx.y). For a valid gt (g < count[b] clamped to
// [0, n_max], class an integer in [0, nc)): its k = min(topk, A) best anchors by align key; the candidates among them,
// in descending key order, into claim_* [B, n_max, topk] and n_claims [B, n_max]; each claim atomicMax-es
// (overlap bits << 32 | ~g) into best [B, A] (zeroed beforehand). An invalid gt gets n_claims = 0.
template <typename T>
__global__ void __launch_bounds__(tal::kTopkThreads)
    assigner_topk(const T* __restrict__ logits, const T* __restrict__ boxes, const float* __restrict__ anchors,
                  const float* __restrict__ targets, const int32_t* __restrict__ count,
                  int32_t* __restrict__ claim_anchor, float* __restrict__ claim_align,
                  float* __restrict__ claim_overlap, int32_t* __restrict__ n_claims, uint64_t* __restrict__ best,
                  int64_t n_anchors, int64_t n_classes, int64_t n_max, int32_t topk, float alpha, float beta, float eps,
                  float small_side, float widened_side) {
  __shared__ uint64_t warp_best[tal::kTopkThreads / 32];
  __shared__ uint64_t selected[tal::kMaxTopk];
  const int64_t b = blockIdx.y, g = blockIdx.x, n = n_anchors, bg = b * n_max + g;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int64_t cnt = count[b];
  cnt = cnt < 0 ? 0 : (cnt > n_max ? n_max : cnt);
  const float* row = targets + bg * 5;
  const float cf = g < cnt ? row[0] : -1.0f;
  if (!(cf >= 0.0f && cf < float(n_classes) && cf == floorf(cf))) {
    if (tid == 0) n_claims[bg] = 0;
    return;
  }
  const int64_t cls = int64_t(cf);
  const int k = int(int64_t(topk) < n ? int64_t(topk) : n);
  const float gt[4] = {row[1], row[2], row[3], row[4]};
  float cand[4];
  tal::stal_box(gt, small_side, widened_side, cand);
  const T* logits_c = logits + (b * n_classes + cls) * n;
  const T* boxes_b = boxes + b * 4 * n;

  // This thread's top k keys, descending.
  uint64_t local[tal::kMaxTopk];
  int nl = 0;
  for (int64_t a = tid; a < n; a += blockDim.x) {
    float align, overlap;
    tal::anchor_metrics(logits_c, boxes_b, anchors, n, a, gt, cand, alpha, beta, eps, align, overlap);
    const uint64_t key = tal::key_of(align, uint32_t(a));
    if (nl == k && key <= local[k - 1]) continue;
    int p = nl < k ? nl++ : k - 1;
    while (p > 0 && local[p - 1] < key) {
      local[p] = local[p - 1];
      --p;
    }
    local[p] = key;
  }

  // Block merge: k rounds, each taking the largest head of the threads' lists (keys are distinct and nonzero).
  int head = 0;
  for (int r = 0; r < k; ++r) {
    const uint64_t mine = head < nl ? local[head] : 0;
    uint64_t v = mine;
    for (int o = 16; o > 0; o >>= 1) v = tal::u64_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) warp_best[warp] = v;
    __syncthreads();
    uint64_t top = 0;
    for (int w = 0; w < tal::kTopkThreads / 32; ++w) top = tal::u64_max(top, warp_best[w]);
    if (head < nl && mine == top) ++head;
    if (tid == 0) selected[r] = top;
    __syncthreads();
  }

  if (tid == 0) {
    int nk = 0;
    const int64_t base = bg * topk;
    for (int r = 0; r < k; ++r) {
      const uint32_t a = ~uint32_t(selected[r]);
      float align, overlap;
      if (!tal::anchor_metrics(logits_c, boxes_b, anchors, n, int64_t(a), gt, cand, alpha, beta, eps, align, overlap))
        continue;
      claim_anchor[base + nk] = int32_t(a);
      claim_align[base + nk] = __uint_as_float(uint32_t(selected[r] >> 32));
      claim_overlap[base + nk] = overlap;
      ++nk;
      atomicMax(reinterpret_cast<unsigned long long*>(best + b * n + a),
                static_cast<unsigned long long>(tal::key_of(overlap, uint32_t(g))));
    }
    n_claims[bg] = nk;
  }
}

// One thread per (image, gt) (grid-stride over batch · n_max): the claims the gt won (best's low half is ~g), topk2
// (when 0 < topk2 ≠ topk), the normalisation, and the outputs of its positive anchors. target_boxes, target_scores and
// fg_mask must be zero and gt_index −1 beforehand. T is unused (the kernel reads no element data).
template <typename T>
__global__ void __launch_bounds__(tal::kFinalizeThreads)
    assigner_finalize(const float* __restrict__ anchors, const float* __restrict__ targets,
                      const int32_t* __restrict__ count, const int32_t* __restrict__ claim_anchor,
                      const float* __restrict__ claim_align, const float* __restrict__ claim_overlap,
                      const int32_t* __restrict__ n_claims, const uint64_t* __restrict__ best,
                      float* __restrict__ target_boxes, float* __restrict__ target_scores,
                      uint8_t* __restrict__ fg_mask, int32_t* __restrict__ gt_index, int64_t batch, int64_t n_anchors,
                      int64_t n_classes, int64_t n_max, int32_t topk, int32_t topk2, float eps) {
  const int64_t n = n_anchors;
  for (int64_t bg = vk::thread_index(); bg < batch * n_max; bg += vk::thread_count()) {
    const int64_t b = bg / n_max, g = bg % n_max;
    int64_t cnt = count[b];
    cnt = cnt < 0 ? 0 : (cnt > n_max ? n_max : cnt);
    if (g >= cnt) continue;
    const int nk = n_claims[bg];
    const int64_t base = bg * topk;
    bool keep[tal::kMaxTopk];
    int positive_align = 0;
    for (int j = 0; j < nk; ++j) {
      keep[j] = uint32_t(best[b * n + claim_anchor[base + j]]) == uint32_t(~uint32_t(g));
      positive_align += keep[j] && claim_align[base + j] > 0.0f;
    }
    if (topk2 > 0 && topk2 != topk) {
      int rank = 0;
      for (int j = 0; j < nk; ++j) {
        if (!keep[j]) continue;
        const int32_t a = claim_anchor[base + j];
        if (claim_align[base + j] > 0.0f) {
          keep[j] = rank++ < topk2;
        } else {
          int64_t below = 0;
          for (int q = 0; q < nk; ++q) below += keep[q] && claim_align[base + q] > 0.0f && claim_anchor[base + q] < a;
          keep[j] = int64_t(positive_align) + (int64_t(a) - below) < int64_t(topk2);
        }
      }
    }
    float max_align = 0.0f, max_overlap = 0.0f;
    for (int j = 0; j < nk; ++j)
      if (keep[j]) {
        max_align = fmaxf(max_align, claim_align[base + j]);
        max_overlap = fmaxf(max_overlap, claim_overlap[base + j]);
      }
    const float* row = targets + bg * 5;
    const int64_t cls = int64_t(row[0]);
    for (int j = 0; j < nk; ++j) {
      if (!keep[j]) continue;
      const int64_t a = claim_anchor[base + j];
      const float s = anchors[2 * n + a];
      gt_index[b * n + a] = int32_t(g);
      fg_mask[b * n + a] = 1;
      for (int q = 0; q < 4; ++q) target_boxes[(b * 4 + q) * n + a] = __fdiv_rn(row[1 + q], s);
      target_scores[(b * n_classes + cls) * n + a] =
          __fdiv_rn(__fmul_rn(claim_align[base + j], max_overlap), __fadd_rn(max_align, eps));
    }
  }
}

}  // namespace vision::models::yolo::kernels::loss
