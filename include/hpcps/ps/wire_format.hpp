#pragma once
// The number format of the floats a push or a pull carries. fp32 sends the floats as they are;
// bf16 and fp16 send 16 bits per element, halving the bytes on the wire at the cost of precision:
// - bf16 (bfloat16: fp32's sign and 8-bit exponent, 7 mantissa bits) keeps fp32's range, so a
//   gradient sum cannot overflow or underflow in it that would not in fp32; relative error at most
//   2^-9 per element. The format to use.
// - fp16 (IEEE half: 5-bit exponent, 10 mantissa bits) is 8x more precise but spans only
//   6e-8 .. 65504: small gradients lose digits or flush to zero, and a worker's gradient is a SUM
//   over its batch, so large ones can pass 65504. A finite value beyond it is sent as +-65504
//   (saturated, not rounded to inf): a clipped gradient element costs one inexact step, while an
//   inf would turn the parameters into NaN at the next update. inf and NaN themselves pass
//   through, so a diverged gradient still shows.
// Both conversions round to nearest, ties to even (the rounding of IEEE arithmetic and of
// hardware converters such as vcvtps2ph and vcvtneps2bf16), and are written in portable C++17
// with bit masks instead of branches so the loops over a piece vectorise.
//
// Only the wire changes: workers compute in fp32, servers sum the 16-bit slices in fp32 (each
// element converted as it is read, in the same order as fp32 slices) and keep the fp32 master
// copy of the parameters and the optimizer state. The sample count of a push always travels
// as an fp32 beside the 16-bit slice, so it stays exact.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::ps {

enum class WireFormat { fp32, bf16, fp16 };

inline const char* wire_name(WireFormat format) {
  switch (format) {
    case WireFormat::bf16: return "bf16";
    case WireFormat::fp16: return "fp16";
    default: return "fp32";
  }
}

inline WireFormat parse_wire_format(std::string_view name) {
  if (name == "fp32") return WireFormat::fp32;
  if (name == "bf16") return WireFormat::bf16;
  if (name == "fp16") return WireFormat::fp16;
  throw Error(fmt::format("ps::WireFormat: unknown wire format '{}'; use fp32, bf16 or fp16", name));
}

// Bytes one element takes on the wire.
inline std::size_t wire_bytes(WireFormat format) { return format == WireFormat::fp32 ? 4 : 2; }

namespace wire {

inline std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// a if c else b, as a bit mask rather than a branch: GCC keeps a ternary between values computed
// by different arithmetic as control flow, which stops the loops over a piece vectorising.
inline std::uint32_t select(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(c);
  return (a & mask) | (b & ~mask);
}

// Round to nearest even on the 16 bits dropped: adding 0x7FFF carries into the kept half exactly
// when the dropped half is above one half, and the kept half's lowest bit breaks the tie. A NaN is
// truncated with its quiet bit set, or rounding could carry its payload into an inf.
inline std::uint16_t to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<std::uint16_t>(select((u & 0x7FFFFFFFu) > 0x7F800000u, quiet_nan, rounded));
}
inline float from_bf16(std::uint16_t h) { return float_of(static_cast<std::uint32_t>(h) << 16); }

// F. Giesen's float_to_half_fast3_rtne, with the branches made masks and finite overflow
// saturated (see above). Normal results: rebias the exponent and round the 13 dropped bits to
// nearest even with the same carry trick as bf16. Subnormal results: adding 0.5f lines the
// half's subnormal ulp (2^-24) up with the float's ulp at 0.5, so the FPU's own round to nearest
// even does the rounding.
inline std::uint16_t to_fp16(float x) {
  const std::uint32_t u = bits_of(x) & 0x7FFFFFFFu;
  const std::uint32_t sign = (bits_of(x) >> 16) & 0x8000u;
  const std::uint32_t normal = (u - (112u << 23) + 0xFFFu + ((u >> 13) & 1u)) >> 13;
  const std::uint32_t subnormal = bits_of(float_of(u) + 0.5f) - bits_of(0.5f);
  std::uint32_t h = select(u < (113u << 23), subnormal, normal);
  h = select(h > 0x7BFFu, 0x7BFFu, h);                                // finite overflow saturates
  h = select(u >= 0x7F800000u, select(u > 0x7F800000u, 0x7E00u, 0x7C00u), h);  // NaN (quiet) or inf
  return static_cast<std::uint16_t>(sign | h);
}
// Giesen's half_to_float: shift exponent and mantissa into place and rebias; an inf or NaN gets
// the rest of fp32's exponent, a subnormal is renormalised by one float subtraction.
inline float from_fp16(std::uint16_t h) {
  const std::uint32_t shifted = (static_cast<std::uint32_t>(h) & 0x7FFFu) << 13;
  const std::uint32_t exponent = shifted & (0x7C00u << 13);
  const std::uint32_t rebiased = shifted + (112u << 23) + select(exponent == (0x7C00u << 13), 112u << 23, 0u);
  const float small = float_of(rebiased + (1u << 23)) - float_of(113u << 23);
  const std::uint32_t magnitude = select(exponent == 0, bits_of(small), rebiased);
  return float_of(magnitude | ((static_cast<std::uint32_t>(h) & 0x8000u) << 16));
}

// The 16-bit formats as types, so a loop over a slice is compiled once per format with the
// conversion inlined, and a run-time WireFormat is dispatched once per piece, not per element.
struct Bf16 {
  static constexpr WireFormat format = WireFormat::bf16;
  static std::uint16_t encode(float x) { return to_bf16(x); }
  static float decode(std::uint16_t h) { return from_bf16(h); }
};
struct Fp16 {
  static constexpr WireFormat format = WireFormat::fp16;
  static std::uint16_t encode(float x) { return to_fp16(x); }
  static float decode(std::uint16_t h) { return from_fp16(h); }
};

// Calls f(Bf16{}) or f(Fp16{}); fp32 has no 16-bit codec.
template <class F>
decltype(auto) with_codec(WireFormat format, F&& f) {
  if (format == WireFormat::bf16) return f(Bf16{});
  if (format == WireFormat::fp16) return f(Fp16{});
  throw Error("ps::wire: fp32 has no 16-bit encoding; the caller sends its floats as they are");
}

// out[0, n) <- the format's encoding of in[0, n), and back.
inline void encode(WireFormat format, const float* in, std::size_t n, std::uint16_t* out) {
  with_codec(format, [&](auto codec) {
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) out[i] = decltype(codec)::encode(in[i]);
  });
}
inline void decode(WireFormat format, const std::uint16_t* in, std::size_t n, float* out) {
  with_codec(format, [&](auto codec) {
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) out[i] = decltype(codec)::decode(in[i]);
  });
}

}  // namespace wire
}  // namespace hpcps::ps
