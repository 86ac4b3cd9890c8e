#pragma once
// The buffers of compressed pushes, on a worker and on a server alike: per piece a run of floats
// (top-k's values, scaled sign's scales) and a run of 32-bit words (top-k's indices, the bits of
// the signs), every piece's side by side, in `copies` copies (a worker: one; a server: one per
// worker), and each (copy, piece)'s message over them, [count,] floats, words. The buffers never
// move, so the messages' datatypes are built once.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "hpcps/comm/segments.hpp"
#include "hpcps/error.hpp"
#include "hpcps/ps/sign_push.hpp"
#include "hpcps/ps/top_k.hpp"
#include "hpcps/ps/wire_format.hpp"

namespace hpcps::ps::detail {

struct CompressedPiece {
  std::size_t floats = 0, words = 0;
  bool counted = false;  // the piece's message leads with the count (a server's piece 0)
};

// A piece of n elements: top-k's ceil(top_k * n) values and indices (top_k > 0), else scaled
// sign's scales and words of signs. `who` names the side in the errors: both take fp32 pushes only.
inline CompressedPiece compressed_piece(double top_k, WireFormat push_wire, std::size_t n, bool counted,
                                        const char* who) {
  if (top_k > 0.0) {
    check_top_k(top_k, push_wire, who);
    const std::size_t pairs = top_k_count(top_k, n);
    return {pairs, pairs, counted};
  }
  if (push_wire != WireFormat::fp32) {
    throw Error(fmt::format("{}: scaled-sign pushes send bits and fp32 scales; the push wire is {}", who,
                            wire_name(push_wire)));
  }
  return {sign_scales(n), sign_words(n), counted};
}

class CompressedSlots {
 public:
  CompressedSlots() = default;
  // counts[c]: copy c's sample count, which the counted pieces' messages lead with.
  CompressedSlots(const std::vector<CompressedPiece>& pieces, const std::vector<float*>& counts) : pieces_(pieces) {
    for (const CompressedPiece& p : pieces_) {
      float_at_.push_back(float_stride_);
      word_at_.push_back(word_stride_);
      float_stride_ += p.floats;
      word_stride_ += p.words;
    }
    floats_.assign(counts.size() * float_stride_, 0.0f);
    words_.assign(counts.size() * word_stride_, 0);
    for (std::size_t c = 0; c < counts.size(); ++c) {
      for (std::size_t k = 0; k < pieces_.size(); ++k) {
        const CompressedPiece& p = pieces_[k];
        if (p.counted) {
          messages_.emplace_back(comm::Segments{{counts[c], 1}, {floats(c, k), p.floats}, {words(c, k), p.words}});
        } else {
          messages_.emplace_back(comm::Segments{{floats(c, k), p.floats}, {words(c, k), p.words}});
        }
      }
    }
  }

  const CompressedPiece& piece(std::size_t k) const { return pieces_[k]; }
  float* floats(std::size_t copy, std::size_t k) { return floats_.data() + copy * float_stride_ + float_at_[k]; }
  std::uint32_t* words(std::size_t copy, std::size_t k) { return words_.data() + copy * word_stride_ + word_at_[k]; }
  comm::Segments& message(std::size_t copy, std::size_t k) { return messages_[copy * pieces_.size() + k]; }

 private:
  std::vector<CompressedPiece> pieces_;
  std::vector<std::size_t> float_at_, word_at_;  // where piece k starts in a copy
  std::size_t float_stride_ = 0, word_stride_ = 0;  // one copy's floats and words
  std::vector<float> floats_;
  std::vector<std::uint32_t> words_;
  std::vector<comm::Segments> messages_;  // by copy, then piece
};

}  // namespace hpcps::ps::detail
