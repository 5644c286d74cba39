// oneDNN convolutions on the CPU in plain NCHW (the training layout) against oneDNN's own choice of blocked
// layouts (format_tag::any: nChw8c/nChw16c activations, blocked weights), at the Conv-BN-SiLU/C2f stack's
// convolution shapes (bench_graph's stack, inference: BatchNorm folded, SiLU as a post-op). Issue "Foundation 4b":
// "where oneDNN's blocked layouts are faster for a convolution, the CPU plan may use them internally; measure and
// say". Blocked times are given twice: the convolution alone (a plan keeping every activation blocked would pay
// only this) and with the reorders of its input from and its output back to NCHW (a plan converting around each
// convolution). Weights are reordered once, untimed (a plan would keep them blocked). f32, median of --repeats.
// Also: plain NHWC activations (what the CPU's inference plans run since issue #31), and int8 (s8 activations
// quantised from f32 NHWC, timed with the quantising reorder; s8 weights; f32 output), the post-training-quantised
// path that issue asks for.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "vision/cpu/conv_nhwc.h"
#include "vision/cpu/dnnl_context.h"

namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct ConvShape {
  const char* where;
  int64_t cin, cout, k, s, side;  // input side (square), batch from --batch
};

// A representative set of the stack's convolutions at a 640 input (bench_graph.cpp, stack_layers: each strided
// 3×3, each C2f's 3×3 and some of its 1×1s); sides scale with --size.
const std::vector<ConvShape> kShapes = {
    {"model.0", 3, 16, 3, 2, 640},       {"model.1", 16, 32, 3, 2, 320},     {"model.2.cv1", 32, 32, 1, 1, 160},
    {"model.2.m.cv", 16, 16, 3, 1, 160}, {"model.2.cv2", 48, 32, 1, 1, 160}, {"model.3", 32, 64, 3, 2, 160},
    {"model.4.m.cv", 32, 32, 3, 1, 80},  {"model.4.cv2", 128, 64, 1, 1, 80}, {"model.5", 64, 128, 3, 2, 80},
    {"model.6.m.cv", 64, 64, 3, 1, 40},  {"model.7", 128, 256, 3, 2, 40},   {"model.8.m.cv", 128, 128, 3, 1, 20},
};

