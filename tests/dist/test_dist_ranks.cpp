// Data-parallel training on CPU ranks (issue #30): these tests run as 2 ranks, under mpirun (CTest's DistRanks.Mpirun2,
// `mpirun --oversubscribe -np 2 vision_tests --gtest_filter='DistRanks.*'`) and over TCP as torchrun's environment
// launches them (DistRanks.Tcp2, `tests/dist/run_ranks.sh 2 vision_tests --gtest_filter='DistRanks.*'`); run alone
// they fail and say so.
//  1. the all-reduced gradient is, to f32 rounding, the sum of the gradients each rank's batch gives in a process of
//     its own (ultralytics' DDP averages the gradients of the loss × world size: the same sum);
//  2. after 5 optimizer steps on different batches every rank holds bit-identical parameters, buffers, optimizer state
//     and EMA — and without the all-reduce (the control) they differ;
//  3. the ranks' loader shards together are the single-rank epoch, image for image.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "models/yolo/trainer_test_util.h"
#include "test_util.h"
#include "vision/data/loader.h"
#include "vision/data/synth/shapes.h"
#include "vision/dist/communicator.h"
#include "vision/graph/backend.h"

namespace vision::test {
namespace {

using namespace trainer_util;

std::shared_ptr<dist::Communicator> ranks_or_fail() {
  std::shared_ptr<dist::Communicator> comm = dist::world();
  comm->set_timeout(std::chrono::seconds(120));
  return comm;
}

// What the trainer tests start from: the ranks, the tiny model, its initial weights, and options for a job of 2 images
// a rank that takes an optimizer step every `batches_per_step` batches.
struct Job {
  std::shared_ptr<dist::Communicator> comm = ranks_or_fail();
  int world = comm->world(), rank = comm->rank();
  yolo::ModelInfo info = tiny_info();
  core::SafetensorsFile init = yolo::initial_weights(info);
  yolo::TrainerOptions options(int64_t batches_per_step) const {
    yolo::TrainerOptions o = tiny_options();
    o.batch = 2 * world;  // the job's batch: 2 images a rank
    o.nbs = batches_per_step * o.batch;
    return o;
  }
};

#define REQUIRE_RANKS(comm)                                                                                      \
  if ((comm)->world() < 2)                                                                                       \
    GTEST_FAIL() << "DistRanks runs as several ranks: ctest -R DistRanks (mpirun -np 2, or "                   \
                    "tests/dist/run_ranks.sh 2 vision_tests --gtest_filter='DistRanks.*'); this process is a world " \
                    "of one"

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t hash_named(const std::vector<std::pair<std::string, core::Tensor>>& tensors, uint64_t h) {
  for (const auto& [name, t] : tensors) {
    h = fnv1a(name.data(), name.size(), h);
    h = fnv1a(t.raw(), static_cast<size_t>(t.numel()) * core::dtype_size(t.dtype()), h);
  }
  return h;
}

// Every piece of training state a rank holds: parameters and buffers (by key), optimizer state, EMA.
struct StateHashes {
  uint64_t model = 0, optimizer = 0, ema = 0;
  std::string bytes() const { return std::string(reinterpret_cast<const char*>(this), sizeof *this); }
};
StateHashes hashes(yolo::Yolo26Trainer& t) {
  StateHashes h;
  h.model = hash_named(t.executor().state().to_host(), 1469598103934665603ull);
  h.optimizer = hash_named(t.optimizer().state_dict(), 1469598103934665603ull);
  h.ema = t.ema() ? hash_named(t.ema()->to_host(), 1469598103934665603ull) : 0;
  return h;
}

std::vector<float> grads_of(yolo::Yolo26Trainer& t) {
  return t.executor().state().flat_grads().to_vector();
}

TEST(DistRanks, GradientAllReduceIsTheSumOfTheRanksGradients) {
  const Job job;
  REQUIRE_RANKS(job.comm);
  const auto& [comm, world, rank, info, init] = job;
  yolo::TrainerOptions o = job.options(4);  // accumulate 4: no optimizer step in this test
  auto batch_of = [](int r) { return make_batch(2, 100 + static_cast<uint64_t>(r)); };

  // Each rank's gradient alone, every rank computing all of them in a process of its own (no communicator).
  std::vector<std::vector<float>> alone;
  for (int r = 0; r < world; ++r) {
    yolo::Yolo26Trainer single(graph::cpu_backend(), info, init, o);
    const Batch b = batch_of(r);
    ASSERT_FALSE(single.train_batch(b.images, b.targets, b.count).stepped);
    alone.push_back(grads_of(single));
  }
  std::vector<double> want(alone[0].size(), 0.0);
  for (const auto& g : alone)
    for (size_t i = 0; i < g.size(); ++i) want[i] += g[i];

  o.comm = comm;
  yolo::Yolo26Trainer ranked(graph::cpu_backend(), info, init, o);
  const Batch mine = batch_of(rank);
  ASSERT_FALSE(ranked.train_batch(mine.images, mine.targets, mine.count).stepped);
  const std::vector<float> local = grads_of(ranked);
  EXPECT_EQ(local, alone[static_cast<size_t>(rank)]) << "the rank's own gradient before the all-reduce";
  ranked.all_reduce_gradients();
  const std::vector<float> reduced = grads_of(ranked);
  ASSERT_EQ(reduced.size(), want.size());
  double err = 0, ref = 0, diff_local = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (reduced[i] - want[i]) * (reduced[i] - want[i]);
    ref += want[i] * want[i];
    diff_local += (reduced[i] - local[i]) * (reduced[i] - local[i]);
    // Each element: the f32 sum of the ranks' values rounds each addition once (2^-24 of the terms' magnitudes).
    double magnitude = 0;
    for (const auto& g : alone) magnitude += std::abs(double(g[i]));
    if (magnitude > 0) worst = std::max(worst, std::abs(reduced[i] - want[i]) / magnitude);
  }
  EXPECT_LE(worst, 0x1p-24 * (world - 1)) << "the worst element's error, relative to its terms";
  const double rel = std::sqrt(err / ref);
  std::printf("  rank %d: %zu gradients, ‖all-reduced − Σ alone‖/‖Σ alone‖ = %.3g (‖Σ‖ %.4g, ‖Σ − own‖ %.4g)\n", rank,
              want.size(), rel, std::sqrt(ref), std::sqrt(diff_local));
  EXPECT_LE(rel, 1e-6 * world);  // one f32 rounding per addition
  EXPECT_GT(std::sqrt(diff_local), 1e-3 * std::sqrt(ref)) << "the ranks' batches should give different gradients";
  // And the same bits on every rank.
  const std::vector<std::string> all = comm->all_gather(std::string(reinterpret_cast<const char*>(reduced.data()),
                                                                    reduced.size() * sizeof(float)));
  for (int r = 1; r < world; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], all[0]) << "rank " << r;
}

