#include "vision/models/yolo/onnx_export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/checker.h>
#include <onnx/common/version.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

#include "vision/core/dtype.h"
#include "vision/core/error.h"
#include "vision/graph/graph.h"
#include "vision/models/yolo/kernels/attention/psa.h"
#include "vision/models/yolo/kernels/attention/psa_attention.h"
#include "vision/models/yolo/kernels/detect_decode.h"
#include "vision/models/yolo/kernels/postprocess.h"
#include "vision/models/yolo/weights.h"
#include "vision/models/yolo/yolo26.h"
#include "vision/ops/batchnorm.h"
#include "vision/ops/conv2d.h"
#include "vision/ops/elementwise.h"
#include "vision/ops/pool.h"
#include "vision/ops/shape_ops.h"
#include "vision/ops/upsample.h"

namespace vision::models::yolo {

namespace {

using core::DType;
using core::Tensor;
namespace attention = kernels::attention;

// The ONNX IR version of opset 17 (ONNX 1.12); newer runtimes read it.
constexpr int64_t kIrVersion = 8;
constexpr int64_t kMinOpset = 17;

// Appends ONNX nodes and initializers to a graph, naming every value it makes uniquely.
class OnnxGraphBuilder {
 public:
  OnnxGraphBuilder(onnx::GraphProto& graph, DType dtype, int64_t opset) : g_(graph), dtype_(dtype), opset_(opset) {}

  int64_t opset() const { return opset_; }
  int32_t onnx_dtype() const { return dtype_ == DType::f16 ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT; }

  std::string fresh(std::string_view hint) { return fmt::format("{}_{}", hint, counter_++); }

  // A node of op_type with the given inputs and n outputs (named after `name`); returns the outputs' names.
  std::vector<std::string> node(const std::string& op_type, const std::vector<std::string>& inputs, size_t n_outputs,
                                const std::string& name, onnx::NodeProto** made = nullptr) {
    onnx::NodeProto* n = g_.add_node();
    n->set_op_type(op_type);
    n->set_name(fresh(name.empty() ? op_type : name));
    for (const std::string& in : inputs) n->add_input(in);
    std::vector<std::string> outs;
    for (size_t i = 0; i < n_outputs; ++i) {
      outs.push_back(n_outputs == 1 ? n->name() : fmt::format("{}:{}", n->name(), i));
      n->add_output(outs.back());
    }
    if (made) *made = n;
    return outs;
  }
  std::string node1(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& name,
                    onnx::NodeProto** made = nullptr) {
    return node(op_type, inputs, 1, name, made).front();
  }

  static void attr(onnx::NodeProto* n, const std::string& key, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key), a->set_type(onnx::AttributeProto::INT), a->set_i(v);
  }
  static void attr(onnx::NodeProto* n, const std::string& key, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key), a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr(onnx::NodeProto* n, const std::string& key, const std::string& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(key), a->set_type(onnx::AttributeProto::STRING), a->set_s(v);
  }

