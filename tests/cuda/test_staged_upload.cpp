// CudaBackendContext::copy_to_device through cuda::StagedUploader: the caller may free or overwrite its source as
// soon as the call returns, the call does not wait for work queued before it, large copies go through in chunks, a
// pinned source is copied directly, and misuse (a device source, a copy while capturing) is an error.
#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "test_util.h"
#include "vision/cuda/check.h"
#include "vision/cuda/device.h"
#include "vision/cuda/memory.h"
#include "vision/graph/cuda/cuda_backend.h"

using namespace vision;
using graph::CudaBackendContext;

namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& b : v) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(s >> 24);
  }
  return v;
}

std::vector<uint8_t> download(CudaBackendContext& ctx, const void* src, size_t n) {
  std::vector<uint8_t> out(n);
  ctx.copy_to_host(out.data(), src, n);  // ordered after the uploads on the context's stream
  return out;
}

// Holds a stream: a host function (hold) that waits, up to 10 s, for `released`, and records whether it saw it.
struct Gate {
  std::atomic<bool> released{false};
  std::atomic<bool> saw_release{false};
  static void hold(void* p) {
    auto* g = static_cast<Gate*>(p);
    for (int i = 0; i < 10000 && !g->released.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g->saw_release = g->released.load();
  }
};

}  // namespace

// Sizes below, at and above the chunk size; the source is overwritten and freed right after each call.
TEST(StagedUpload, SourceMayBeReusedOnReturn) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  constexpr size_t kChunk = cuda::StagedUploader::kChunkBytes;
  for (size_t n : {size_t{1}, size_t{1000}, (size_t{64} << 10) + 3, kChunk, 3 * kChunk + 12345}) {
    const std::vector<uint8_t> expected = pattern(n, static_cast<uint32_t>(n));
    auto dst = ctx.allocate(n);
    auto src = std::make_unique<std::vector<uint8_t>>(expected);
    ctx.copy_to_device(dst.get(), src->data(), n);
    std::memset(src->data(), 0xab, n);
    src.reset();
    EXPECT_EQ(download(ctx, dst.get(), n), expected) << n << " bytes";
  }
}

// Back-to-back uploads from one host buffer rewritten between calls: each staging buffer is reused only after the
// copy that read it is done.
TEST(StagedUpload, BackToBackUploadsKeepTheirOwnBytes) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  constexpr size_t kPart = (size_t{1} << 20) + 17;
  constexpr int kParts = 24;
  auto dst = ctx.allocate(kPart * kParts);
  std::vector<uint8_t> host;
  std::vector<uint8_t> expected;
  for (int i = 0; i < kParts; ++i) {
    host = pattern(kPart, 100 + i);
    expected.insert(expected.end(), host.begin(), host.end());
    ctx.copy_to_device(static_cast<uint8_t*>(dst.get()) + kPart * i, host.data(), kPart);
  }
  EXPECT_EQ(download(ctx, dst.get(), kPart * kParts), expected);
}

// A pageable upload queued behind 300 ms of stream work returns without waiting for it.
TEST(StagedUpload, DoesNotWaitForTheStream) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  constexpr size_t n = size_t{4} << 20;
  auto dst = ctx.allocate(n);
  std::vector<uint8_t> warm(n, 1);
  ctx.copy_to_device(dst.get(), warm.data(), n);  // grows the staging buffers
  ctx.copy_to_device(dst.get(), warm.data(), n);
  ctx.synchronize();

  // The stream is held by a host function that waits (up to 10 s) for a flag the test sets only after
  // copy_to_device returned. A copy that waited for the stream would keep the flag unset until the host function
  // gave up, and the host function would then report that it never saw the flag. No clock decides the outcome.
  Gate gate;
  VISION_CUDA_CHECK(cudaLaunchHostFunc(ctx.stream(), Gate::hold, &gate));
  const std::vector<uint8_t> expected = pattern(n, 7);
  std::vector<uint8_t> src = expected;
  ctx.copy_to_device(dst.get(), src.data(), n);
  gate.released = true;
  std::fill(src.begin(), src.end(), uint8_t{0});
  ctx.synchronize();
  EXPECT_TRUE(gate.saw_release.load()) << "copy_to_device waited for the stream";
  EXPECT_EQ(download(ctx, dst.get(), n), expected);
}

// A pinned source is copied without staging, and still may be reused once the call returns.
TEST(StagedUpload, PinnedSourceIsCopiedDirectly) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  constexpr size_t n = (size_t{40} << 20) + 5;  // more than one chunk
  const std::vector<uint8_t> expected = pattern(n, 3);
  cuda::PinnedBytes pinned = cuda::pinned_alloc(n);
  std::memcpy(pinned.get(), expected.data(), n);
  auto dst = ctx.allocate(n);
  ctx.copy_to_device(dst.get(), pinned.get(), n);
  std::memset(pinned.get(), 0, n);
  EXPECT_EQ(download(ctx, dst.get(), n), expected);
}

