#pragma once
// How often ps::train writes a checkpoint: every N epochs (at the epoch's end), every N clocks, or
// every N seconds of wall time (decided by rank 0 and agreed at the next clock). On the command
// line: "2" or "2epochs", "500clocks", "90s", "30min", "2h".
#include <cctype>
#include <cstdlib>
#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "hpcps/error.hpp"

namespace hpcps::ps {

struct CheckpointInterval {
  enum class Unit { epochs, clocks, seconds };
  double amount = 1.0;  // whole epochs and clocks; any positive number of seconds
  Unit unit = Unit::epochs;
};

inline std::string describe(const CheckpointInterval& i) {
  switch (i.unit) {
    case CheckpointInterval::Unit::clocks:
      return fmt::format("every {} clock(s)", i.amount);
    case CheckpointInterval::Unit::seconds:
      return fmt::format("every {} s", i.amount);
    case CheckpointInterval::Unit::epochs:
    default:
      return fmt::format("every {} epoch(s)", i.amount);
  }
}

// Throws hpcps::Error with a sentence naming the text when it is not one of the forms above.
inline CheckpointInterval parse_checkpoint_interval(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  double amount = 0.0;
  const std::string number(text.substr(0, digits));
  char* end = nullptr;
  if (digits > 0) amount = std::strtod(number.c_str(), &end);
  const std::string_view unit = text.substr(digits);
  const auto bad = [&] {
    return Error(fmt::format("'{}' is not a checkpoint interval: write N epochs (2, 2epochs), clocks (500clocks) or "
                             "time (90s, 30min, 2h), N > 0",
                             text));
  };
  if (digits == 0 || end != number.c_str() + number.size() || !(amount > 0.0) || amount > 1e9) throw bad();
  CheckpointInterval i;
  i.amount = amount;
  if (unit.empty() || unit == "epoch" || unit == "epochs") i.unit = CheckpointInterval::Unit::epochs;
  else if (unit == "clock" || unit == "clocks") i.unit = CheckpointInterval::Unit::clocks;
  else if (unit == "s") i.unit = CheckpointInterval::Unit::seconds;
  else if (unit == "min") i = {amount * 60.0, CheckpointInterval::Unit::seconds};
  else if (unit == "h") i = {amount * 3600.0, CheckpointInterval::Unit::seconds};
  else throw bad();
  if (i.unit != CheckpointInterval::Unit::seconds && i.amount != static_cast<double>(static_cast<std::size_t>(i.amount))) {
    throw bad();
  }
  return i;
}

}  // namespace hpcps::ps
