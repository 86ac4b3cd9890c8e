#pragma once

#define HPCPS_VERSION_MAJOR 0
#define HPCPS_VERSION_MINOR 1
#define HPCPS_VERSION_PATCH 0

namespace hpcps {
inline constexpr const char* version_string = "0.1.0";
}  // namespace hpcps
