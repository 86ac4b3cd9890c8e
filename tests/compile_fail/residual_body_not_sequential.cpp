// A residual block's body must be an nn::Sequential chain: a single layer is a wrong composition.
#include <hpcps/nn/layers.hpp>

int main() {
  using Wrong = hpcps::nn::Residual<hpcps::nn::Conv2d>;
  const Wrong block(hpcps::nn::Shape{1, 4, 4}, {});
  return static_cast<int>(block.parameter_count());
}
