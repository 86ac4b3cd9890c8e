#pragma once
// Replaces the global operator new with one that counts calls, for tests that show a loop does not
// allocate. Include it in exactly one source file of a test program. Out of line, or GCC inlines
// free() next to operator new and warns about a mismatch (-Wmismatched-new-delete).
#include <atomic>
#include <cstdlib>
#include <new>

namespace hpcps_test {
inline std::atomic<long> allocations{0};
}  // namespace hpcps_test

[[gnu::noinline]] void* operator new(std::size_t n) {
  hpcps_test::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
