// Detect decode — raw LTRB [B, 4, A] + anchor grid [3, A] (anchor_x, anchor_y, stride; f32) → boxes [B, 4, A] in one
// pass, and the backward of the grid mode. Modes as DecodeMode in detect_decode.h: 0 pixels, 1 grid, 2 cxcywh. The
// per-anchor arithmetic is detect_decode_math.cuh, which the CPU twin calls too.
#pragma once

#include "vision/cuda/kernel_common.cuh"
#include "vision/models/yolo/kernels/detect_decode_math.cuh"

namespace vision::models::yolo::kernels {

// One thread per (b, a): reads the four distances, writes the four box coordinates, all computed in f32.
template <typename T>
__global__ void detect_decode_forward(const T* __restrict__ ltrb, const float* __restrict__ anchors,
                                      T* __restrict__ boxes, int64_t batch, int64_t n_anchors, int32_t mode) {
  for (int64_t i = vk::thread_index(); i < batch * n_anchors; i += vk::thread_count()) {
    const int64_t b = i / n_anchors, a = i % n_anchors;
    const T* in = ltrb + b * 4 * n_anchors + a;
    T* out = boxes + b * 4 * n_anchors + a;
    const float ax = anchors[a], ay = anchors[n_anchors + a];
    const float s = mode == 1 ? 1.0f : anchors[2 * n_anchors + a];
    const float l = vk::to_float(in[0]), t = vk::to_float(in[n_anchors]);  // loaded in this order
    const float r = vk::to_float(in[2 * n_anchors]), bt = vk::to_float(in[3 * n_anchors]);
    float o[4];
    decode_math::decode_box(ax, ay, s, l, t, r, bt, mode == 2, o);
    out[0] = vk::from_float<T>(o[0]);
    out[n_anchors] = vk::from_float<T>(o[1]);
    out[2 * n_anchors] = vk::from_float<T>(o[2]);
    out[3 * n_anchors] = vk::from_float<T>(o[3]);
  }
}

// Grid-mode backward, one element per thread: d_ltrb = (−dx1, −dy1, dx2, dy2).
template <typename T>
__global__ void detect_decode_backward(const T* __restrict__ grad_boxes, T* __restrict__ grad_ltrb, int64_t batch,
                                       int64_t n_anchors) {
  for (int64_t i = vk::thread_index(); i < batch * 4 * n_anchors; i += vk::thread_count()) {
    grad_ltrb[i] = vk::from_float<T>(decode_math::backward_ltrb(vk::to_float(grad_boxes[i]), i, n_anchors));
  }
}

}  // namespace vision::models::yolo::kernels