  // Initializers. A float constant is stored in the model's dtype.
  std::string initializer(const std::string& name, const Tensor& t) {
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(name);
    for (int64_t d : t.shape().dims()) p->add_dims(d);
    if (dtype_ == DType::f16) {
      p->set_data_type(onnx::TensorProto::FLOAT16);
      std::string raw;
      if (t.dtype() == DType::f16) {
        raw.assign(static_cast<const char*>(t.raw()), t.nbytes());
      } else {
        const std::vector<float> v = t.to_vector();
        raw.resize(v.size() * 2);
        for (size_t i = 0; i < v.size(); ++i) {
          const uint16_t h = core::float_to_half(v[i]);
          std::memcpy(raw.data() + 2 * i, &h, 2);
        }
      }
      p->set_raw_data(std::move(raw));
    } else {
      p->set_data_type(onnx::TensorProto::FLOAT);
      const std::vector<float> v = t.to_vector();
      p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    }
    parameters_ += t.numel();
    return name;
  }
  std::string floats(const std::vector<float>& v, const std::vector<int64_t>& dims, std::string_view hint = "const") {
    return initializer(fresh(hint), Tensor::from_vector(core::Shape(dims), v));
  }
  std::string ints(const std::vector<int64_t>& v, std::string_view hint = "const", bool scalar = false) {
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(fresh(hint));
    p->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) p->add_dims(static_cast<int64_t>(v.size()));
    p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t)));
    return p->name();
  }
  // f32 constants that stay f32 whatever the model's dtype (the Resize scales).
  std::string f32s(const std::vector<float>& v, std::string_view hint) {
    onnx::TensorProto* p = g_.add_initializer();
    p->set_name(fresh(hint));
    p->set_data_type(onnx::TensorProto::FLOAT);
    p->add_dims(static_cast<int64_t>(v.size()));
    p->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    return p->name();
  }

  // Common patterns.
  std::string slice(const std::string& x, int64_t begin, int64_t end, int64_t axis, const std::string& name) {
    return node1("Slice", {x, ints({begin}), ints({end}), ints({axis})}, name);
  }
  std::string unsqueeze(const std::string& x, const std::vector<int64_t>& axes, const std::string& name) {
    return node1("Unsqueeze", {x, ints(axes)}, name);
  }
  std::string shape_dims(const std::string& x, int64_t begin, int64_t end, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    const std::string out = node1("Shape", {x}, name, &n);
    attr(n, "start", begin);
    attr(n, "end", end);
    return out;
  }
  std::string cast(const std::string& x, int32_t to, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    const std::string out = node1("Cast", {x}, name, &n);
    attr(n, "to", static_cast<int64_t>(to));
    return out;
  }
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    const std::string out = node1("Transpose", {x}, name, &n);
    attr(n, "perm", perm);
    return out;
  }
  std::string concat(const std::vector<std::string>& xs, int64_t axis, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    const std::string out = node1("Concat", xs, name, &n);
    attr(n, "axis", axis);
    return out;
  }
  std::vector<std::string> split(const std::string& x, const std::vector<int64_t>& sizes, int64_t axis,
                                 const std::string& name) {
    onnx::NodeProto* n = nullptr;
    auto outs = node("Split", {x, ints(sizes)}, sizes.size(), name, &n);
    attr(n, "axis", axis);
    return outs;
  }
  // values, indices of the top k along axis (descending; equal values in index order).
  std::pair<std::string, std::string> topk(const std::string& x, const std::string& k, int64_t axis,
                                           const std::string& name) {
    onnx::NodeProto* n = nullptr;
    auto outs = node("TopK", {x, k}, 2, name, &n);
    attr(n, "axis", axis);
    attr(n, "largest", int64_t{1});
    attr(n, "sorted", int64_t{1});
    return {outs[0], outs[1]};
  }
  std::string reduce_max(const std::string& x, int64_t axis, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    std::string out;
    if (opset_ >= 18) {  // axes became an input in opset 18
      out = node1("ReduceMax", {x, ints({axis})}, name, &n);
    } else {
      out = node1("ReduceMax", {x}, name, &n);
      attr(n, "axes", std::vector<int64_t>{axis});
    }
    attr(n, "keepdims", int64_t{0});
    return out;
  }
  // GatherND with one batch dim: data [B, N, ...], index [B, K] → [B, K, ...].
  std::string gather_rows(const std::string& data, const std::string& index, const std::string& name) {
    onnx::NodeProto* n = nullptr;
    const std::string out = node1("GatherND", {data, unsqueeze(index, {2}, name + "_index")}, name, &n);
    attr(n, "batch_dims", int64_t{1});
    return out;
  }

  void declare(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
               int32_t elem_type, const std::vector<std::string>& dims) {
    onnx::ValueInfoProto* v = list->Add();
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem_type);
    for (const std::string& d : dims) {
      onnx::TensorShapeProto_Dimension* dim = t->mutable_shape()->add_dim();
      if (!d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }))
        dim->set_dim_value(std::stoll(d));
      else
        dim->set_dim_param(d);
    }
  }

  int64_t parameters() const { return parameters_; }

 private:
  onnx::GraphProto& g_;
  DType dtype_;
  int64_t opset_;
  int64_t counter_ = 0;
  int64_t parameters_ = 0;
};

