#pragma once
// The GEMMs nn::Mlp::gradient makes for one batch, in its order (nn/mlp.hpp), with the transposes
// and leading dimensions it passes: forward per layer Y[b x out] = X[b x in] W^T; backward per
// layer dW[out x in] = D^T A, and dX[b x in] = D W except for the input layer (nothing consumes
// the input's gradient). Shared by the benchmarks that time a step's GEMMs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hpcps/backend/gemm.hpp"
#include "hpcps/data/random.hpp"
#include "hpcps/nn/mlp.hpp"

namespace hpcps_bench {

// One GEMM of the step: C(m x n) = op(A) op(B), row-major.
struct StepGemm {
  std::size_t layer;
  const char* kind;  // forward, weight_gradient, input_gradient
  hpcps::backend::Transpose ta, tb;
  std::size_t m, n, k;
  std::size_t lda() const { return ta == hpcps::backend::Transpose::no ? k : m; }
  std::size_t ldb() const { return tb == hpcps::backend::Transpose::no ? n : k; }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  std::string name() const { return fmt::format("{} L{}", kind, layer); }
};

inline std::vector<StepGemm> step_gemms(const std::vector<std::size_t>& sizes, std::size_t batch) {
  using T = hpcps::backend::Transpose;
  std::vector<StepGemm> out;
  const std::size_t layers = sizes.size() - 1;
  for (std::size_t l = 0; l < layers; ++l) out.push_back({l, "forward", T::no, T::yes, batch, sizes[l + 1], sizes[l]});
  for (std::size_t l = layers; l-- > 0;) {
    out.push_back({l, "weight_gradient", T::yes, T::no, sizes[l + 1], sizes[l], batch});
    if (l > 0) out.push_back({l, "input_gradient", T::no, T::no, batch, sizes[l], sizes[l + 1]});
  }
  return out;
}

// One MLP training step's inputs on a backend: random parameters, batch and labels, and a
// workspace, so a benchmark can time the whole gradient beside its GEMMs.
template <class Backend>
class StepProblem {
 public:
  StepProblem(const Backend& backend, const std::vector<std::size_t>& sizes, std::size_t batch)
      : backend_(backend),
        net_(sizes),
        batch_(batch),
        params_(net_.parameter_count()),
        grad_(net_.parameter_count()),
        x_(batch * sizes.front()),
        y_(batch),
        ws_(net_.make_workspace(backend, batch)) {
    hpcps::data::Rng rng(1);
    net_.initialize(params_.data(), 1);
    for (float& v : x_) v = hpcps::data::uniform_float(rng);
    for (auto& l : y_) l = static_cast<std::int32_t>(hpcps::data::uniform_below(rng, sizes.back()));
  }
  void gradient() { net_.gradient(backend_, ws_, params_.data(), x_.data(), y_.data(), batch_, grad_.data()); }

 private:
  const Backend& backend_;
  hpcps::nn::Mlp<hpcps::nn::Relu> net_;
  std::size_t batch_;
  std::vector<float> params_, grad_, x_;
  std::vector<std::int32_t> y_;
  typename hpcps::nn::Mlp<hpcps::nn::Relu>::template Workspace<Backend> ws_;
};

}  // namespace hpcps_bench