TEST(DistRanks, FiveStepsLeaveEveryRankBitIdentical) {
  const Job job;
  REQUIRE_RANKS(job.comm);
  const auto& [comm, world, rank, info, init] = job;
  for (const char* optimizer : {"SGD", "AdamW"}) {
    for (const bool reduce : {true, false}) {  // false: the control, each rank on its own
      yolo::TrainerOptions o = job.options(1);  // a step per batch
      o.optimizer = optimizer;
      if (reduce) o.comm = comm;
      yolo::Yolo26Trainer t(graph::cpu_backend(), info, init, o);
      for (int step = 0; step < 5; ++step) {
        const Batch b = make_batch(2, 1000 + static_cast<uint64_t>(step * world + rank));
        const yolo::IterationResult r = t.train_batch(b.images, b.targets, b.count);
        ASSERT_TRUE(r.stepped && r.step.applied) << optimizer << " step " << step;
      }
      EXPECT_EQ(t.optimizer().steps(), 5);
      const StateHashes mine = hashes(t);
      const std::vector<std::string> all = comm->all_gather(mine.bytes());
      for (int r = 1; r < world; ++r) {
        StateHashes other;
        std::memcpy(&other, all[static_cast<size_t>(r)].data(), sizeof other);
        StateHashes first;
        std::memcpy(&first, all[0].data(), sizeof first);
        if (reduce) {
          EXPECT_EQ(other.model, first.model) << optimizer << ": parameters and buffers of rank " << r;
          EXPECT_EQ(other.optimizer, first.optimizer) << optimizer << ": optimizer state of rank " << r;
          EXPECT_EQ(other.ema, first.ema) << optimizer << ": EMA of rank " << r;
        } else {
          EXPECT_NE(other.model, first.model) << optimizer << ": the control (no all-reduce) should differ";
          EXPECT_NE(other.ema, first.ema) << optimizer << ": the control's EMA should differ";
        }
      }
    }
  }
}

