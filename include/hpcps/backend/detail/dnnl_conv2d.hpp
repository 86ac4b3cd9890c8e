#pragma once
// backend::BasicCpu's convolution: oneDNN's primitives (jit:avx512_core here), which ran the CNN's
// convolutions 2-3x faster than im2col + OpenBLAS (bench/conv_providers, docs/backends.md).
//
// Everything is created once, in the constructor (make_workspace): the primitives for max_batch
// samples, the reorders between our plain layouts (NCHW activations, OIHW weights) and the blocked
// layouts the primitives want, the blocked buffers, and one scratchpad handed to every primitive
// (scratchpad_mode::user). A step then only sets data handles and executes. oneDNN itself still
// allocates a few small bookkeeping objects inside every execute call (its argument map): measured
// 6 operator-new calls per primitive executed, independent of sizes; no buffers.
//
// A batch smaller than max_batch runs through the same primitives on staging buffers padded with
// zeros (a zero dy adds nothing to the weight gradient); it happens at the end of an epoch only.
//
// Threads: the Debian build runs oneDNN on OpenMP with omp_get_max_threads() of the calling
// thread, read when a primitive is created (it fixes the split of the work) and when it runs.
// The backend's thread count is set around both, and the caller's setting restored afterwards.
#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "hpcps/backend/channel_blocked.hpp"
#include "hpcps/backend/window.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/activation.hpp"

namespace hpcps::backend::detail {

// One CPU engine per process: oneDNN's engines are stateless handles onto the CPU.
inline const dnnl::engine& dnnl_cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Sets OpenMP's thread count for oneDNN's parallel regions, restores the caller's on exit.
class OmpThreadScope {
 public:
  explicit OmpThreadScope(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreadScope() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreadScope(const OmpThreadScope&) = delete;
  OmpThreadScope& operator=(const OmpThreadScope&) = delete;

 private:
  int saved_;
};

// A tensor as we hold it (plain layout, data handle set per call) and as a primitive wants it;
// `lib` is `user` itself when the layouts agree, else its own buffer with a reorder between them.
struct DnnlTensor {
  dnnl::memory user, lib;
  dnnl::reorder convert;
  bool converts = false;
};

class DnnlConv2d {
 public:
  static constexpr const char* name = "onednn";

  DnnlConv2d() = default;  // an empty method, to be assigned one made for a layer
  // Move-only: a copy would share the blocked buffers and the scratchpad with the original (oneDNN's
  // memory objects are reference-counted handles), and two workspaces must never share scratch.
  DnnlConv2d(const DnnlConv2d&) = delete;
  DnnlConv2d& operator=(const DnnlConv2d&) = delete;
  DnnlConv2d(DnnlConv2d&&) = default;
  DnnlConv2d& operator=(DnnlConv2d&&) = default;
  template <class Backend>
  DnnlConv2d(const Backend& backend, const Window2d& g, std::size_t out_channels, std::size_t max_batch)
      : DnnlConv2d(backend.threads(), g, out_channels, max_batch) {}

  DnnlConv2d(int threads, const Window2d& g, std::size_t out_channels, std::size_t max_batch)
      : threads_(threads), g_(g), out_channels_(out_channels), batch_(std::max<std::size_t>(max_batch, 1)) {
    try {
      OmpThreadScope scope(threads_);
      build();
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("backend::Cpu: oneDNN could not set up a convolution {}x{}x{} -> {} channels, kernel "
                              "{}, stride {}, padding {}, batch {}: {}",
                              g_.channels, g_.height, g_.width, out_channels_, g_.window, g_.stride, g_.padding,
                              batch_, e.what()));
    }
  }

  // y = W * x + b over `count` <= max_batch NCHW samples; params = W [out x C x k x k], then b.
  template <class Backend>
  void forward(const Backend&, const float* params, const float* x, std::size_t count, float* y) {
    run_forward(forward_, params, x, count, y);
  }

