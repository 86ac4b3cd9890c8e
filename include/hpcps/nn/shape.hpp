#pragma once
// The shape of one sample as it flows between layers: channels x height x width, stored NCHW
// (channel planes one after another, rows within a plane). A flat vector of n features is
// Shape{n, 1, 1}, so dense and convolutional layers share one description.
#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace hpcps::nn {

struct Shape {
  std::size_t channels = 1;
  std::size_t height = 1;
  std::size_t width = 1;

  constexpr std::size_t size() const { return channels * height * width; }
  constexpr std::size_t pixels() const { return height * width; }
  // A vector: what a dense layer accepts.
  constexpr bool flat() const { return height == 1 && width == 1; }

  friend constexpr bool operator==(const Shape& a, const Shape& b) {
    return a.channels == b.channels && a.height == b.height && a.width == b.width;
  }
  friend constexpr bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
};

// "64x7x7"; a flat shape prints as its length alone, "128".
inline std::string to_string(const Shape& s) {
  return s.flat() ? fmt::format("{}", s.channels) : fmt::format("{}x{}x{}", s.channels, s.height, s.width);
}

}  // namespace hpcps::nn

// fmt 9 has no format_as: a formatter lets messages write fmt::format("{}", shape). No format
// specs (deriving from formatter<string_view> for them draws a false -Wstringop-overflow from GCC 12).
template <>
struct fmt::formatter<hpcps::nn::Shape> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  template <class Context>
  auto format(const hpcps::nn::Shape& s, Context& ctx) const {
    return fmt::format_to(ctx.out(), "{}", hpcps::nn::to_string(s));
  }
};