double median_ms(const std::function<void()>& f, int repeats) {
  f();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

memory filled(const memory::desc& md, std::mt19937& rng) {
  memory m(md, vision::cpu::dnnl_engine());
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto* p = static_cast<float*>(m.get_data_handle());
  for (size_t i = 0; i < md.get_size() / sizeof(float); ++i) p[i] = u(rng);
  return m;
}

struct Row {
  double plain = 0, blocked = 0, blocked_reorders = 0, nhwc = 0, nhwc_no_silu = 0, engine = 0, int8 = 0;
  std::string src_tag, nhwc_impl, int8_impl;
};

Row run(const ConvShape& c, int64_t batch, int64_t side, int repeats, std::mt19937& rng) {
  auto& eng = vision::cpu::dnnl_engine();
  auto& strm = vision::cpu::dnnl_stream();
  const int64_t p = c.k / 2, out = (side + 2 * p - c.k) / c.s + 1;
  const memory::dims src{batch, c.cin, side, side}, wei{c.cout, c.cin, c.k, c.k}, bias{c.cout},
      dst{batch, c.cout, out, out};
  dnnl::post_ops po;
  po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  auto pd_for = [&](tag t_src, tag t_wei, tag t_dst, bool silu = true) {
    const memory::desc s(src, memory::data_type::f32, t_src), w(wei, memory::data_type::f32, t_wei),
        b(bias, memory::data_type::f32, tag::x), d(dst, memory::data_type::f32, t_dst);
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, s,
                                         w, b, d, {c.s, c.s}, {p, p}, {p, p});
    return dnnl::convolution_forward::primitive_desc(desc, silu ? attr : dnnl::primitive_attr(), eng);
  };
  Row row;
  memory x = filled({src, memory::data_type::f32, tag::nchw}, rng);
  memory w = filled({wei, memory::data_type::f32, tag::oihw}, rng);
  const memory b = filled({bias, memory::data_type::f32, tag::x}, rng);
  memory y({dst, memory::data_type::f32, tag::nchw}, eng);

  const auto plain_pd = pd_for(tag::nchw, tag::oihw, tag::nchw);
  dnnl::convolution_forward plain(plain_pd);
  row.plain = median_ms([&] {
    plain.execute(strm, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    strm.wait();
  }, repeats);

  const auto any_pd = pd_for(tag::any, tag::any, tag::any);
  dnnl::convolution_forward blocked(any_pd);
  memory xb(any_pd.src_desc(), eng), wb(any_pd.weights_desc(), eng), yb(any_pd.dst_desc(), eng);
  dnnl::reorder(w, wb).execute(strm, w, wb);  // once, untimed
  dnnl::reorder to_blocked(x, xb), to_plain(yb, y);
  strm.wait();
  const auto conv = [&] {
    blocked.execute(strm, {{DNNL_ARG_SRC, xb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, yb}});
  };
  row.blocked = median_ms([&] {
    conv();
    strm.wait();
  }, repeats);
  row.blocked_reorders = median_ms([&] {
    to_blocked.execute(strm, x, xb);
    conv();
    to_plain.execute(strm, yb, y);
    strm.wait();
  }, repeats);

  // Plain NHWC activations (weights in oneDNN's choice, reordered once): what a plan keeping every activation
  // channels-last would run, with no reorder anywhere.
  const auto nhwc_pd = pd_for(tag::nhwc, tag::any, tag::nhwc);
  dnnl::convolution_forward nhwc(nhwc_pd);
  memory xn = filled({src, memory::data_type::f32, tag::nhwc}, rng), yn({dst, memory::data_type::f32, tag::nhwc}, eng),
         wn(nhwc_pd.weights_desc(), eng);
  dnnl::reorder(w, wn).execute(strm, w, wn);
  strm.wait();
  row.nhwc = median_ms([&] {
    nhwc.execute(strm, {{DNNL_ARG_SRC, xn}, {DNNL_ARG_WEIGHTS, wn}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, yn}});
    strm.wait();
  }, repeats);
  row.nhwc_impl = nhwc_pd.impl_info_str();
  // The same without the SiLU post-op (what oneDNN's swish costs), and the engine's own kernel with SiLU in registers
  // (cpu/conv_nhwc.h; 0 where this CPU or the shape is not for it).
  {
    dnnl::convolution_forward bare(pd_for(tag::nhwc, tag::any, tag::nhwc, false));
    row.nhwc_no_silu = median_ms([&] {
      bare.execute(strm, {{DNNL_ARG_SRC, xn}, {DNNL_ARG_WEIGHTS, wn}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, yn}});
      strm.wait();
    }, repeats);
  }
  if (vision::cpu::conv_nhwc_available() && vision::cpu::conv_nhwc_supports(c.k, c.s, 1, 1)) {
    const std::vector<float> packed =
        vision::cpu::conv_nhwc_pack(static_cast<const float*>(w.get_data_handle()), c.cout, c.cin, c.k);
    const vision::cpu::ConvNhwcShape shape{batch, side, side, c.cin, c.cout, c.k, c.s};
    row.engine = median_ms([&] {
      vision::cpu::conv_nhwc(static_cast<const float*>(xn.get_data_handle()), packed.data(),
                             static_cast<const float*>(b.get_data_handle()), static_cast<float*>(yn.get_data_handle()),
                             shape, true);
    }, repeats);
  }

  // int8 (what a post-training-quantised plan would run, issue #31): the f32 NHWC input quantised to s8 with one scale
  // (a reorder, timed), s8 weights with a scale per output channel (packed once), f32 NHWC output rescaled per channel
  // with the SiLU post-op. The inputs lie in [-1, 1]: scale 127; the weights likewise.
  {
    using dt = memory::data_type;
    const memory::desc q_src(src, dt::s8, tag::nhwc), q_wei(wei, dt::s8, tag::any), q_bias(bias, dt::f32, tag::x),
        q_dst(dst, dt::f32, tag::nhwc);
    dnnl::primitive_attr q_attr;
    q_attr.set_output_scales(1 << 1, std::vector<float>(static_cast<size_t>(c.cout), 1.0f / (127.0f * 127.0f)));
    q_attr.set_post_ops(po);
    dnnl::convolution_forward::desc q_desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           q_src, q_wei, q_bias, q_dst, {c.s, c.s}, {p, p}, {p, p});
    const dnnl::convolution_forward::primitive_desc q_pd(q_desc, q_attr, eng);
    dnnl::convolution_forward q_conv(q_pd);
    memory xq(q_pd.src_desc(), eng), wq(q_pd.weights_desc(), eng), yq(q_pd.dst_desc(), eng);
    dnnl::primitive_attr w_attr, x_attr;
    w_attr.set_output_scales(1 << 0, std::vector<float>(static_cast<size_t>(c.cout), 127.0f));
    x_attr.set_output_scales(0, {127.0f});
    dnnl::reorder(dnnl::reorder::primitive_desc(w, wq, w_attr)).execute(strm, w, wq);
    dnnl::reorder quantise(dnnl::reorder::primitive_desc(xn, xq, x_attr));
    strm.wait();
    row.int8 = median_ms([&] {
      quantise.execute(strm, xn, xq);
      q_conv.execute(strm, {{DNNL_ARG_SRC, xq}, {DNNL_ARG_WEIGHTS, wq}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, yq}});
      strm.wait();
    }, repeats);
    row.int8_impl = q_pd.impl_info_str();
  }
  const bool same = any_pd.src_desc() == memory::desc(src, memory::data_type::f32, tag::nchw);
  row.src_tag = same ? "nchw" : "blocked";
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oneDNN convolutions: plain NCHW against format_tag::any (blocked) at the stack's shapes"};
  int64_t batch = 1, size = 320;
  int repeats = 15;
  app.add_option("--batch", batch, "images per batch")->check(CLI::PositiveNumber);
  app.add_option("--size", size, "input side (the stack's sides scale from 640)")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed runs per case (median)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    std::mt19937 rng(1);
    std::printf("oneDNN %d.%d f32 convolution + SiLU, batch %lld, stack at %lldx%lld, median of %d runs (ms)\n",
                dnnl_version()->major, dnnl_version()->minor, static_cast<long long>(batch),
                static_cast<long long>(size), static_cast<long long>(size), repeats);
    std::printf("%-14s %4s %4s %2s %2s %5s | %9s %9s %14s %9s %9s %9s %9s | %8s %8s %8s  %s\n", "conv", "cin", "cout",
                "k", "s", "side", "nchw", "blocked", "blocked+reord", "nhwc", "nhwc-bare", "engine", "int8+q",
                "blk/nchw", "b+r/nchw", "nhwc/eng", "any picked / nhwc impl / int8 impl");
    double t_plain = 0, t_blocked = 0, t_reorders = 0, t_nhwc = 0, t_bare = 0, t_engine = 0, t_int8 = 0;
    for (const ConvShape& c : kShapes) {
      const int64_t side = std::max<int64_t>(1, c.side * size / 640);
      const Row r = run(c, batch, side, repeats, rng);
      t_plain += r.plain, t_blocked += r.blocked, t_reorders += r.blocked_reorders, t_nhwc += r.nhwc,
          t_bare += r.nhwc_no_silu, t_engine += r.engine, t_int8 += r.int8;
      std::printf("%-14s %4lld %4lld %2lld %2lld %5lld | %9.3f %9.3f %14.3f %9.3f %9.3f %9.3f %9.3f | %7.2fx %7.2fx "
                  "%7.2fx  %s / %s / %s\n",
                  c.where, static_cast<long long>(c.cin), static_cast<long long>(c.cout),
                  static_cast<long long>(c.k), static_cast<long long>(c.s), static_cast<long long>(side), r.plain,
                  r.blocked, r.blocked_reorders, r.nhwc, r.nhwc_no_silu, r.engine, r.int8, r.plain / r.blocked,
                  r.plain / r.blocked_reorders, r.engine > 0 ? r.nhwc / r.engine : 0.0, r.src_tag.c_str(),
                  r.nhwc_impl.c_str(), r.int8_impl.c_str());
    }
    std::printf("%-14s %27s | %9.3f %9.3f %14.3f %9.3f %9.3f %9.3f %9.3f | %7.2fx %7.2fx %7.2fx\n", "sum", "",
                t_plain, t_blocked, t_reorders, t_nhwc, t_bare, t_engine, t_int8, t_plain / t_blocked,
                t_plain / t_reorders, t_engine > 0 ? t_nhwc / t_engine : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_conv_layouts: %s\n", e.what());
    return 1;
  }
  return 0;
}
