#pragma once
// The trained model as a NumPy .npz file (io/npz.hpp): one named array per layer, so a Python
// user reads it with numpy.load alone, plus the network's description. nn::Mlp's layers become
// dense<l>.weight [out, in] and dense<l>.bias [out]; an nn::Sequential's layers with parameters
// become <i>_<layer name>, flat, in the layer's own order; any other network one array,
// "parameters". load_model reads it back for a network of the same description.
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/error.hpp"
#include "hpcps/io/npz.hpp"
#include "hpcps/nn/mlp.hpp"
#include "hpcps/ps/composition.hpp"

namespace hpcps::ps {

struct ModelBlock {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t offset = 0, count = 0;  // in the flat parameter vector
};

namespace detail {

template <class N, class = void>
struct is_sequential : std::false_type {};
template <class N>
struct is_sequential<N, std::void_t<decltype(N::layer_count), decltype(std::declval<const N&>().parameter_offset(0)),
                                    decltype(std::declval<const N&>().template layer<0>())>> : std::true_type {};

template <class N, std::size_t... I>
void sequential_blocks(const N& net, std::vector<ModelBlock>& blocks, std::index_sequence<I...>) {
  (
      [&] {
        const auto& layer = net.template layer<I>();
        if (layer.parameter_count() > 0) {
          blocks.push_back({fmt::format("{}_{}", I, std::decay_t<decltype(layer)>::name), {layer.parameter_count()},
                            net.parameter_offset(I), layer.parameter_count()});
        }
      }(),
      ...);
}

template <class N>
struct is_mlp : std::false_type {};
template <class Act>
struct is_mlp<nn::Mlp<Act>> : std::true_type {};

}  // namespace detail

template <class Network>
std::vector<ModelBlock> model_blocks(const Network& net) {
  std::vector<ModelBlock> blocks;
  if constexpr (detail::is_mlp<Network>::value) {
    const auto& sizes = net.layer_sizes();
    std::size_t offset = 0;
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
      const std::size_t in = sizes[l], out = sizes[l + 1];
      blocks.push_back({fmt::format("dense{}.weight", l), {out, in}, offset, out * in});
      blocks.push_back({fmt::format("dense{}.bias", l), {out}, offset + out * in, out});
      offset += out * in + out;
    }
  } else if constexpr (detail::is_sequential<Network>::value) {
    detail::sequential_blocks(net, blocks, std::make_index_sequence<Network::layer_count>{});
  } else {
    blocks.push_back({"parameters", {net.parameter_count()}, 0, net.parameter_count()});
  }
  return blocks;
}

// Writes `params` (the whole flat vector) of `net` to `path`.
template <class Network>
void save_model(const std::string& path, const Network& net, const std::vector<float>& params) {
  std::vector<io::NpzArray> arrays;
  for (const auto& b : model_blocks(net)) {
    arrays.push_back({b.name, b.shape, std::vector<float>(params.begin() + static_cast<std::ptrdiff_t>(b.offset),
                                                          params.begin() + static_cast<std::ptrdiff_t>(b.offset + b.count))});
  }
  io::write_npz(path, arrays, describe_network(net));
}

// The flat parameter vector of `net` from a file save_model wrote for a network of its description.
template <class Network>
std::vector<float> load_model(const std::string& path, const Network& net) {
  std::string description;
  const auto arrays = io::read_npz(path, &description);
  if (description != describe_network(net)) {
    throw Error(fmt::format("{}: a model of {}, not of this program's {}", path,
                            description.empty() ? std::string("an unnamed network") : description, describe_network(net)));
  }
  const auto blocks = model_blocks(net);
  if (arrays.size() != blocks.size()) {
    throw Error(fmt::format("{}: {} arrays, {} has {}", path, arrays.size(), describe_network(net), blocks.size()));
  }
  std::vector<float> params(net.parameter_count());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (arrays[i].name != blocks[i].name || arrays[i].shape != blocks[i].shape) {
      throw Error(fmt::format("{}: array {} is '{}' of shape ({}), expected '{}' of shape ({})", path, i, arrays[i].name,
                              fmt::join(arrays[i].shape, ", "), blocks[i].name, fmt::join(blocks[i].shape, ", ")));
    }
    std::copy(arrays[i].values.begin(), arrays[i].values.end(), params.begin() + static_cast<std::ptrdiff_t>(blocks[i].offset));
  }
  return params;
}

}  // namespace hpcps::ps
