#pragma once
// A small streaming JSON writer for reports and benchmark results: enough for objects, arrays,
// strings and numbers, with commas and escaping handled in one place.
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace hpcps::metrics {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& key(std::string_view k) {
    separate();
    write_string(k);
    out_ += ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(std::string_view s) {
    separate();
    write_string(s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { return raw(b ? "true" : "false"); }
  JsonWriter& value(double d) { return std::isfinite(d) ? raw(fmt::format("{}", d)) : raw("null"); }
  // Shortest text that reads back as the same float: 0.02f prints as 0.02, not 0.0199999995.
  JsonWriter& value(float d) { return std::isfinite(d) ? raw(fmt::format("{}", d)) : raw("null"); }
  JsonWriter& value(int v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(long v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(long long v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(unsigned v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(unsigned long v) { return raw(fmt::format("{}", v)); }
  JsonWriter& value(unsigned long long v) { return raw(fmt::format("{}", v)); }
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }

 private:
  JsonWriter& raw(std::string_view text) {
    separate();
    out_ += text;
    return *this;
  }
  JsonWriter& open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
  void newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  void write_string(std::string_view s) {
    out_ += '"';
    for (char c : s) {
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) out_ += fmt::format("\\u{:04x}", static_cast<int>(c));
          else out_ += c;
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace hpcps::metrics