// The gradient all-reduce in buckets started beside the backward (TrainerOptions::overlap_reduction, as DDP does):
// most buckets start before the backward is done, and two steps leave the same bits as one all-reduce after the
// backward (two ranks' sums do not depend on how the buffer is cut).
TEST(DistRanks, GradientBucketsStartBesideTheBackward) {
  const Job job;
  REQUIRE_RANKS(job.comm);
  const auto& [comm, world, rank, info, init] = job;
  std::vector<uint64_t> model_hash;
  for (const bool overlap : {true, false}) {
    yolo::TrainerOptions o = job.options(1);  // a step per batch
    o.comm = comm;
    o.overlap_reduction = overlap;
    o.bucket_floats = size_t{1} << 15;
    yolo::Yolo26Trainer t(graph::cpu_backend(), info, init, o);
    for (int step = 0; step < 2; ++step) {
      const Batch b = make_batch(2, 500 + static_cast<uint64_t>(step * world + rank));
      ASSERT_TRUE(t.train_batch(b.images, b.targets, b.count).stepped);
    }
    model_hash.push_back(hashes(t).model);
    if (overlap) {
      std::printf("  rank %d: %zu of %zu buckets started beside the backward\n", rank, t.buckets_beside_backward(),
                  t.gradient_buckets());
      EXPECT_GT(t.gradient_buckets(), 10u);
      EXPECT_GE(t.buckets_beside_backward(), t.gradient_buckets() - 1) << "every bucket but the first layers' one";
    } else {
      EXPECT_EQ(t.buckets_beside_backward(), 0u);
    }
  }
  EXPECT_EQ(model_hash[0], model_hash[1]) << "bucketed beside the backward or whole after it: the same sums";
}

// Rows [begin, begin + n) of every tensor of a batch (images, targets, counts).
Batch rows_of(const Batch& b, int64_t begin, int64_t n) {
  return {batch_rows(b.images, begin, n), batch_rows(b.targets, begin, n), batch_rows(b.count, begin, n)};
}

// Every BatchNorm's running mean and variance, in state order.
std::vector<float> running_statistics(yolo::Yolo26Trainer& t) {
  std::vector<float> v;
  for (const auto& [name, tensor] : t.executor().state().to_host())
    if (name.ends_with(".running_mean") || name.ends_with(".running_var")) {
      const std::vector<float> part = tensor.to_vector();
      v.insert(v.end(), part.begin(), part.end());
    }
  return v;
}

// --sync-bn (TrainerOptions::sync_bn): the ranks' BatchNorms take their statistics over the job's batch, so after a
// batch each rank's running statistics are those of one process training on the whole batch (to f32 rounding), the
// same bits on every rank; without it (DDP's default, the control) they are each rank's own.
TEST(DistRanks, SyncBatchNormTakesTheStatisticsOfTheJobsBatch) {
  const Job job;
  REQUIRE_RANKS(job.comm);
  const auto& [comm, world, rank, info, init] = job;
  yolo::TrainerOptions o = job.options(4);  // no optimizer step: the running statistics are the forward's alone
  const Batch whole = make_batch(o.batch, 77);
  yolo::Yolo26Trainer single(graph::cpu_backend(), info, init, o);
  ASSERT_FALSE(single.train_batch(whole.images, whole.targets, whole.count).stepped);
  const std::vector<float> want = running_statistics(single);
  ASSERT_FALSE(want.empty());
  for (const bool sync : {true, false}) {
    o.comm = comm;
    o.sync_bn = sync;
    yolo::Yolo26Trainer ranked(graph::cpu_backend(), info, init, o);
    const Batch mine = rows_of(whole, 2 * rank, 2);
    ASSERT_FALSE(ranked.train_batch(mine.images, mine.targets, mine.count).stepped);
    const std::vector<float> got = running_statistics(ranked);
    const double err = rel_error(got, want), worst = max_abs_error(got, want) / max_abs(want);
    std::printf("  rank %d, sync_bn %d: ‖running statistics − the whole batch's‖/‖·‖ = %.3g, max |·| / max |want| = %.3g\n",
                rank, sync ? 1 : 0, err, worst);
    const std::vector<std::string> all =
        comm->all_gather(std::string(reinterpret_cast<const char*>(got.data()), got.size() * sizeof(float)));
    if (sync) {
      EXPECT_LT(err, 1e-6) << "synchronised statistics are the job's batch's";
      EXPECT_LT(worst, 1e-6) << "every element of them";
      for (int r = 1; r < world; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], all[0]) << "rank " << r;
    } else {
      EXPECT_GT(err, 1e-4) << "the control: each rank's own batch";
      EXPECT_NE(all[1], all[0]) << "the control: the ranks' batches differ";
    }
  }
}

