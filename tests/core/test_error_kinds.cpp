// vision::Error's kind (core/error.h): a bad file's content is ErrorKind::input, a bad option or call argument, CUDA
// failures device (memory running out: out_of_memory), and the loader's refusal of a batch larger than the machine's
// memory out_of_memory.
#include <gtest/gtest.h>

#include <functional>

#include "test_util.h"
#include "vision/core/error.h"
#include "vision/core/safetensors.h"
#include "vision/data/dataset.h"
#include "vision/data/image.h"
#include "vision/detector.h"
#ifdef VISION_HAS_CUDA
#include "vision/cuda/check.h"
#endif

namespace vision {
namespace {

std::optional<ErrorKind> kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return std::nullopt;
}

TEST(ErrorKinds, EachFailureSaysWhoseProblemItIs) {
  test::TempDir dir;
  const auto bad_image = dir.path() / "bad.jpg";
  test::write_file(bad_image, "not an image");
  EXPECT_EQ(kind_of([&] { data::read_image(bad_image); }), ErrorKind::input);
  EXPECT_EQ(kind_of([&] { data::read_image(dir.path() / "missing.png"); }), ErrorKind::input);
  const auto bad_weights = dir.path() / "w.safetensors";
  test::write_file(bad_weights, std::string("\x10\0\0\0\0\0\0\0{\"a\":", 13));
  EXPECT_EQ(kind_of([&] { core::read_safetensors(bad_weights); }), ErrorKind::input);
  const auto bad_data = dir.path() / "data.yaml";
  test::write_file(bad_data, "names: [a, b\n");
  EXPECT_EQ(kind_of([&] { data::load_dataset(bad_data, "train"); }), ErrorKind::input);
  // Arguments: a detector option, a view with no pixels, an output path that cannot be written.
  const auto model = std::filesystem::path(VISION_SOURCE_DIR) / "assets" / "yolo26n_synth.safetensors";
  EXPECT_EQ(kind_of([&] { Detector(model, {.device = "cpu", .imgsz = std::array<int64_t, 2>{100, 100}}); }),
            ErrorKind::argument);
  EXPECT_EQ(kind_of([&] { data::to_image(data::ImageView(nullptr, 4, 4)); }), ErrorKind::argument);
  EXPECT_EQ(kind_of([&] { data::write_image(data::Image(4, 4), dir.path() / "no" / "such" / "dir.png"); }),
            ErrorKind::argument);
  EXPECT_EQ(error_kind_name(ErrorKind::out_of_memory), "out of memory");
}

#ifdef VISION_HAS_CUDA
TEST(ErrorKinds, CudaFailuresAreTheDevicesAndMemoryIsItsOwn) {
  EXPECT_EQ(kind_of([] { cuda::throw_cuda_error(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "x.cpp", 1); }),
            ErrorKind::out_of_memory);
  EXPECT_EQ(kind_of([] { cuda::throw_cuda_error(cudaErrorLaunchFailure, "kernel<<<>>>", "x.cpp", 2); }),
            ErrorKind::device);
  EXPECT_EQ(kind_of([] { cuda::throw_nvrtc_error(NVRTC_ERROR_COMPILATION, "nvrtcCompileProgram", "x.cpp", 3); }),
            ErrorKind::device);
}
#endif

}  // namespace
}  // namespace vision