// The exported model's weights by state key: BatchNorm folded (float64) from a full checkpoint, or an exported model's.
std::map<std::string, Tensor> folded_weights(const core::SafetensorsFile& model, const ModelInfo& info, bool both_heads) {
  std::map<std::string, Tensor> w;
  if (info.fused()) {
    for (const auto& [name, t] : model.tensors) w.emplace(name, t);
  } else {
    for (auto& [name, t] : fold_batchnorm(model, DType::f32, both_heads).tensors) w.emplace(name, std::move(t));
  }
  return w;
}

// PSA's qkv [B, 4·kd·heads, H, W] viewed as [B, heads, 4·kd, H·W] (each head's q, k, v channels together).
std::string psa_heads(OnnxGraphBuilder& b, const std::string& qkv, const attention::PsaConfig& c, const std::string& name) {
  return b.node1("Reshape", {qkv, b.ints({0, c.heads, 4 * c.key_dim, -1})}, name + "_heads");
}

// [B, heads, 2·kd, H·W] back to an image [B, 2·kd·heads, H, W] of qkv's batch and size.
std::string psa_image(OnnxGraphBuilder& b, const std::string& rows, const std::string& qkv,
                      const attention::PsaConfig& c, const std::string& name) {
  const std::string shape = b.concat({b.shape_dims(qkv, 0, 1, name + "_batch"), b.ints({c.v_channels()}),
                                      b.shape_dims(qkv, 2, 4, name + "_hw")},
                                     0, name + "_shape");
  return b.node1("Reshape", {rows, shape}, name);
}