  // y = Act(W * x + b): the activation as oneDNN's post-op, applied while the output is still in
  // registers, instead of a separate pass over y (batch 128: 0.1-0.2 ms per convolution of the CNN
  // alone, 0.3-0.7 ms inside a training step, bench/cnn_step). Its primitive is made at the first call; an activation oneDNN has no post-op for runs as
  // a pass of the backend's after the convolution.
  template <class Act, class Backend>
  void forward_activated(const Backend& backend, const float* params, const float* x, std::size_t count, float* y) {
    constexpr int kind = post_op_kind<Act>();
    if constexpr (kind < 0) {
      forward(backend, params, x, count, y);
      if constexpr (!std::is_same_v<Act, nn::Identity>) backend.template activation<Act>(y, count * output_size(), y);
    } else {
      run_forward(activated_forward(kind), params, x, count, y);
    }
  }

  // grad = [dW, db] summed over the batch (overwritten); dx = d(loss)/dx unless null. Reads the
  // source and weights as forward() left them (it runs right before, on the same batch).
  template <class Backend>
  void backward(const Backend&, const float* params, const float* x, const float* dy, std::size_t count, float* dx,
                float* grad) {
    if (count == 0) return;
    check_count(count);
    OmpThreadScope scope(threads_);
    const bool full = count == batch_;
    if (!full) stage(dy, count * output_size(), batch_ * output_size(), stage_out_);
    set_handle(diff_dst_, full ? dy : stage_out_.data());
    to_lib(diff_dst_);
    if (own_diff_dst_weights_) {
      set_handle(diff_dst_weights_, full ? dy : stage_out_.data());
      to_lib(diff_dst_weights_);
    }
    backward_from_library(params, x, count, dx, grad);
  }

  // Whether forward_max_pooled / backward_max_pooled take activation Act (oneDNN has a post-op for
  // it); nn::Conv2d offers nn::Sequential the fusion with a following max pooling only then.
  template <class Act>
  static constexpr bool pools_after() {
    return post_op_kind<Act>() >= 0;
  }

