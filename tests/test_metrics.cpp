// The JSON writer that reports and benchmarks rely on.
#include <catch2/catch.hpp>

#include <limits>

#include "hpcps/metrics/json.hpp"

TEST_CASE("JSON writer: nesting, commas, escaping, numbers", "[metrics]") {
  hpcps::metrics::JsonWriter json;
  json.begin_object();
  json.field("name", "a \"quoted\"\\path\n").field("lr", 0.02f).field("count", std::size_t{3});
  json.key("list").begin_array().value(1).value(2.5).value(true).end_array();
  json.key("empty").begin_object().end_object();
  json.field("nan", std::numeric_limits<double>::quiet_NaN());
  json.end_object();
  const std::string expected =
      "{\n  \"name\": \"a \\\"quoted\\\"\\\\path\\n\",\n  \"lr\": 0.02,\n  \"count\": 3,\n"
      "  \"list\": [\n    1,\n    2.5,\n    true\n  ],\n  \"empty\": {},\n  \"nan\": null\n}";
  CHECK(json.str() == expected);
}
