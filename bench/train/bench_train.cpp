// bench_train: one YOLO26 training step — forward (both heads), E2ELoss with both assigners, backward, the optimizer
// step and the EMA update — through models::yolo::Yolo26Trainer, on random images with random boxes, per scale and
// compute dtype; prints one table (ms per step, images/s, and where the step's time goes) and JSON lines for run.sh.
//
//   bench_train [--scales n,s] [--dtypes f32,bf16,tf32,f16] [--batch 64] [--imgsz 640] [--steps 10] [--warmup 3]
//               [--optimizer SGD] [--json FILE] [--profile] [--unfused] [--dist] [--device cuda|cpu]
// --dist: data-parallel scaling (issue #30), run as ranks (`mpirun -np N bench_train --dist …`, bench/train/run_dist.sh):
// each rank a GPU, --batch images a rank (the job's batch N × --batch), the gradients all-reduced at every step; only
// the replayed step is timed (no eager or profile pass), each step started together (a barrier) and waited for, and
// rank 0 prints the job's images/s. --device cpu runs the same on CPU ranks (a logic check of the script).
// "tf32" is f32 with TF32 convolutions (TrainerOptions::tf32); --unfused turns the training plans' fusions off.
// The images live on the device (as the peer's do); the upload of the host batch is timed on its own and printed.
// Timing: `steps` iterations after `warmup`, each waited for, with the step captured and replayed (TrainerOptions::capture)
// and again with eager launches ("eager ms"); (the trainer reads the loss and the gradient norm back
// every step); the phases are timed in a second pass with TrainerOptions::profile (waits after each phase).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "vision/core/dtype.h"
#include "vision/dist/communicator.h"
#include "vision/graph/backend.h"
#include "vision/graph/plan.h"
#include "vision/models/yolo/trainer.h"
#include "vision/ops/cuda/cudnn_conv.h"