  // y = max_pool(Act(W * x + b)), `pool` the pooling's geometry over this layer's output. The
  // convolution's output stays in oneDNN's blocked layout for oneDNN's max pooling, which records
  // each window's maximum in its workspace: no pass converts the convolution's output to NCHW or
  // back, and pooling in the blocked layout is a vector op per window. The step of issue 11's CNN,
  // batch 128: 1.22-1.24x faster on one thread, 1.25-1.37x on two (docs/performance.md, section 7).
  // Made at the first call; where oneDNN's layouts do not line up, the convolution and
  // backend.max_pool run one after the other, with the same results.
  template <class Act, class Backend>
  void forward_max_pooled(const Backend& backend, const float* params, const float* x, std::size_t count,
                          const Window2d& pool, float* y) {
    static_assert(pools_after<Act>(), "hpcps: forward_max_pooled needs an activation oneDNN has a post-op for");
    if (count == 0) return;
    check_count(count);
    MaxPooled& m = max_pooled(pool);
    if (!m.in_library) {
      forward_activated<Act>(backend, params, x, count, m.plain.data());
      backend.max_pool(m.plain.data(), count, pool, y, m.argmax.data());
      return;
    }
    run_forward(activated_forward(post_op_kind<Act>()), params, x, count, nullptr);
    OmpThreadScope scope(threads_);
    const bool full = count == batch_;
    // A partial batch's pooled output goes through stage_out_ (the convolution's own output stayed
    // in dst_.lib, and the pooled one is smaller).
    float* out = full ? y : stage_out_.data();
    set_handle(m.pooled, out);
    execute(m.forward, {{DNNL_ARG_SRC, dst_.lib.get()},
                        {DNNL_ARG_DST, m.pooled.lib.get()},
                        {DNNL_ARG_WORKSPACE, m.workspace.get()},
                        {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
    to_user(m.pooled);
    if (!full) std::copy(out, out + count * pool.out_size(), y);
  }

  // The backward pass of forward_max_pooled: dy and y are the pooling's output gradient and output
  // (NCHW); Act'(x) at each window's maximum is Act'(y) there.
  template <class Act, class Backend>
  void backward_max_pooled(const Backend& backend, const float* params, const float* x, const float* y,
                           const float* dy, std::size_t count, const Window2d& pool, float* dx, float* grad) {
    static_assert(pools_after<Act>(), "hpcps: backward_max_pooled needs an activation oneDNN has a post-op for");
    if (count == 0) return;
    check_count(count);
    MaxPooled& m = max_pooled(pool);
    const std::size_t pooled = count * pool.out_size();
    backend.template activation_gradient<Act>(dy, y, pooled, m.scaled.data());
    if (!m.in_library) {
      backend.max_pool_backward(m.scaled.data(), m.argmax.data(), count, pool, m.plain.data());
      backward(backend, params, x, m.plain.data(), count, dx, grad);
      return;
    }
    OmpThreadScope scope(threads_);
    // A partial batch runs as a full one whose missing samples have a zero gradient.
    if (count < batch_) std::fill(m.scaled.begin() + static_cast<std::ptrdiff_t>(pooled), m.scaled.end(), 0.0f);
    set_handle(m.pooled_diff, m.scaled.data());
    to_lib(m.pooled_diff);
    execute(m.backward, {{DNNL_ARG_DIFF_DST, m.pooled_diff.lib.get()},
                         {DNNL_ARG_DIFF_SRC, diff_dst_.lib.get()},
                         {DNNL_ARG_WORKSPACE, m.workspace.get()},
                         {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
    if (own_diff_dst_weights_) reorder(m.to_weights_layout, diff_dst_.lib, diff_dst_weights_.lib);
    backward_from_library(params, x, count, dx, grad);
  }

  // The convolution's output kept in oneDNN's channel-blocked buffer for the batch normalization
  // after it, and that layer's input gradient taken back in the buffer the backward pass reads
  // (nn::Sequential's training passes, docs/layers.md#fusion): the reorder of the output to NCHW
  // and the one of its gradient back are not run, 2 of the 4 layout conversions each convolution
  // of the ResNet ran a step. Empty (the layers run apart) where oneDNN's output is not nChw16c or
  // nChw8c of whole blocks, or its backward passes want another layout of its gradient.
  ChannelBlocked blocked_output() const {
    return hands_blocked_ ? ChannelBlocked{static_cast<float*>(dst_.lib.get_data_handle()), block_}
                          : ChannelBlocked{};
  }
  // forward() with the output left in blocked_output().
  template <class Backend>
  void forward_blocked(const Backend&, const float* params, const float* x, std::size_t count) {
    require_blocked();
    run_forward(forward_, params, x, count, nullptr);
  }
  // Where the layer after writes the gradient of the first `count` samples' output; the rest of the
  // buffer is zeroed, as a partial batch runs as a full one.
  ChannelBlocked blocked_output_gradient(std::size_t count) {
    require_blocked();
    check_count(count);
    auto* data = static_cast<float*>(diff_dst_.lib.get_data_handle());
    std::fill(data + count * output_size(), data + batch_ * output_size(), 0.0f);
    return {data, block_};
  }
  // backward() from the gradient written into blocked_output_gradient(count).
  template <class Backend>
  void backward_blocked(const Backend&, const float* params, const float* x, std::size_t count, float* dx,
                        float* grad) {
    require_blocked();
    if (count == 0) return;
    check_count(count);
    OmpThreadScope scope(threads_);
    backward_from_library(params, x, count, dx, grad);
  }

  // The implementation oneDNN chose for each primitive, e.g. "jit:avx512_core" (for reports).
  const std::string& forward_impl() const { return forward_impl_; }
  const std::string& backward_data_impl() const { return backward_data_impl_; }
  const std::string& backward_weights_impl() const { return backward_weights_impl_; }
  // Before the first forward_max_pooled: false pools with backend.max_pool on the NCHW output, the
  // method without the fusion (for comparisons side by side: tests, bench/cnn_step).
  void pool_in_library(bool on) {
    if (max_pooled_) throw Error("backend::Cpu: pool_in_library must be set before the first pooled step");
    pool_in_library_ = on;
  }
  // The max pooling's, once forward_max_pooled ran: oneDNN's, or "backend" for the fallback.
  std::string max_pooling_impl() const {
    if (!max_pooled_) return "";
    return max_pooled_->in_library ? max_pooled_->forward_impl : "backend";
  }

 private:
  using tag = dnnl::memory::format_tag;
  using dims = dnnl::memory::dims;

  // The pooling after the convolution (forward_max_pooled), made at its first call.
  struct MaxPooled {
    Window2d pool;
    bool in_library = false;  // oneDNN pools the blocked output; else the fallback below
    std::string forward_impl;
    dnnl::pooling_forward forward;
    dnnl::pooling_backward backward;
    dnnl::memory workspace;             // each window's maximum, oneDNN's encoding
    DnnlTensor pooled, pooled_diff;     // the pooled output and its gradient: NCHW <-> oneDNN's layout
    dnnl::reorder to_weights_layout;    // diff_dst to the layout the weight gradient reads, if another
    std::vector<float> scaled;          // dy * Act'(y), [max_batch x pooled]
    std::vector<float> plain;           // fallback: the convolution's NCHW output
    std::vector<std::int32_t> argmax;   // fallback: backend.max_pool's record
  };

  MaxPooled& max_pooled(const Window2d& pool) {
    if (max_pooled_) {
      const Window2d& p = max_pooled_->pool;
      if (p.channels != pool.channels || p.height != pool.height || p.width != pool.width ||
          p.window != pool.window || p.stride != pool.stride || p.padding != pool.padding) {
        throw Error("backend::Cpu: a convolution's workspace serves one max pooling after it, and got another");
      }
      return *max_pooled_;
    }
    if (pool.channels != out_channels_ || pool.height != g_.out_height || pool.width != g_.out_width) {
      throw Error(fmt::format("backend::Cpu: a max pooling over {}x{}x{} after a convolution with output {}x{}x{}",
                              pool.channels, pool.height, pool.width, out_channels_, g_.out_height, g_.out_width));
    }
    MaxPooled m;
    m.pool = pool;
    m.scaled.assign(batch_ * pool.out_size(), 0.0f);
    try {
      OmpThreadScope scope(threads_);
      if (pool_in_library_) build_max_pooled(m);
    } catch (const dnnl::error&) {
      m.in_library = false;  // a pooling oneDNN cannot run on this layout: the fallback computes it
    }
    if (!m.in_library) {
      m.plain.assign(batch_ * output_size(), 0.0f);
      m.argmax.assign(batch_ * pool.out_size(), 0);
    }
    max_pooled_.emplace(std::move(m));
    return *max_pooled_;
  }

  void build_max_pooled(MaxPooled& m) {
    const auto& engine = dnnl_cpu_engine();
    const dnnl::memory::desc conv_out = dst_.lib.get_desc();
    // oneDNN pools in place of our kernel only where it reads the convolution's own buffer and
    // writes the gradient straight into the one the convolution's backward pass reads.
    if (!dst_.converts || !diff_dst_.converts || diff_dst_.lib.get_desc() != conv_out) return;
    const auto d = [](std::size_t v) { return static_cast<dnnl::memory::dim>(v); };
    const Window2d& p = m.pool;
    const dims pooled_dims{d(batch_), d(p.channels), d(p.out_height), d(p.out_width)};
    const dims kernel{d(p.window), d(p.window)}, strides{d(p.stride), d(p.stride)}, pad{0, 0};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::pooling_forward::primitive_desc fwd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, conv_out,
                                    plain(pooled_dims, tag::any), strides, kernel, pad, pad),
        attr, engine);
    const dnnl::pooling_backward::primitive_desc bwd(
        dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, conv_out, fwd.dst_desc(), strides, kernel, pad, pad),
        attr, engine, fwd);
    if (bwd.diff_src_desc() != conv_out) return;
    std::size_t scratch = std::max(fwd.scratchpad_desc().get_size(), bwd.scratchpad_desc().get_size());
    const auto pooled_nchw = plain(pooled_dims, tag::nchw);
    m.pooled = output(pooled_nchw, fwd.dst_desc(), attr, scratch);
    m.pooled_diff = input(pooled_nchw, bwd.diff_dst_desc(), attr, scratch);
    if (own_diff_dst_weights_) {
      const dnnl::reorder::primitive_desc pd(engine, conv_out, engine, diff_dst_weights_.lib.get_desc(), attr);
      scratch = std::max(scratch, pd.scratchpad_desc().get_size());
      m.to_weights_layout = dnnl::reorder(pd);
    }
    m.forward = dnnl::pooling_forward(fwd);
    m.forward_impl = fwd.impl_info_str();
    m.backward = dnnl::pooling_backward(bwd);
    m.workspace = dnnl::memory(fwd.workspace_desc(), engine);
    if (scratch > scratchpad_size_) {
      scratchpad_size_ = scratch;
      scratchpad_ = dnnl::memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(scratchpad_size_)},
                                                    dnnl::memory::data_type::u8, tag::a),
                                 engine);
    }
    m.in_library = true;
  }

