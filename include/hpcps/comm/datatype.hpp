#pragma once
// The element types hpcps sends, and their MPI datatypes. The typed Communicator calls deduce T
// from the buffer pointer, so the datatype can never disagree with the buffer.
//
// Integers map by size and signedness onto MPI's fixed-size types (MPI_INT32_T, ...), so
// std::int64_t, long long and std::size_t all work and mean the same on every rank; MPI_INT and
// MPI_LONG would tie the wire format to the platform's idea of int and long.
#include <mpi.h>

#include <type_traits>

namespace hpcps::comm {

namespace detail {

template <class T>
inline constexpr bool is_mpi_integer_v =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, wchar_t> &&
    !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t> &&
    (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);

}  // namespace detail

// True for the element types datatype_of<T>() accepts (cv-qualifiers ignored).
template <class T>
inline constexpr bool is_mpi_type_v = std::is_same_v<std::remove_cv_t<T>, float> ||
                                      std::is_same_v<std::remove_cv_t<T>, double> ||
                                      detail::is_mpi_integer_v<std::remove_cv_t<T>>;

template <class T>
MPI_Datatype datatype_of() {
  static_assert(is_mpi_type_v<T>,
                "hpcps::comm::datatype_of<T>: T must be float, double, char or a fixed-size integer "
                "(std::int8_t ... std::uint64_t). bool, enums, structs and pointers have no MPI datatype "
                "here: convert them, or send their bytes as std::uint8_t.");
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<U, double>) {
    return MPI_DOUBLE;
  } else if constexpr (std::is_same_v<U, char>) {
    return MPI_CHAR;
  } else if constexpr (detail::is_mpi_integer_v<U>) {
    constexpr bool is_signed = std::is_signed_v<U>;
    if constexpr (sizeof(U) == 1) return is_signed ? MPI_INT8_T : MPI_UINT8_T;
    if constexpr (sizeof(U) == 2) return is_signed ? MPI_INT16_T : MPI_UINT16_T;
    if constexpr (sizeof(U) == 4) return is_signed ? MPI_INT32_T : MPI_UINT32_T;
    if constexpr (sizeof(U) == 8) return is_signed ? MPI_INT64_T : MPI_UINT64_T;
  } else {
    return MPI_DATATYPE_NULL;  // unreachable: the static_assert above has already failed
  }
}

// A short name for T in error messages ("count=1000 x float"), spelled as the fixed-size type the
// wire carries. No static_assert of its own: datatype_of<T>() reports an unsupported T once.
template <class T>
constexpr const char* type_name() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) {
    return "float";
  } else if constexpr (std::is_same_v<U, double>) {
    return "double";
  } else if constexpr (std::is_same_v<U, char>) {
    return "char";
  } else if constexpr (detail::is_mpi_integer_v<U>) {
    constexpr bool is_signed = std::is_signed_v<U>;
    if constexpr (sizeof(U) == 1) return is_signed ? "int8" : "uint8";
    if constexpr (sizeof(U) == 2) return is_signed ? "int16" : "uint16";
    if constexpr (sizeof(U) == 4) return is_signed ? "int32" : "uint32";
    if constexpr (sizeof(U) == 8) return is_signed ? "int64" : "uint64";
  } else {
    return "?";
  }
}

}  // namespace hpcps::comm