// Emits the ONNX nodes of one graph node; names[value id] holds each value's ONNX name.
void emit_node(OnnxGraphBuilder& b, const graph::Graph& g, const graph::Node& node,
               const std::map<std::string, Tensor>& weights, std::vector<std::string>& names) {
  const graph::Op& op = *node.op;
  auto in = [&](size_t i) { return names.at(static_cast<size_t>(node.inputs.at(i))); };
  auto set_out = [&](size_t i, const std::string& onnx_name) {
    names.at(static_cast<size_t>(node.outputs.at(i))) = onnx_name;
  };
  const std::string& nm = node.name;
  onnx::NodeProto* n = nullptr;

  if (const auto* conv = dynamic_cast<const ops::Conv2dOp*>(&op)) {
    const ops::Conv2dAttrs& a = conv->attrs();
    auto weight = [&](const std::string& key, const core::Shape& shape) {
      const auto it = weights.find(key);
      VISION_CHECK(it != weights.end(), "ONNX export: the model has no tensor '{}'", key);
      VISION_CHECK(it->second.shape() == shape, "ONNX export: '{}' is {}, the graph expects {}", key,
                   it->second.shape().str(), shape.str());
      return b.initializer(key, it->second);
    };
    std::vector<std::string> inputs = {in(0), weight(nm + ".weight", a.weight_shape())};
    if (a.bias) inputs.push_back(weight(nm + ".bias", core::Shape{a.out_channels}));
    set_out(0, b.node1("Conv", inputs, nm, &n));
    const int64_t p = a.pad();
    b.attr(n, "kernel_shape", std::vector<int64_t>{a.kernel, a.kernel});
    b.attr(n, "strides", std::vector<int64_t>{a.stride, a.stride});
    b.attr(n, "pads", std::vector<int64_t>{p, p, p, p});
    b.attr(n, "dilations", std::vector<int64_t>{a.dilation, a.dilation});
    b.attr(n, "group", a.groups);
  } else if (dynamic_cast<const ops::SiluOp*>(&op)) {
    set_out(0, b.node1("Mul", {in(0), b.node1("Sigmoid", {in(0)}, nm + "_sigmoid")}, nm));
  } else if (dynamic_cast<const ops::SigmoidOp*>(&op)) {
    set_out(0, b.node1("Sigmoid", {in(0)}, nm));
  } else if (dynamic_cast<const ops::AddOp*>(&op)) {
    set_out(0, b.node1("Add", {in(0), in(1)}, nm));
  } else if (dynamic_cast<const ops::MulOp*>(&op)) {
    set_out(0, b.node1("Mul", {in(0), in(1)}, nm));
  } else if (const auto* cat = dynamic_cast<const ops::ConcatOp*>(&op)) {
    std::vector<std::string> xs;
    for (size_t i = 0; i < node.inputs.size(); ++i) xs.push_back(in(i));
    set_out(0, b.concat(xs, cat->axis(), nm));
  } else if (const auto* split = dynamic_cast<const ops::SplitOp*>(&op)) {
    const auto outs = b.split(in(0), split->sizes(), split->axis(), nm);
    for (size_t i = 0; i < outs.size(); ++i) set_out(i, outs[i]);
  } else if (const auto* slice = dynamic_cast<const ops::ChannelSliceOp*>(&op)) {
    set_out(0, b.slice(in(0), slice->begin(), slice->begin() + slice->count(), 1, nm));
  } else if (const auto* reshape = dynamic_cast<const ops::ReshapeOp*>(&op)) {
    std::vector<int64_t> dims = reshape->dims();
    if (reshape->is_flatten()) {
      const int64_t rank = static_cast<int64_t>(g.value(node.inputs.at(0)).shape.rank());
      const int64_t start = reshape->start_dim() < 0 ? reshape->start_dim() + rank : reshape->start_dim();
      const int64_t end = reshape->end_dim() < 0 ? reshape->end_dim() + rank : reshape->end_dim();
      VISION_CHECK(end == rank - 1, "ONNX export: {} flattens dims {}..{} of {}; only a flatten to the last dim is mapped",
                   nm, start, end, rank);
      dims.assign(static_cast<size_t>(start), 0);  // keep the leading dims, merge the rest
      dims.push_back(-1);
    }
    set_out(0, b.node1("Reshape", {in(0), b.ints(dims)}, nm));
  } else if (const auto* permute = dynamic_cast<const ops::PermuteOp*>(&op)) {
    set_out(0, b.transpose(in(0), permute->perm(), nm));
  } else if (dynamic_cast<const ops::DetachOp*>(&op)) {
    set_out(0, in(0));
  } else if (const auto* pool = dynamic_cast<const ops::MaxPool2dOp*>(&op)) {
    set_out(0, b.node1("MaxPool", {in(0)}, nm, &n));
    const int64_t p = pool->padding();
    b.attr(n, "kernel_shape", std::vector<int64_t>{pool->kernel(), pool->kernel()});
    b.attr(n, "strides", std::vector<int64_t>{pool->stride(), pool->stride()});
    b.attr(n, "pads", std::vector<int64_t>{p, p, p, p});
  } else if (const auto* up = dynamic_cast<const ops::UpsampleNearestOp*>(&op)) {
    const float s = static_cast<float>(up->scale());
    set_out(0, b.node1("Resize", {in(0), "", b.f32s({1.0f, 1.0f, s, s}, nm + "_scales")}, nm, &n));
    b.attr(n, "mode", std::string("nearest"));
    b.attr(n, "coordinate_transformation_mode", std::string("asymmetric"));
    b.attr(n, "nearest_mode", std::string("floor"));
  } else if (const auto* psa = dynamic_cast<const attention::PsaAttentionOp*>(&op)) {
    // ultralytics' Attention: q, k, v per head; softmax(qᵀk · kd^-0.5) over keys; v · attnᵀ.
    const attention::PsaConfig& c = psa->config();
    const auto qkv = b.split(psa_heads(b, in(0), c, nm), {c.key_dim, c.key_dim, 2 * c.key_dim}, 2, nm + "_qkv");
    const std::string qt = b.transpose(qkv[0], {0, 1, 3, 2}, nm + "_qt");
    const std::string logits = b.node1(
        "Mul", {b.node1("MatMul", {qt, qkv[1]}, nm + "_qk"),
                b.floats({static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.key_dim)))}, {}, nm + "_scale")},
        nm + "_scaled");
    const std::string attn = b.node1("Softmax", {logits}, nm + "_softmax", &n);
    b.attr(n, "axis", int64_t{-1});
    const std::string out = b.node1("MatMul", {qkv[2], b.transpose(attn, {0, 1, 3, 2}, nm + "_attn_t")}, nm + "_av");
    set_out(0, psa_image(b, out, in(0), c, nm));
  } else if (const auto* v = dynamic_cast<const attention::PsaExtractVOp*>(&op)) {
    const attention::PsaConfig& c = v->config();
    const std::string rows = b.slice(psa_heads(b, in(0), c, nm), 2 * c.key_dim, 4 * c.key_dim, 2, nm + "_v");
    set_out(0, psa_image(b, rows, in(0), c, nm));
  } else if (dynamic_cast<const ops::BatchNorm2dOp*>(&op)) {
    fail("ONNX export: {} is a BatchNorm left unfolded (internal: the graph is recorded with folded convolutions)", nm);
  } else {
    fail("ONNX export: {} ({}) has no ONNX form", nm, op.name());
  }
}

