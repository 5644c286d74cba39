// Detect decode — raw LTRB [B, 4, A] + anchor grid [3, A] (anchor_x, anchor_y, stride; f32) → boxes [B, 4, A] in one
// pass, and the backward of the grid mode. Modes as DecodeMode in detect_decode.h: 0 pixels, 1 grid, 2 cxcywh.
#pragma once

#include "vision/cuda/kernel_common.cuh"

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
    const float x1 = ax - vk::to_float(in[0]), y1 = ay - vk::to_float(in[n_anchors]);
    const float x2 = ax + vk::to_float(in[2 * n_anchors]), y2 = ay + vk::to_float(in[3 * n_anchors]);
    float o0 = x1, o1 = y1, o2 = x2, o3 = y2;
    if (mode == 2) o0 = (x1 + x2) * 0.5f, o1 = (y1 + y2) * 0.5f, o2 = x2 - x1, o3 = y2 - y1;
    out[0] = vk::from_float<T>(o0 * s);
    out[n_anchors] = vk::from_float<T>(o1 * s);
    out[2 * n_anchors] = vk::from_float<T>(o2 * s);
    out[3 * n_anchors] = vk::from_float<T>(o3 * s);
  }
}

// Grid-mode backward, one element per thread: d_ltrb = (−dx1, −dy1, dx2, dy2).
template <typename T>
__global__ void detect_decode_backward(const T* __restrict__ grad_boxes, T* __restrict__ grad_ltrb, int64_t batch,
                                       int64_t n_anchors) {
  for (int64_t i = vk::thread_index(); i < batch * 4 * n_anchors; i += vk::thread_count()) {
    const float g = vk::to_float(grad_boxes[i]);
    grad_ltrb[i] = vk::from_float<T>((i / n_anchors) % 4 < 2 ? -g : g);
  }
}

}  // namespace vision::models::yolo::kernels
