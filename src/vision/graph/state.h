// StateStore — a model's trainable parameters (flat buffer + flat gradient buffer) and buffers, by checkpoint key.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "vision/core/safetensors.h"
#include "vision/graph/backend.h"
#include "vision/graph/graph.h"

namespace vision::graph {

struct StateEntry {
  std::string key;  // "model.0.conv.weight"
  Shape shape;
  DType dtype = DType::f32;
  StateKind kind = StateKind::parameter;  // parameter or buffer (constants live in plans)
  size_t offset = 0;                      // bytes into the flat parameter buffer or the buffer region
};

class StateStore {
 public:
  // Lowers every node of the graph (no fusion) for the given concrete input shapes, collects the
  // parameters and buffers they declare and initialises them with the ops' param_init_data.
  // input_ids are the graph inputs whose shapes are given (all of them in the first form); nodes that depend
  // on other inputs (a loss on training targets) must hold no parameters or buffers.
  StateStore(const Graph& graph, std::shared_ptr<BackendContext> backend, const std::vector<Shape>& input_shapes);
  StateStore(const Graph& graph, std::shared_ptr<BackendContext> backend, const std::vector<int>& input_ids,
             const std::vector<Shape>& input_shapes);

  const std::vector<StateEntry>& entries() const { return entries_; }
  const StateEntry* find(const std::string& key) const;
  // The device tensor of a parameter or buffer; its gradient (parameters only).
  Tensor tensor(const std::string& key) const;
  Tensor grad(const std::string& key) const;

  // Flat f32 buffers over every trainable parameter, in entry order (one optimizer launch).
  Tensor flat_params() const { return flat_params_; }
  Tensor flat_grads() const { return flat_grads_; }
  int64_t parameter_count() const { return n_params_; }
  // Every buffer (BatchNorm running statistics, counters) in one region of the backend's memory, each at a 64-byte
  // aligned offset: what data-parallel ranks copy from rank 0 as a whole.
  void* buffer_region() const { return buffer_mem_.get(); }
  size_t buffer_region_bytes() const { return buffer_region_bytes_; }

  // Replaces parameters and buffers with the tensors of a safetensors file. Strict: a missing, unexpected
  // or mis-shaped tensor is an error naming it; f16/bf16 files are converted to the store's dtype.
  void load_safetensors(const std::filesystem::path& path);
  // The same from a file already read. Tensors the store lacks for which ignore(name) is true are skipped rather than
  // unexpected (the one-to-many head of a checkpoint loaded into an inference model).
  void load(const core::SafetensorsFile& file, const std::function<bool(const std::string&)>& ignore = {});
  // Writes every parameter and buffer (atomically: nothing at path is lost if writing fails).
  void save_safetensors(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata = {}) const;
  // Host copies of every parameter and buffer, by key.
  std::vector<std::pair<std::string, Tensor>> to_host() const;
  void set_from_host(const std::string& key, const Tensor& host);

  BackendContext& backend() const { return *backend_; }

  // A copy of state `key` in another format (an f16 weight laid out K, R, S, C for a convolution in f16 NHWC),
  // made on first request and kept for the life of the store: every plan of the model that reads the state in
  // that format shares it. refresh_compute_copies() rewrites them from the f32 masters when the state changed.
  Tensor compute_copy(const std::string& key, const Format& format);
  // Brings every compute copy up to date with the current version (once per version; plans call it before each
  // run, outside any captured graph).
  void refresh_compute_copies();
  // Rewrites every compute copy whatever the version, and counts them current: the conversions a captured training
  // step records (its replays then convert the masters the optimizer has just updated).
  void convert_compute_copies();
  // Counts the compute copies current (after a replay of a graph that converted them).
  void mark_compute_copies_current() { copies_version_ = version_; }
  size_t compute_copies() const { return copies_.size(); }

  // A counter that changes whenever parameters or buffers change, so plans refresh what they derive from
  // them (folded BatchNorm) once per version rather than on every run. set_from_host and load_safetensors
  // bump it; code that writes the state directly (an optimizer step on flat_params()) calls mark_updated().
  uint64_t version() const { return version_; }
  void mark_updated() { ++version_; }

 private:
  std::shared_ptr<BackendContext> backend_;
  std::vector<StateEntry> entries_;
  std::map<std::string, size_t> index_;
  std::shared_ptr<void> param_mem_, grad_mem_, buffer_mem_;
  Tensor flat_params_, flat_grads_;
  int64_t n_params_ = 0;
  size_t buffer_region_bytes_ = 0;
  uint64_t version_ = 0;
  struct ComputeCopy {
    std::shared_ptr<void> memory;
    Tensor copy;
    std::string key;
  };
  std::map<std::tuple<std::string, DType, core::Layout>, ComputeCopy> copies_;
  uint64_t copies_version_ = 0;
};

// The parameters and buffers a StateStore of the graph holds for these shapes of some of its inputs (value ids), in
// its order, without allocating or initialising anything (offsets are 0): a model's state listed, counted, checked.
std::vector<StateEntry> state_entries(const Graph& graph, const std::vector<int>& input_ids,
                                      const std::vector<Shape>& input_shapes);

// Checkpoint key of state `local` of node `node_name` ("model.0.bn" + "weight").
std::string state_key(const std::string& node_name, const std::string& local);

}  // namespace vision::graph