TEST(StagedUpload, MisuseIsAnError) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  auto a = ctx.allocate(256), b = ctx.allocate(256);
  try {
    ctx.copy_to_device(a.get(), b.get(), 256);
    FAIL() << "a device source was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device memory"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> host(256, 1);
  try {
    ctx.capture([&] { ctx.copy_to_device(a.get(), host.data(), host.size()); });
    FAIL() << "an upload was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured into a CUDA graph"), std::string::npos) << e.what();
  }
  ctx.copy_to_device(a.get(), host.data(), host.size());  // the context still works
  EXPECT_EQ(download(ctx, a.get(), host.size()), host);
}

// cuda::ReplayableUpload (an optimizer step's settings in a captured training step): a graph that captured queue()
// copies what was staged last at each replay, and stage() does not overwrite the pinned buffer while a replayed copy
// that reads it is still queued (the copy is held behind a host function until after stage() was called on another
// thread: a stage() that did not wait would write its bytes before the copy ran, and the device would hold them).
TEST(ReplayableUpload, ReplaysCopyWhatWasStagedLast) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  cuda::ReplayableUpload up(3 * sizeof(float));
  auto device = [&] {
    std::vector<float> v(3);
    ctx.copy_to_host(v.data(), up.device(), sizeof(float) * 3);
    return v;
  };
  const std::vector<float> a{1, 2, 3}, b{4, 5, 6}, c{7, 8, 9}, d{10, 11, 12};
  up.stage(a.data(), 12);
  auto graph = cuda::CapturedGraph::capture(ctx.stream(), [&] { up.queue(ctx.stream()); });
  EXPECT_EQ(graph->launches(), 1u);
  up.stage(b.data(), 12);
  graph->replay(ctx.stream());
  EXPECT_EQ(device(), b);
  up.stage(c.data(), 12);

  Gate gate;
  VISION_CUDA_CHECK(cudaLaunchHostFunc(ctx.stream(), Gate::hold, &gate));
  graph->replay(ctx.stream());  // its copy waits behind the host function
  std::atomic<bool> staged{false};
  std::thread other([&] {
    up.stage(d.data(), 12);
    staged = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // time for a stage() that does not wait to write d
  EXPECT_FALSE(staged.load()) << "stage() did not wait for the replayed copy";
  gate.released = true;
  other.join();
  ctx.synchronize();
  EXPECT_TRUE(gate.saw_release.load());
  EXPECT_EQ(device(), c) << "the replay copied bytes staged after it was launched";
  up.queue(ctx.stream());  // eagerly
  EXPECT_EQ(device(), d);
  EXPECT_THROW(up.stage(d.data(), 8), Error);
}

// copy_2d (concat and split in NHWC): every unit width the kernel picks (16, 8, 4, 2 and 1 bytes, from the alignment
// of addresses, width and pitches), runs shorter and longer than a unit, and bytes outside the runs left alone.
TEST(CopyRows, MovesExactlyTheRunsForEveryAlignment) {
  VISION_SKIP_WITHOUT_GPU(cuda::gpu_available());
  CudaBackendContext ctx;
  struct Case {
    size_t width, rows, src_pitch, dst_pitch, src_offset, dst_offset;
  };
  const Case cases[] = {
      {32, 1000, 96, 64, 32, 0},     // f16 NHWC: 16 of 48 channels → 16 of 32 (16-byte units)
      {48, 333, 48, 144, 0, 96},     // into the middle of a wider row
      {24, 257, 40, 24, 8, 0},       // 8-byte units
      {12, 100, 20, 36, 4, 12},      // 4-byte units
      {6, 77, 10, 14, 2, 6},         // 2-byte units (f16 triples)
      {5, 31, 7, 9, 3, 1},           // bytes
      {4096, 9, 8192, 4096, 4096, 0},  // long runs
  };
  for (const Case& c : cases) {
    const size_t src_bytes = c.src_offset + c.rows * c.src_pitch, dst_bytes = c.dst_offset + c.rows * c.dst_pitch;
    const auto src = pattern(src_bytes, 1), poison = pattern(dst_bytes, 2);
    auto dsrc = ctx.allocate(src_bytes), ddst = ctx.allocate(dst_bytes);
    ctx.copy_to_device(dsrc.get(), src.data(), src_bytes);
    ctx.copy_to_device(ddst.get(), poison.data(), dst_bytes);
    ctx.copy_2d(static_cast<uint8_t*>(ddst.get()) + c.dst_offset, c.dst_pitch,
                static_cast<const uint8_t*>(dsrc.get()) + c.src_offset, c.src_pitch, c.width, c.rows);
    std::vector<uint8_t> want = poison;
    for (size_t r = 0; r < c.rows; ++r)
      std::memcpy(want.data() + c.dst_offset + r * c.dst_pitch, src.data() + c.src_offset + r * c.src_pitch, c.width);
    EXPECT_EQ(download(ctx, ddst.get(), dst_bytes), want) << "width " << c.width << ", rows " << c.rows;
  }
}