namespace {

using namespace vision;
namespace yolo = models::yolo;
using core::Shape;
using core::Tensor;

struct Batch {
  Tensor images, targets, count;
};

// Images of noise with bright boxes; 1–16 boxes an image of 80 classes (sides 16 px to a third of the image).
Batch random_batch(int64_t b, int64_t size, int64_t nc, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch r{Tensor::zeros(Shape{b, 3, size, size}), Tensor::zeros(Shape{b, 16, 5}),
          Tensor::zeros(Shape{b}, core::DType::i32)};
  float* img = r.images.data<float>();
  for (int64_t i = 0; i < r.images.numel(); ++i) img[i] = u(g);
  for (int64_t i = 0; i < b; ++i) {
    const int n = 1 + static_cast<int>(g() % 16);
    r.count.data<int32_t>()[i] = n;
    for (int k = 0; k < n; ++k) {
      const float w = 16 + u(g) * (size / 3.0f - 16), h = 16 + u(g) * (size / 3.0f - 16);
      const float x = u(g) * (size - w), y = u(g) * (size - h);
      float* t = r.targets.data<float>() + (i * 16 + k) * 5;
      t[0] = static_cast<float>(g() % static_cast<uint64_t>(nc)), t[1] = x, t[2] = y, t[3] = x + w, t[4] = y + h;
    }
  }
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("YOLO26 training step benchmark");
  std::string scales = "n,s", dtypes = "f32,bf16", optimizer = "SGD", json_path;
  int64_t batch = 64, imgsz = 640;
  int steps = 10, warmup = 3;
  app.add_option("--scales", scales);
  app.add_option("--dtypes", dtypes);
  app.add_option("--batch", batch);
  app.add_option("--imgsz", imgsz);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--optimizer", optimizer);
  app.add_option("--json", json_path);
  bool profile = false, unfused = false;
  app.add_flag("--profile", profile, "per-op profile of one step's forward and backward (stderr)");
  app.add_flag("--unfused", unfused, "no training-plan fusions (BatchNorm → SiLU as two ops): the before of a change");
  bool dist_mode = false;
  app.add_flag("--dist", dist_mode, "data-parallel scaling: run as MPI ranks, --batch images a rank");
  std::string device = "cuda";
  app.add_option("--device", device, "cuda, or cpu (a logic check)")->check(CLI::IsMember({"cuda", "cpu"}));
  std::string algorithms_path;
  app.add_option("--algorithms", algorithms_path,
                 "write the cuDNN algorithms chosen for every convolution geometry to this file at the end "
                 "(VISION_CUDNN_SEARCH=benchmark: chosen by measurement)");
  CLI11_PARSE(app, argc, argv);
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string x; std::getline(ss, x, ',');) out.push_back(x);
    return out;
  };
  try {
    std::shared_ptr<dist::Communicator> comm = dist_mode ? dist::world() : nullptr;
    const int ranks = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
    if (ranks > 1 && device == "cuda") dist::select_rank_gpu(*comm);  // before CUDA starts
    auto backend = graph::make_backend(graph::parse_device_choice(device));
    const bool lead = rank == 0;
    Batch b = random_batch(batch, imgsz, 80, 1 + static_cast<uint64_t>(rank));
    // The images on the device, as the PyTorch peer keeps them: the step's time without the host-to-device copy of
    // the batch (timed on its own below; a training loop overlaps it with the step before).
    const Tensor host_images = b.images;
    b.images = backend->upload(host_images);
    double upload_ms = 0;
    {
      std::vector<double> t;
      for (int i = 0; i < 5; ++i) {
        backend->synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        const Tensor d = backend->upload(host_images);
        backend->synchronize();
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      upload_ms = median(t);
    }
    std::ofstream json;
    if (!json_path.empty() && lead) json.open(json_path);
    if (!lead && !std::freopen("/dev/null", "w", stdout)) return 1;  // rank 0 alone prints
    if (dist_mode)
      fmt::print("YOLO26 data-parallel training step on {} ranks ({}): {} images a rank, the job's batch {}, {}x{}, "
                 "{} + EMA, the gradients all-reduced ({})\n",
                 ranks, device, batch, batch * ranks, imgsz, imgsz, optimizer, comm->backend());
    else
      fmt::print("YOLO26 training step (forward, E2ELoss, backward, {} + EMA), batch {}, {}x{}, 80 classes, images on "
                 "the device (their upload from pageable host memory: {:.2f} ms, not included)\n",
                 optimizer, batch, imgsz, imgsz, upload_ms);
    fmt::print("{:<6} {:<5} {:>10} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10}\n", "scale", "dtype", "ms/step", "img/s",
               "replayed", "eager ms", "fwd+loss", "backward", "optim+ema");
    for (const std::string& sc : split(scales))
      for (const std::string& dt : split(dtypes)) {
        const yolo::ModelInfo info = yolo::default_model_info({.scale = yolo::parse_scale(sc), .nc = 80});
        yolo::TrainerOptions o;
        o.epochs = 100;
        o.batch = batch * ranks;  // the job's batch
        if (ranks > 1) o.comm = comm;
        o.batches_per_epoch = 1000;
        o.imgsz = imgsz;
        o.optimizer = optimizer;
        o.warmup_epochs = 0;
        o.tf32 = dt == "tf32";  // f32 with TF32 convolutions
        o.dtype = core::parse_dtype(o.tf32 ? "f32" : dt);
        o.layout = o.dtype == core::DType::f32 ? core::Layout::nchw : core::Layout::nhwc;
        o.fuse = !unfused;
        std::vector<double> ms, eager_ms, fwd, bwd, opt;
        if (!dist_mode) {  // the same steps with eager launches (no captured graph)
          yolo::TrainerOptions e = o;
          e.capture = false;
          yolo::Yolo26Trainer t(backend, info, yolo::initial_weights(info), e);
          for (int i = 0; i < warmup + steps; ++i) {
            backend->synchronize();
            const auto t0 = std::chrono::steady_clock::now();
            t.train_batch(b.images, b.targets, b.count);
            backend->synchronize();
            if (i >= warmup)
              eager_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
        }
        bool replayed = false;
        {
          yolo::Yolo26Trainer t(backend, info, yolo::initial_weights(info), o);
          for (int i = 0; i < warmup; ++i) t.train_batch(b.images, b.targets, b.count);
          for (int i = 0; i < steps; ++i) {
            backend->synchronize();
            if (comm) comm->barrier();  // the ranks start each step together
            const auto t0 = std::chrono::steady_clock::now();
            t.train_batch(b.images, b.targets, b.count);
            backend->synchronize();
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
          if (comm) {  // the slowest rank's median
            int64_t mine = static_cast<int64_t>(median(ms) * 1000);
            const double job = static_cast<double>(comm->all_reduce_max(mine)) / 1000;
            ms.assign(1, job);
          }
          replayed = t.step_replayed();
          if (!replayed && !t.step_replay_error().empty())
            std::fprintf(stderr, "bench_train: the step runs eagerly: %s\n", t.step_replay_error().c_str());
          if (profile) {
            // The training plan's steps: the forward (the plan's inputs as the trainer gives them: the batch's 16
            // target rows are its bucket) and one train_batch's backward.
            graph::Plan& plan = *t.executor().last_train_plan();
            const std::array<float, 2> w = t.loss_weights();
            const Tensor weights = Tensor::from_vector(Shape{2}, std::vector<float>{w[0], w[1]});
            const auto fwd = plan.profile_forward({t.model_input(b.images), b.targets, b.count, weights}, 5);
            std::vector<graph::Plan::StepTime> bwd;
            plan.set_backward_profile(&bwd);
            t.train_batch(b.images, b.targets, b.count);
            plan.set_backward_profile(nullptr);
            std::fprintf(stderr, "--- YOLO26%s %s forward (train mode)\n%s--- backward\n%s", sc.c_str(), dt.c_str(),
                         graph::Plan::format_profile(fwd, 25).c_str(), graph::Plan::format_profile(bwd, 25).c_str());
          }
        }
        if (!dist_mode) {
          o.profile = true;
          yolo::Yolo26Trainer t(backend, info, yolo::initial_weights(info), o);
          for (int i = 0; i < warmup + steps; ++i) {
            const yolo::IterationResult r = t.train_batch(b.images, b.targets, b.count);
            if (i < warmup) continue;
            fwd.push_back(r.timing.forward), bwd.push_back(r.timing.backward), opt.push_back(r.timing.optimizer);
          }
        }
        const double m = median(ms);
        fmt::print("{:<6} {:<5} {:>10.2f} {:>9.1f} {:>9} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f}\n", sc, dt, m,
                   batch * ranks * 1000.0 / m, replayed ? "yes" : "no", median(eager_ms), median(fwd), median(bwd),
                   median(opt));
        std::fflush(stdout);
        if (json)
          json << fmt::format(
              "{{\"side\": \"ours\", \"scale\": \"{}\", \"dtype\": \"{}\", \"batch\": {}, \"imgsz\": {}, \"ms\": {:.4f}, "
              "\"eager_ms\": {:.4f}, \"forward_ms\": {:.4f}, \"backward_ms\": {:.4f}, \"optimizer_ms\": {:.4f}, "
              "\"fused\": {}, \"ranks\": {}, \"images_per_second\": {:.2f}}}\n",
              sc, dt, batch, imgsz, m, median(eager_ms), median(fwd), median(bwd), median(opt), !unfused, ranks,
              batch * ranks * 1000.0 / m);
      }
    if (!algorithms_path.empty()) {
      std::ofstream a(algorithms_path);
      a << "# cuDNN algorithms (search: "
        << (ops::cuda_impl::search_mode() == ops::cuda_impl::ConvSearch::benchmark ? "benchmark" : "heuristic")
        << ")\n";
      for (const std::string& line : ops::cuda_impl::chosen_algorithms()) a << line << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
