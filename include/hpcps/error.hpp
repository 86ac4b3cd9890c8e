#pragma once
// The one exception type hpcps throws. Every message names what failed and the values involved,
// so the line MPI_Abort prints is enough to act on.
#include <stdexcept>
#include <string>

namespace hpcps {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace hpcps
