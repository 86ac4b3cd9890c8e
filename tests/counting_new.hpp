#pragma once
// Replaces the global operator new with one that counts calls, for tests that show a loop does not
// allocate. Include it in exactly one source file of a test program.
//
// Every replaceable form is replaced, and each pair allocates and frees with the same function:
// plain, array and nothrow forms with malloc/free, the aligned forms with aligned_alloc/free.
// Replacing only some (the plain new and delete, as before) leaves the rest to the runtime: under
// AddressSanitizer its own operator new(nothrow) or new(align_val_t) then meets our free, which it
// reports as alloc-dealloc-mismatch (Catch2 allocates its test registry with nothrow new).
//
// Out of line, or GCC inlines free() next to operator new and warns about a mismatch
// (-Wmismatched-new-delete).
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace hpcps_test {
inline std::atomic<long> allocations{0};

[[gnu::noinline]] inline void* counted_malloc(std::size_t n) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
// aligned_alloc wants a size that is a multiple of the alignment (a power of two).
[[gnu::noinline]] inline void* counted_aligned_alloc(std::size_t n, std::align_val_t alignment) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(alignment);
  const std::size_t rounded = n == 0 ? a : (n + a - 1) / a * a;
  return std::aligned_alloc(a, rounded);
}
[[gnu::noinline]] inline void* counted_or_throw(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace hpcps_test

// Throwing forms.
[[gnu::noinline]] void* operator new(std::size_t n) { return hpcps_test::counted_or_throw(hpcps_test::counted_malloc(n)); }
[[gnu::noinline]] void* operator new[](std::size_t n) {
  return hpcps_test::counted_or_throw(hpcps_test::counted_malloc(n));
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
  return hpcps_test::counted_or_throw(hpcps_test::counted_aligned_alloc(n, a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
  return hpcps_test::counted_or_throw(hpcps_test::counted_aligned_alloc(n, a));
}

// Non-throwing forms.
[[gnu::noinline]] void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return hpcps_test::counted_malloc(n);
}
[[gnu::noinline]] void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return hpcps_test::counted_malloc(n);
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return hpcps_test::counted_aligned_alloc(n, a);
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return hpcps_test::counted_aligned_alloc(n, a);
}

// Every delete: memory from malloc and aligned_alloc alike is released with free.
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