// The anchor grid as three [1, 1, A] rows x, y, stride: initializers for a static size, else computed from the
// feature maps' shapes (cell centres x + 0.5, y + 0.5 of each level, row-major, P3 then P4 then P5).
std::array<std::string, 3> anchor_rows(OnnxGraphBuilder& b, bool dynamic, int64_t height, int64_t width,
                                       const std::array<std::string, 3>& levels) {
  if (!dynamic) {
    const std::vector<float> grid = kernels::detect_anchor_grid(height, width);
    const int64_t a = static_cast<int64_t>(grid.size() / 3);
    std::array<std::string, 3> rows;
    for (size_t r = 0; r < 3; ++r)
      rows[r] = b.floats(std::vector<float>(grid.begin() + static_cast<int64_t>(r) * a,
                                            grid.begin() + static_cast<int64_t>(r + 1) * a),
                         {1, 1, a}, std::array<const char*, 3>{"anchor_x", "anchor_y", "anchor_stride"}[r]);
    return rows;
  }
  std::vector<std::string> xs, ys, ss;
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string lv = fmt::format("anchors_p{}", i + 3);
    const std::string h = b.shape_dims(levels[i], 2, 3, lv + "_h"), w = b.shape_dims(levels[i], 3, 4, lv + "_w");
    const std::string hw = b.concat({h, w}, 0, lv + "_hw");
    auto centres = [&](const std::string& n, const std::string& tag) {
      const std::string scalar = b.node1("Squeeze", {n, b.ints({0})}, lv + "_" + tag + "_n");
      const std::string range = b.node1("Range", {b.ints({0}, "zero", true), scalar, b.ints({1}, "one", true)},
                                        lv + "_" + tag + "_range");
      return b.node1("Add", {b.cast(range, b.onnx_dtype(), lv + "_" + tag + "_float"), b.floats({0.5f}, {}, "half")},
                     lv + "_" + tag + "_centres");
    };
    const std::string x = b.node1("Expand", {b.unsqueeze(centres(w, "x"), {0}, lv + "_x_row"), hw}, lv + "_x_grid");
    const std::string y = b.node1("Expand", {b.unsqueeze(centres(h, "y"), {1}, lv + "_y_col"), hw}, lv + "_y_grid");
    xs.push_back(b.node1("Reshape", {x, b.ints({-1})}, lv + "_x"));
    ys.push_back(b.node1("Reshape", {y, b.ints({-1})}, lv + "_y"));
    const std::string count = b.node1("Mul", {h, w}, lv + "_count");
    ss.push_back(b.node1("Expand", {b.floats({static_cast<float>(kernels::kDetectStrides[i])}, {1}, "stride"), count},
                         lv + "_stride"));
  }
  return {b.unsqueeze(b.concat(xs, 0, "anchor_x"), {0, 1}, "anchor_x_rows"),
          b.unsqueeze(b.concat(ys, 0, "anchor_y"), {0, 1}, "anchor_y_rows"),
          b.unsqueeze(b.concat(ss, 0, "anchor_stride"), {0, 1}, "anchor_stride_rows")};
}