TEST(DistRanks, ShardsTogetherAreTheSingleRankEpoch) {
  const auto comm = ranks_or_fail();
  REQUIRE_RANKS(comm);
  const int world = comm->world(), rank = comm->rank();
  TempDir dir;  // each rank writes the same synthetic dataset (same seed) into a folder of its own
  data::synth::DatasetOptions so;
  so.out = dir.path() / "shapes";
  so.train = 11, so.val = 1, so.imgsz = 64, so.seed = 5;
  data::synth::write_dataset(so);
  const data::Dataset d = data::load_dataset(so.out / "data.yaml", "train");
  const size_t n = 11;
  data::LoaderOptions lo;
  lo.imgsz = 64, lo.workers = 2, lo.seed = 9, lo.prefetch = 2;
  lo.batch = 1;
  data::TrainLoader single(d, lo);
  lo.batch = 2;
  lo.rank = rank, lo.world = world;
  data::TrainLoader sharded(d, lo);
  for (int64_t epoch : {0, 1}) {
    // The single-rank epoch: each position's sample and a hash of its image.
    std::vector<std::pair<size_t, uint64_t>> whole;
    single.start_epoch(epoch, true);
    while (auto b = single.next()) whole.emplace_back(b->samples[0], fnv1a(b->images.raw(), b->images.nbytes()));
    ASSERT_EQ(whole.size(), n);
    // This rank's shard, serialised as (sample, hash) pairs.
    std::string mine;
    sharded.start_epoch(epoch, true);
    while (auto b = sharded.next()) {
      const size_t per = b->images.nbytes() / static_cast<size_t>(b->images.dim(0));
      for (int64_t s = 0; s < b->images.dim(0); ++s) {
        const uint64_t pair[2] = {b->samples[static_cast<size_t>(s)],
                                  fnv1a(static_cast<const std::byte*>(b->images.raw()) + static_cast<size_t>(s) * per,
                                        per)};
        mine.append(reinterpret_cast<const char*>(pair), sizeof pair);
      }
    }
    const std::vector<std::string> all = comm->all_gather(mine);
    std::vector<int> seen(n, 0);
    for (int r = 0; r < world; ++r) {
      const std::string& s = all[static_cast<size_t>(r)];
      const size_t count = s.size() / (2 * sizeof(uint64_t));
      EXPECT_EQ(count, (n + static_cast<size_t>(world) - 1) / static_cast<size_t>(world)) << "rank " << r;
      for (size_t i = 0; i < count; ++i) {
        uint64_t pair[2];
        std::memcpy(pair, s.data() + i * sizeof pair, sizeof pair);
        const size_t p = static_cast<size_t>(r) + static_cast<size_t>(world) * i;  // its position in the epoch
        EXPECT_EQ(pair[0], whole[p % n].first) << "epoch " << epoch << " rank " << r << " position " << p;
        if (p >= n) continue;  // the padding: the epoch's start repeated (augmented by its own position's seed)
        EXPECT_EQ(pair[1], whole[p].second) << "epoch " << epoch << " rank " << r << " position " << p;
        ++seen[p];
      }
    }
    EXPECT_EQ(seen, std::vector<int>(n, 1)) << "epoch " << epoch;
  }
}

}  // namespace
}  // namespace vision::test