  // The weight and input gradients from diff_dst_ (and diff_dst_weights_) already in oneDNN's layouts.
  void backward_from_library(const float* params, const float* x, std::size_t count, float* dx, float* grad) {
    const bool full = count == batch_;
    const dnnl::memory* src = &src_.lib;
    if (own_src_weights_) {
      set_handle(src_weights_, full ? x : stage_in_.data());
      to_lib(src_weights_);
      src = &src_weights_.lib;
    } else if (!src_.converts) {
      set_handle(src_, full ? x : stage_in_.data());
    }
    set_handle(diff_weights_, grad);
    diff_bias_.set_data_handle(grad + weight_count());
    execute(backward_weights_,
            {{DNNL_ARG_SRC, src->get()},
             {DNNL_ARG_DIFF_DST, (own_diff_dst_weights_ ? diff_dst_weights_ : diff_dst_).lib.get()},
             {DNNL_ARG_DIFF_WEIGHTS, diff_weights_.lib.get()},
             {DNNL_ARG_DIFF_BIAS, diff_bias_.get()},
             {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
    to_user(diff_weights_);
    if (dx == nullptr) return;
    const dnnl::memory* weights = &weights_.lib;
    if (own_weights_data_) {
      set_handle(weights_data_, params);
      to_lib(weights_data_);
      weights = &weights_data_.lib;
    } else if (!weights_.converts) {
      set_handle(weights_, params);
    }
    float* out = full ? dx : stage_dx_.data();
    set_handle(diff_src_, out);
    execute(backward_data_, {{DNNL_ARG_DIFF_DST, diff_dst_.lib.get()},
                             {DNNL_ARG_WEIGHTS, weights->get()},
                             {DNNL_ARG_DIFF_SRC, diff_src_.lib.get()},
                             {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
    to_user(diff_src_);
    if (!full) std::copy(out, out + count * g_.in_size(), dx);
  }

  // The index of Act's oneDNN post-op in post_op_algorithms, or -1.
  template <class Act>
  static constexpr int post_op_kind() {
    if constexpr (std::is_same_v<Act, nn::Relu>) return 0;
    else if constexpr (std::is_same_v<Act, nn::Tanh>) return 1;
    else if constexpr (std::is_same_v<Act, nn::Sigmoid>) return 2;
    else return -1;
  }
  static constexpr std::array<dnnl::algorithm, 3> post_op_algorithms{
      dnnl::algorithm::eltwise_relu, dnnl::algorithm::eltwise_tanh, dnnl::algorithm::eltwise_logistic};

  const dnnl::primitive& activated_forward(int kind) {
    dnnl::primitive& p = activated_[static_cast<std::size_t>(kind)];
    if (p) return p;
    try {
      OmpThreadScope scope(threads_);
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, post_op_algorithms[static_cast<std::size_t>(kind)], 0.0f, 0.0f);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_post_ops(ops);
      const dnnl::convolution_forward::primitive_desc pd(*forward_desc_, attr, dnnl_cpu_engine());
      // Same layouts and no more scratch than the plain primitive, so its buffers serve both.
      if (pd.src_desc() != src_.lib.get_desc() || pd.weights_desc() != weights_.lib.get_desc() ||
          pd.dst_desc() != dst_.lib.get_desc() || pd.scratchpad_desc().get_size() > scratchpad_size_) {
        throw Error("backend::Cpu: oneDNN chose other layouts for the convolution with its activation");
      }
      p = dnnl::convolution_forward(pd);
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("backend::Cpu: oneDNN could not add an activation to a convolution: {}", e.what()));
    }
    return p;
  }

  void run_forward(const dnnl::primitive& primitive, const float* params, const float* x, std::size_t count,
                   float* y) {
    if (count == 0) return;
    check_count(count);
    OmpThreadScope scope(threads_);
    const bool full = count == batch_;
    if (!full) stage(x, count * g_.in_size(), batch_ * g_.in_size(), stage_in_);
    set_handle(src_, full ? x : stage_in_.data());
    to_lib(src_);
    set_handle(weights_, params);
    to_lib(weights_);
    bias_.set_data_handle(const_cast<float*>(params) + weight_count());
    // y == nullptr: the output stays in dst_.lib, oneDNN's layout, for the pooling after it.
    float* out = y == nullptr ? nullptr : full ? y : stage_out_.data();
    if (out != nullptr) set_handle(dst_, out);
    execute(primitive, {{DNNL_ARG_SRC, src_.lib.get()},
                        {DNNL_ARG_WEIGHTS, weights_.lib.get()},
                        {DNNL_ARG_BIAS, bias_.get()},
                        {DNNL_ARG_DST, dst_.lib.get()},
                        {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
    if (out == nullptr) return;
    to_user(dst_);
    if (!full) std::copy(out, out + count * output_size(), y);
  }

  std::size_t weight_count() const { return out_channels_ * g_.patch(); }
  std::size_t output_size() const { return out_channels_ * g_.out_pixels(); }

  void require_blocked() const {
    if (!hands_blocked_) throw Error("backend::Cpu: this convolution keeps no channel-blocked output");
  }

  void check_count(std::size_t count) const {
    if (count > batch_) {
      throw Error(fmt::format("backend::Cpu convolution: batch of {} samples, the workspace holds {}", count, batch_));
    }
  }

  static dnnl::memory::desc plain(const dims& d, tag t) { return dnnl::memory::desc(d, dnnl::memory::data_type::f32, t); }

  void build() {
    const auto& engine = dnnl_cpu_engine();
    const auto n = static_cast<dnnl::memory::dim>(batch_), c = static_cast<dnnl::memory::dim>(g_.channels),
               h = static_cast<dnnl::memory::dim>(g_.height), w = static_cast<dnnl::memory::dim>(g_.width),
               o = static_cast<dnnl::memory::dim>(out_channels_), k = static_cast<dnnl::memory::dim>(g_.window),
               oh = static_cast<dnnl::memory::dim>(g_.out_height), ow = static_cast<dnnl::memory::dim>(g_.out_width),
               s = static_cast<dnnl::memory::dim>(g_.stride), p = static_cast<dnnl::memory::dim>(g_.padding);
    // Right/bottom padding that makes oneDNN's output size ours: (oh - 1) s + k = h + p + p_r.
    const dims strides{s, s}, pad_l{p, p}, pad_r{(oh - 1) * s + k - h - p, (ow - 1) * s + k - w - p};
    const auto src_md = plain({n, c, h, w}, tag::nchw), dst_md = plain({n, o, oh, ow}, tag::nchw),
               weights_md = plain({o, c, k, k}, tag::oihw), bias_md = plain({o}, tag::x);
    const auto any_src = plain({n, c, h, w}, tag::any), any_dst = plain({n, o, oh, ow}, tag::any),
               any_weights = plain({o, c, k, k}, tag::any);

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto algo = dnnl::algorithm::convolution_direct;
    forward_desc_.emplace(dnnl::prop_kind::forward_training, algo, any_src, any_weights, bias_md, any_dst, strides,
                          pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc fwd(*forward_desc_, attr, engine);
    const dnnl::convolution_backward_data::primitive_desc bwd_data(
        dnnl::convolution_backward_data::desc(algo, any_src, any_weights, any_dst, strides, pad_l, pad_r), attr, engine,
        fwd);
    const dnnl::convolution_backward_weights::primitive_desc bwd_weights(
        dnnl::convolution_backward_weights::desc(algo, any_src, any_weights, bias_md, any_dst, strides, pad_l, pad_r),
        attr, engine, fwd);
    forward_ = dnnl::convolution_forward(fwd);
    backward_data_ = dnnl::convolution_backward_data(bwd_data);
    backward_weights_ = dnnl::convolution_backward_weights(bwd_weights);
    forward_impl_ = fwd.impl_info_str();
    backward_data_impl_ = bwd_data.impl_info_str();
    backward_weights_impl_ = bwd_weights.impl_info_str();

    std::size_t scratch = std::max({fwd.scratchpad_desc().get_size(), bwd_data.scratchpad_desc().get_size(),
                                    bwd_weights.scratchpad_desc().get_size()});
    src_ = input(src_md, fwd.src_desc(), attr, scratch);
    weights_ = input(weights_md, fwd.weights_desc(), attr, scratch);
    dst_ = output(dst_md, fwd.dst_desc(), attr, scratch);
    diff_dst_ = input(dst_md, bwd_data.diff_dst_desc(), attr, scratch);
    own_diff_dst_weights_ = bwd_weights.diff_dst_desc() != bwd_data.diff_dst_desc();
    if (own_diff_dst_weights_) diff_dst_weights_ = input(dst_md, bwd_weights.diff_dst_desc(), attr, scratch);
    own_src_weights_ = bwd_weights.src_desc() != fwd.src_desc();
    if (own_src_weights_) src_weights_ = input(src_md, bwd_weights.src_desc(), attr, scratch);
    own_weights_data_ = bwd_data.weights_desc() != fwd.weights_desc();
    if (own_weights_data_) weights_data_ = input(weights_md, bwd_data.weights_desc(), attr, scratch);
    diff_weights_ = output(weights_md, bwd_weights.diff_weights_desc(), attr, scratch);
    diff_src_ = output(src_md, bwd_data.diff_src_desc(), attr, scratch);
    for (const auto& [b, layout] : {std::pair{std::size_t{16}, tag::nChw16c}, std::pair{std::size_t{8}, tag::nChw8c}}) {
      const auto blocked = plain({n, o, oh, ow}, layout);
      if (out_channels_ % b == 0 && dst_.converts && diff_dst_.converts && !own_diff_dst_weights_ &&
          fwd.dst_desc() == blocked && bwd_data.diff_dst_desc() == blocked) {
        block_ = b;
        break;
      }
    }
    hands_blocked_ = block_ != 0;
    bias_ = dnnl::memory(bias_md, engine, DNNL_MEMORY_NONE);
    diff_bias_ = dnnl::memory(bwd_weights.diff_bias_desc(), engine, DNNL_MEMORY_NONE);
    if (bwd_weights.diff_bias_desc() != bias_md) throw Error("backend::Cpu: oneDNN wants a blocked bias gradient");

    scratchpad_size_ = std::max<std::size_t>(scratch, 1);
    scratchpad_ = dnnl::memory(dnnl::memory::desc({static_cast<dnnl::memory::dim>(scratchpad_size_)},
                                                  dnnl::memory::data_type::u8, tag::a),
                               engine);
    stream_ = dnnl::stream(engine);
    stage_in_.assign(batch_ * g_.in_size(), 0.0f);
    stage_dx_.assign(batch_ * g_.in_size(), 0.0f);
    stage_out_.assign(batch_ * output_size(), 0.0f);
  }

  static DnnlTensor tensor(const dnnl::memory::desc& user, const dnnl::memory::desc& lib,
                           const dnnl::primitive_attr& attr, std::size_t& scratch, bool to_lib) {
    const auto& engine = dnnl_cpu_engine();
    DnnlTensor t;
    t.user = dnnl::memory(user, engine, DNNL_MEMORY_NONE);
    if (lib == user) {
      t.lib = t.user;
      return t;
    }
    t.lib = dnnl::memory(lib, engine);
    const dnnl::reorder::primitive_desc pd =
        to_lib ? dnnl::reorder::primitive_desc(engine, user, engine, lib, attr)
               : dnnl::reorder::primitive_desc(engine, lib, engine, user, attr);
    scratch = std::max(scratch, pd.scratchpad_desc().get_size());
    t.convert = dnnl::reorder(pd);
    t.converts = true;
    return t;
  }
  static DnnlTensor input(const dnnl::memory::desc& user, const dnnl::memory::desc& lib,
                          const dnnl::primitive_attr& attr, std::size_t& scratch) {
    return tensor(user, lib, attr, scratch, true);
  }
  static DnnlTensor output(const dnnl::memory::desc& user, const dnnl::memory::desc& lib,
                           const dnnl::primitive_attr& attr, std::size_t& scratch) {
    return tensor(user, lib, attr, scratch, false);
  }

  static void set_handle(DnnlTensor& t, const float* data) { t.user.set_data_handle(const_cast<float*>(data)); }
  void to_lib(DnnlTensor& t) {
    if (t.converts) reorder(t.convert, t.user, t.lib);
  }
  void to_user(DnnlTensor& t) {
    if (t.converts) reorder(t.convert, t.lib, t.user);
  }
  void reorder(const dnnl::reorder& r, const dnnl::memory& from, const dnnl::memory& to) {
    execute(r, {{DNNL_ARG_FROM, from.get()}, {DNNL_ARG_TO, to.get()}, {DNNL_ARG_SCRATCHPAD, scratchpad_.get()}});
  }

  // The C entry point with the arguments on the stack: the C++ wrapper would build a vector of
  // them on every call.
  void execute(const dnnl::primitive& p, std::initializer_list<dnnl_exec_arg_t> args) {
    const dnnl_status_t status =
        dnnl_primitive_execute(p.get(), stream_.get(), static_cast<int>(args.size()), args.begin());
    if (status == dnnl_success) return;
    throw Error(fmt::format("backend::Cpu: oneDNN failed to run a convolution step (status {})",
                            static_cast<int>(status)));
  }

  // The first `count` floats of `from`, zeros up to `padded`.
  static void stage(const float* from, std::size_t count, std::size_t padded, std::vector<float>& to) {
    std::copy(from, from + count, to.data());
    std::fill(to.data() + count, to.data() + padded, 0.0f);
  }

  int threads_ = 1;
  Window2d g_;
  std::size_t out_channels_ = 0, batch_ = 1;
  std::optional<dnnl::convolution_forward::desc> forward_desc_;
  dnnl::convolution_forward forward_;
  std::array<dnnl::primitive, post_op_algorithms.size()> activated_;  // made at first use
  std::size_t scratchpad_size_ = 0;
  dnnl::convolution_backward_data backward_data_;
  dnnl::convolution_backward_weights backward_weights_;
  std::string forward_impl_, backward_data_impl_, backward_weights_impl_;
  DnnlTensor src_, weights_, dst_, diff_dst_, diff_dst_weights_, src_weights_, weights_data_, diff_weights_, diff_src_;
  bool own_diff_dst_weights_ = false, own_src_weights_ = false, own_weights_data_ = false;
  dnnl::memory bias_, diff_bias_, scratchpad_;
  dnnl::stream stream_;
  std::vector<float> stage_in_, stage_dx_, stage_out_;
  std::optional<MaxPooled> max_pooled_;  // made at the first forward_max_pooled
  bool pool_in_library_ = true;
  std::size_t block_ = 0;  // channels per block of dst_.lib and diff_dst_.lib where they hand over; else 0
  bool hands_blocked_ = false;
};

}  // namespace hpcps::backend::detail
