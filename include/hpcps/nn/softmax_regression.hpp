#pragma once
// Multinomial logistic regression: one linear map and a softmax. It exists as its own type to
// show that the network concept is not MLP-specific (docs/architecture.md#adding-a-network-type):
// anything with a flat parameter vector, a gradient and an evaluation can be served.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/error.hpp"
#include "hpcps/nn/activation.hpp"
#include "hpcps/nn/batch_stats.hpp"
#include "hpcps/nn/detail/chunks.hpp"

namespace hpcps::nn {

class SoftmaxRegression {
 public:
  template <class Backend>
  struct Workspace {
    std::size_t max_batch = 0;
    typename Backend::buffer_type logits;
    typename Backend::buffer_type input_stage;
    typename Backend::label_buffer_type label_stage;
  };

  SoftmaxRegression(std::size_t inputs, std::size_t classes) : inputs_(inputs), classes_(classes) {
    if (inputs == 0 || classes < 2) {
      throw Error(fmt::format("nn::SoftmaxRegression needs inputs > 0 and classes >= 2, got {} and {}", inputs,
                              classes));
    }
  }

  std::size_t parameter_count() const { return classes_ * inputs_ + classes_; }
  std::size_t input_size() const { return inputs_; }
  std::size_t output_size() const { return classes_; }
  std::string describe() const { return fmt::format("softmax-regression[{}-{}]", inputs_, classes_); }

  // Zero is the natural start of a convex problem; the seed is part of the concept all the same.
  void initialize(float* params, std::uint64_t /*seed*/) const { std::fill(params, params + parameter_count(), 0.0f); }

  template <class Backend>
  Workspace<Backend> make_workspace(const Backend& backend, std::size_t max_batch) const {
    Workspace<Backend> ws;
    ws.max_batch = max_batch;
    ws.logits = backend.make_buffer(max_batch * classes_);
    if constexpr (!Backend::host_accessible) {
      ws.input_stage = backend.make_buffer(max_batch * inputs_);
      ws.label_stage = backend.make_label_buffer(max_batch);
    }
    return ws;
  }

  template <class Backend>
  BatchStats gradient(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count, float* grad) const {
    detail::check_batch_fits(*this, count, ws.max_batch);
    const float* x = backend.stage(inputs, count * inputs_, ws.input_stage);
    float* z = logits(backend, ws, params, x, count);
    const BatchStats stats = backend.softmax_cross_entropy(z, backend.stage(labels, count, ws.label_stage), count,
                                                           classes_, true);
    backend.gemm(backend::Transpose::yes, backend::Transpose::no, classes_, inputs_, count, 1.0f, z, classes_, x,
                 inputs_, 0.0f, grad, inputs_);
    backend.column_sums(z, count, classes_, grad + classes_ * inputs_);
    return stats;
  }

  template <class Backend>
  BatchStats evaluate(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* inputs,
                      const std::int32_t* labels, std::size_t count) const {
    return detail::sum_over_chunks(count, ws.max_batch, [&](std::size_t begin, std::size_t n) {
      float* z = logits(backend, ws, params, backend.stage(inputs + begin * inputs_, n * inputs_, ws.input_stage), n);
      return backend.softmax_cross_entropy(z, backend.stage(labels + begin, n, ws.label_stage), n, classes_, false);
    });
  }

 private:
  template <class Backend>
  float* logits(const Backend& backend, Workspace<Backend>& ws, const float* params, const float* x,
                std::size_t count) const {
    float* z = Backend::data(ws.logits);
    backend.gemm(backend::Transpose::no, backend::Transpose::yes, count, classes_, inputs_, 1.0f, x, inputs_, params,
                 inputs_, 0.0f, z, classes_);
    backend.template bias_activation<Identity>(z, params + classes_ * inputs_, count, classes_);
    return z;
  }

  std::size_t inputs_, classes_;
};

}  // namespace hpcps::nn
