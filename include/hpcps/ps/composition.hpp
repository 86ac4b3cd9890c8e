#pragma once
// What every rank of a job must agree on before the first message: the network and its parameter
// count, the backend, the strategy, the update rule, the wire formats, the piece size, the layout
// and the library's version. Ranks that disagree exchange messages of different sizes, or read
// past each other's shared segments; one collective check at construction turns that into one
// sentence on every rank (docs/running.md#errors).
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/error.hpp"

namespace hpcps::ps {

namespace detail {
template <class T, class = void>
struct has_describe : std::false_type {};
template <class T>
struct has_describe<T, std::void_t<decltype(std::string(std::declval<const T&>().describe()))>> : std::true_type {};
}  // namespace detail

// A network's own description where it has one (layer sizes and activation), else its type.
template <class Network>
std::string describe_network(const Network& network) {
  if constexpr (detail::has_describe<Network>::value) {
    return std::string(network.describe());
  } else {
    return typeid(Network).name();
  }
}

class Composition {
 public:
  Composition& add(std::string item, std::string value) {
    items_.emplace_back(std::move(item), std::move(value));
    return *this;
  }
  const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

  // Collective over `world`. Throws the same hpcps::CollectiveError on every rank if any rank's
  // items differ from rank 0's, naming the lowest such rank, its first differing item and both values.
  void agree(const comm::Communicator& world) const {
    std::string reference = serialize();
    broadcast_string(world, reference, 0);
    const std::string mine = world.rank() == 0 ? std::string() : difference_from(parse(reference), world.rank());
    const int first = world.allreduce_value(mine.empty() ? world.size() : world.rank(), MPI_MIN);
    if (first == world.size()) return;
    std::string sentence = mine;
    broadcast_string(world, sentence, first);
    throw CollectiveError(sentence, world.rank() == 0);
  }

 private:
  // Items are short words and values without control characters: unit and record separators
  // delimit them.
  static constexpr char unit = '\x1f', record = '\x1e';

  std::string serialize() const {
    std::string out;
    for (const auto& [item, value] : items_) out += item + unit + value + record;
    return out;
  }

  static std::vector<std::pair<std::string, std::string>> parse(const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::size_t begin = 0;
    while (begin < text.size()) {
      const std::size_t end = text.find(record, begin);
      const std::size_t split = text.find(unit, begin);
      if (end == std::string::npos || split == std::string::npos || split > end) break;
      out.emplace_back(text.substr(begin, split - begin), text.substr(split + 1, end - split - 1));
      begin = end + 1;
    }
    return out;
  }

  // Empty if this rank agrees with rank 0's items, else the sentence every rank will print.
  std::string difference_from(const std::vector<std::pair<std::string, std::string>>& reference, int rank) const {
    const auto sentence = [rank](const std::string& item, const std::string& theirs, const std::string& ours) {
      return fmt::format("ParameterServer: the ranks disagree on the {}: rank 0 has {} and rank {} has {}; every "
                         "rank must build the same composition with the same options (same program and hpcps "
                         "version)",
                         item, theirs, rank, ours);
    };
    for (std::size_t i = 0; i < items_.size() || i < reference.size(); ++i) {
      if (i >= reference.size()) return sentence(items_[i].first, "no such item", items_[i].second);
      if (i >= items_.size()) return sentence(reference[i].first, reference[i].second, "no such item");
      if (reference[i].first != items_[i].first) {
        return sentence("composition's items", fmt::format("'{}'", reference[i].first),
                        fmt::format("'{}'", items_[i].first));
      }
      if (reference[i].second != items_[i].second) {
        return sentence(items_[i].first, reference[i].second, items_[i].second);
      }
    }
    return {};
  }

  static void broadcast_string(const comm::Communicator& world, std::string& text, int root) {
    std::uint64_t length = text.size();
    world.broadcast(&length, 1, root);
    text.resize(static_cast<std::size_t>(length));
    world.broadcast(text.data(), text.size(), root);
  }

  std::vector<std::pair<std::string, std::string>> items_;
};

}  // namespace hpcps::ps
