#include "vision/cpu/dnnl_context.h"

#include "vision/core/error.h"

namespace vision::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

dnnl::memory::desc f32_desc(const dnnl::memory::dims& dims) {
  using tag = dnnl::memory::format_tag;
  static const tag tags[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  VISION_CHECK(!dims.empty() && dims.size() <= 6, "oneDNN memory of rank {} is not supported", dims.size());
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tags[dims.size()]);
}

dnnl::memory::dims dims_of(const core::Shape& shape) { return dnnl::memory::dims(shape.dims().begin(), shape.dims().end()); }

dnnl::memory as_memory(const dnnl::memory::desc& md, const core::Tensor& t) {
  VISION_CHECK(t.defined() && t.device() == core::Device::cpu && t.dtype() == core::DType::f32,
               "oneDNN needs an f32 host tensor, got {}", t.defined() ? t.str() : std::string("an undefined tensor"));
  VISION_CHECK(md.get_size() == t.nbytes(), "tensor {} does not match the oneDNN memory of {} bytes", t.str(),
               md.get_size());
  return dnnl::memory(md, dnnl_engine(), t.raw());
}

dnnl::memory as_memory(const dnnl::memory::desc& md, void* ptr) { return dnnl::memory(md, dnnl_engine(), ptr); }

void execute(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args, std::string_view what) {
  try {
    p.execute(dnnl_stream(), args);
    dnnl_stream().wait();
  } catch (const dnnl::error& e) {
    fail("oneDNN {} failed: {} (status {})", what, e.what(), static_cast<int>(e.status));
  }
}

}  // namespace vision::cpu