// Python's repr of {0: 'a', 1: 'b'} (ultralytics' names metadata).
std::string python_names(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& s = names[i];
    const bool double_quoted = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
    const char q = double_quoted ? '"' : '\'';
    std::string quoted(1, q);
    for (char c : s) {
      if (c == '\\' || c == q) quoted += '\\';
      quoted += c;
    }
    quoted += q;
    out += fmt::format("{}{}: {}", i ? ", " : "", i, quoted);
  }
  return out + "}";
}

std::string dims_text(const std::vector<std::string>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

}  // namespace

int64_t onnx_max_opset() {
  const auto map = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto it = map.find(onnx::ONNX_DOMAIN);
  VISION_CHECK(it != map.end(), "ONNX export: the ONNX library registers no default domain");
  return it->second.second;
}

OnnxExportSummary export_onnx(const core::SafetensorsFile& model, const std::filesystem::path& out,
                              const OnnxExportOptions& options) {
  const ModelInfo info = read_model_info(model);
  const int64_t max_opset = onnx_max_opset();
  VISION_CHECK(options.opset >= kMinOpset && options.opset <= max_opset,
               "ONNX export: opset {} is not supported: choose {} to {} (the newest the linked ONNX library {} checks)",
               options.opset, kMinOpset, max_opset, ONNX_NAMESPACE::LAST_RELEASE_VERSION);
  VISION_CHECK(options.end2end || !info.fused(),
               "ONNX export: the raw output is the one-to-many head, which {} does not have (an exported model keeps only "
               "the one-to-one head): export the raw output from the full checkpoint, or export end-to-end",
               model.path.string());
  VISION_CHECK(options.batch >= 1 && options.batch <= 1024, "ONNX export: the batch must be 1 to 1024, got {}",
               options.batch);
  VISION_CHECK(options.max_det >= 1 && options.max_det <= kernels::kMaxDetections,
               "ONNX export: max_det must be 1 to {}, got {}", kernels::kMaxDetections, options.max_det);
  const int64_t height = options.imgsz[0] > 0 ? options.imgsz[0] : info.imgsz[0];
  const int64_t width = options.imgsz[1] > 0 ? options.imgsz[1] : info.imgsz[1];
  check_image_size(height, width);
  const DType dtype = options.half ? DType::f16 : DType::f32;
  const std::map<std::string, Tensor> weights = folded_weights(model, info, !options.end2end);

  // The engine's graph of the head this output needs, recorded with folded convolutions.
  Yolo26Spec spec = info.spec;
  spec.norm = ConvNorm::folded;
  graph::Graph g;
  const graph::SymTensor images = g.input("images", core::Shape{core::Shape::kAny, 3, core::Shape::kAny, core::Shape::kAny});
  const Yolo26Outputs rec = record_yolo26(images, spec, options.end2end ? Heads::one_to_one : Heads::one_to_many);
  const HeadOutputs& head = options.end2end ? *rec.one2one : *rec.one2many;

  onnx::ModelProto proto;
  proto.set_ir_version(kIrVersion);
  proto.set_producer_name("vision-cpp");
  proto.set_producer_version(options.producer_version);
  proto.set_doc_string(fmt::format("YOLO26{} ({} classes), {}", scale_name(spec.scale), spec.nc,
                                   options.end2end ? "end-to-end detections [B, K, 6]" : "raw output [B, 4 + nc, A]"));
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain(onnx::ONNX_DOMAIN);
  opset->set_version(options.opset);
  onnx::GraphProto& graph_proto = *proto.mutable_graph();
  graph_proto.set_name(fmt::format("yolo26{}", scale_name(spec.scale)));
  OnnxGraphBuilder b(graph_proto, dtype, options.opset);

  const std::string batch = options.dynamic ? "batch" : std::to_string(options.batch);
  const std::vector<std::string> input_dims = {batch, "3", options.dynamic ? "height" : std::to_string(height),
                                               options.dynamic ? "width" : std::to_string(width)};
  b.declare(graph_proto.mutable_input(), "images", b.onnx_dtype(), input_dims);

  std::vector<std::string> names(g.values().size());
  names.at(static_cast<size_t>(images.id())) = "images";
  for (const graph::Node& node : g.nodes()) emit_node(b, g, node, weights, names);
  auto name_of = [&](const graph::SymTensor& t) { return names.at(static_cast<size_t>(t.id())); };

  // Decode: x1y1 = anchor − lt, x2y2 = anchor + rb (grid units), scaled by each anchor's stride.
  const std::array<std::string, 3> grid = anchor_rows(
      b, options.dynamic, height, width, {name_of(rec.features[0]), name_of(rec.features[1]), name_of(rec.features[2])});
  const std::string &ax = grid[0], &ay = grid[1], &st = grid[2];
  const auto ltrb = b.split(name_of(head.ltrb), {1, 1, 1, 1}, 1, "decode_ltrb");
  const std::string x1 = b.node1("Sub", {ax, ltrb[0]}, "decode_x1"), y1 = b.node1("Sub", {ay, ltrb[1]}, "decode_y1");
  const std::string x2 = b.node1("Add", {ax, ltrb[2]}, "decode_x2"), y2 = b.node1("Add", {ay, ltrb[3]}, "decode_y2");
  const std::string logits = name_of(head.logits);
  const int64_t anchors = kernels::detect_anchor_count(height, width);
  std::vector<std::string> output_dims;
  std::string output;
  if (options.end2end) {
    std::vector<std::string> xyxy;
    for (const auto& [v, tag] : {std::pair{x1, "x1"}, {y1, "y1"}, {x2, "x2"}, {y2, "y2"}})
      xyxy.push_back(b.node1("Mul", {v, st}, fmt::format("decode_{}_pixels", tag)));
    const std::string boxes = b.transpose(b.concat(xyxy, 1, "boxes"), {0, 2, 1}, "boxes_rows");  // [B, A, 4]
    // K = min(max_det, anchors): a constant, or from the logits' shape.
    std::string k;
    if (options.dynamic)
      k = b.node1("Min", {b.shape_dims(logits, 2, 3, "anchors"), b.ints({options.max_det}, "max_det")}, "k");
    else
      k = b.ints({std::min(options.max_det, anchors)}, "k");
    // Ranked by the logits (σ is increasing, so this is the order of the scores, without σ's rounding ties).
    const std::string rows = b.transpose(logits, {0, 2, 1}, "logits_rows");  // [B, A, nc]
    const auto [best, top_anchors] = b.topk(b.reduce_max(rows, 2, "best_logit"), k, 1, "top_anchors");
    const std::string pairs = b.node1("Reshape", {b.gather_rows(rows, top_anchors, "top_logits"), b.ints({0, -1})},
                                      "pairs");  // [B, K·nc]
    const auto [top_logits, top_pairs] = b.topk(pairs, k, 1, "top_pairs");
    const std::string nc = b.ints({spec.nc}, "nc", true);
    onnx::NodeProto* gather = nullptr;
    const std::string anchor = b.node1("GatherElements", {top_anchors, b.node1("Div", {top_pairs, nc}, "pair_slot")},
                                       "pair_anchor", &gather);
    b.attr(gather, "axis", int64_t{1});
    const std::string cls = b.cast(b.unsqueeze(b.node1("Mod", {top_pairs, nc}, "pair_class"), {2}, "class_column"),
                                   b.onnx_dtype(), "class");
    const std::string score = b.unsqueeze(b.node1("Sigmoid", {top_logits}, "score"), {2}, "score_column");
    output = b.concat({b.gather_rows(boxes, anchor, "top_boxes"), score, cls}, 2, "output0");
    output_dims = {batch, options.dynamic ? "detections" : std::to_string(std::min(options.max_det, anchors)), "6"};
  } else {
    const std::string half = b.floats({0.5f}, {}, "half");
    auto centre = [&](const std::string& lo, const std::string& hi, const std::string& tag) {
      return b.node1("Mul", {b.node1("Mul", {b.node1("Add", {lo, hi}, tag + "_sum"), half}, tag + "_mid"), st}, tag);
    };
    auto extent = [&](const std::string& lo, const std::string& hi, const std::string& tag) {
      return b.node1("Mul", {b.node1("Sub", {hi, lo}, tag + "_grid"), st}, tag);
    };
    const std::string boxes = b.concat({centre(x1, x2, "cx"), centre(y1, y2, "cy"), extent(x1, x2, "w"),
                                        extent(y1, y2, "h")},
                                       1, "boxes_cxcywh");
    output = b.concat({boxes, b.node1("Sigmoid", {logits}, "scores")}, 1, "output0");
    output_dims = {batch, std::to_string(4 + spec.nc), options.dynamic ? "anchors" : std::to_string(anchors)};
  }
  // The graph's output is named output0, as ultralytics names it.
  b.node1("Identity", {output}, "output0_identity");
  graph_proto.mutable_node(graph_proto.node_size() - 1)->set_output(0, "output0");
  b.declare(graph_proto.mutable_output(), "output0", b.onnx_dtype(), output_dims);

  const std::map<std::string, std::string> metadata = {
      {"description", fmt::format("vision-cpp YOLO26{} ({} classes)", scale_name(spec.scale), spec.nc)},
      {"author", "vision-cpp"},
      {"version", options.producer_version},
      {"task", "detect"},
      {"stride", "32"},
      {"batch", options.dynamic ? "-1" : std::to_string(options.batch)},
      {"imgsz", fmt::format("[{}, {}]", height, width)},
      {"names", python_names(info.names)},
      {"end2end", options.end2end ? "True" : "False"},
      {"max_det", std::to_string(options.max_det)},
      {"half", options.half ? "True" : "False"},
      {"dynamic", options.dynamic ? "True" : "False"},
      {"channels", "3"},
  };
  for (const auto& [k, v] : metadata) {
    onnx::StringStringEntryProto* e = proto.add_metadata_props();
    e->set_key(k), e->set_value(v);
  }

  // The checker, then strict shape inference (types checked; a shape it infers must agree with the declared ones).
  try {
    onnx::checker::check_model(proto);
    onnx::ModelProto inferred = proto;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1,
                                                                   /*data_prop=*/true));
  } catch (const std::exception& e) {
    fail_as(ErrorKind::internal, "ONNX export: the ONNX checker refuses the model built for {}: {}", model.path.string(),
            e.what());
  }
  std::string bytes;
  VISION_CHECK(proto.SerializeToString(&bytes), "ONNX export: the model does not serialize (over 2 GB?)");
  core::write_file_atomic(out, bytes);

  OnnxExportSummary s;
  s.scale = scale_name(spec.scale), s.nc = spec.nc, s.opset = options.opset;
  s.nodes = graph_proto.node_size(), s.initializers = graph_proto.initializer_size(), s.parameters = b.parameters();
  s.bytes = static_cast<int64_t>(bytes.size());
  const std::string_view dt = core::dtype_name(dtype);
  s.input = fmt::format("images {}{}", dt, dims_text(input_dims));
  s.output = fmt::format("output0 {}{}", dt, dims_text(output_dims));
  return s;
}

}  // namespace vision::models::yolo
