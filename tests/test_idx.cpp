// IDX reading, dataset loading and Fashion-MNIST lookup. Every malformed file is built byte by
// byte so each test pins one specific problem and the message that names it.
#include <hpcps/data/data.hpp>

#include <catch2/catch.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using hpcps::data::DataError;
using Bytes = std::vector<std::uint8_t>;

// Both the type and the message: the message must start with the path and name the problem.
#define HPCPS_CHECK_DATA_ERROR(expr, path, text)                                         \
  do {                                                                                   \
    CHECK_THROWS_AS(expr, DataError);                                                    \
    CHECK_THROWS_WITH(expr, Catch::StartsWith(path) && Catch::Contains(text));           \
  } while (0)

namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hpcps-test-idx-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

Bytes idx_header(std::uint8_t type, const std::vector<std::uint32_t>& dims) {
  Bytes b{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims) {
    b.push_back(static_cast<std::uint8_t>(d >> 24));
    b.push_back(static_cast<std::uint8_t>(d >> 16));
    b.push_back(static_cast<std::uint8_t>(d >> 8));
    b.push_back(static_cast<std::uint8_t>(d));
  }
  return b;
}

Bytes idx_bytes(const std::vector<std::uint32_t>& dims, const Bytes& values) {
  Bytes b = idx_header(0x08, dims);
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

Bytes iota_bytes(std::size_t n, std::uint8_t start = 0) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(start + i * 7);
  return v;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb9");
  REQUIRE(gz != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(gz) == Z_OK);
}

Bytes gzip_bytes(const TempDir& dir, const Bytes& bytes) {
  std::string tmp = dir.file("scratch.gz");
  write_gzip(tmp, bytes);
  Bytes out = read_file(tmp);
  fs::remove(tmp);
  return out;
}

}  // namespace

TEST_CASE("read_idx round-trips uncompressed files", "[idx]") {
  TempDir dir;
  SECTION("three dimensions") {
    Bytes values = iota_bytes(3 * 2 * 2);
    values.back() = 255;
    std::string path = dir.file("a-idx3-ubyte");
    write_file(path, idx_bytes({3, 2, 2}, values));
    hpcps::data::IdxArray a = hpcps::data::read_idx(path);
    CHECK(a.dims == std::vector<std::uint32_t>{3, 2, 2});
    CHECK(a.values == values);
  }
  SECTION("one and four dimensions, multi-byte dimension sizes") {
    Bytes one = iota_bytes(300);
    write_file(dir.file("one"), idx_bytes({300}, one));
    hpcps::data::IdxArray a = hpcps::data::read_idx(dir.file("one"));
    CHECK(a.dims == std::vector<std::uint32_t>{300});
    CHECK(a.values == one);

    Bytes four = iota_bytes(2 * 3 * 1 * 257);
    write_file(dir.file("four"), idx_bytes({2, 3, 1, 257}, four));
    hpcps::data::IdxArray b = hpcps::data::read_idx(dir.file("four"));
    CHECK(b.dims == std::vector<std::uint32_t>{2, 3, 1, 257});
    CHECK(b.values == four);
  }
}

TEST_CASE("read_idx detects gzip by content, not by name", "[idx][gzip]") {
  TempDir dir;
  Bytes values = iota_bytes(5 * 28 * 28);
  Bytes file = idx_bytes({5, 28, 28}, values);

  SECTION("gzip with a .gz name") {
    write_gzip(dir.file("x.gz"), file);
    REQUIRE(read_file(dir.file("x.gz"))[0] == 0x1f);
    hpcps::data::IdxArray a = hpcps::data::read_idx(dir.file("x.gz"));
    CHECK(a.dims == std::vector<std::uint32_t>{5, 28, 28});
    CHECK(a.values == values);
  }
  SECTION("gzip without a .gz name") {
    write_gzip(dir.file("x-idx3-ubyte"), file);
    CHECK(hpcps::data::read_idx(dir.file("x-idx3-ubyte")).values == values);
  }
  SECTION("uncompressed with a .gz name") {
    write_file(dir.file("y.gz"), file);
    CHECK(hpcps::data::read_idx(dir.file("y.gz")).values == values);
  }
  SECTION("concatenated gzip members, as `cat a.gz b.gz` makes") {
    Bytes head(file.begin(), file.begin() + 100);
    Bytes tail(file.begin() + 100, file.end());
    Bytes gz = gzip_bytes(dir, head);
    Bytes gz2 = gzip_bytes(dir, tail);
    gz.insert(gz.end(), gz2.begin(), gz2.end());
    write_file(dir.file("multi.gz"), gz);
    hpcps::data::IdxArray a = hpcps::data::read_idx(dir.file("multi.gz"));
    CHECK(a.dims == std::vector<std::uint32_t>{5, 28, 28});
    CHECK(a.values == values);
  }
}

TEST_CASE("read_idx rejects malformed files with the path and the problem", "[idx][errors]") {
  TempDir dir;
  Bytes values = iota_bytes(12);

  SECTION("missing file") {
    std::string path = dir.file("does-not-exist");
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "cannot open: No such file or directory");
  }
  SECTION("a directory") {
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(dir.path()), dir.path(), "Is a directory");
  }
  SECTION("bad magic") {
    Bytes b = idx_bytes({3, 4}, values);
    b[0] = 0x12;
    b[1] = 0xab;
    std::string path = dir.file("magic");
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "bad magic: expected first two bytes 00 00, found 12 ab");
  }
  SECTION("unsupported type byte") {
    Bytes b = idx_bytes({3, 4}, values);
    b[2] = 0x0D;
    std::string path = dir.file("float");
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "unsupported IDX type byte 0x0d (float32)");
    b[2] = 0x42;
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "type byte 0x42 (not an IDX type)");
  }
  SECTION("zero dimensions") {
    std::string path = dir.file("ndims0");
    write_file(path, Bytes{0, 0, 8, 0, 1, 2, 3});
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "number of dimensions: expected 1..4, found 0");
  }
  SECTION("five dimensions") {
    std::string path = dir.file("ndims5");
    write_file(path, idx_bytes({1, 1, 1, 1, 1}, Bytes{7}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "number of dimensions: expected 1..4, found 5");
  }
  SECTION("a zero dimension") {
    std::string path = dir.file("zero-dim");
    write_file(path, idx_bytes({3, 0, 4}, Bytes{}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "dimension 1 of 3 is 0");
  }
  SECTION("product of dimensions overflows") {
    std::string path = dir.file("huge");
    write_file(path, idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, Bytes{1, 2, 3}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "product of dimensions overflows");
  }
  SECTION("truncated data") {
    Bytes b = idx_bytes({3, 4}, values);
    b.pop_back();
    std::string path = dir.file("short");
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated: expected 12 data bytes, found 11");
  }
  SECTION("trailing bytes") {
    Bytes b = idx_bytes({3, 4}, values);
    b.insert(b.end(), {9, 9, 9});
    std::string path = dir.file("long");
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "3 trailing bytes after the expected 12 data bytes");
  }
  SECTION("truncated header") {
    std::string path = dir.file("header");
    write_file(path, Bytes{0, 0, 8});
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated header: expected at least 4 bytes, found 3");
    write_file(path, Bytes{});
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated header: expected at least 4 bytes, found 0");
    Bytes b = idx_header(0x08, {3, 4, 5});
    b.resize(13);
    write_file(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path,
                           "truncated header: expected 16 bytes for 3 dimensions, found 13");
  }
  SECTION("problems inside a gzip file are reported the same way") {
    Bytes b = idx_bytes({3, 4}, values);
    b.pop_back();
    std::string path = dir.file("short.gz");
    write_gzip(path, b);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated: expected 12 data bytes, found 11");
  }
}

TEST_CASE("read_idx reports corrupt and truncated gzip streams", "[idx][gzip][errors]") {
  TempDir dir;
  Bytes file = idx_bytes({10, 28, 28}, iota_bytes(10 * 28 * 28));
  Bytes gz = gzip_bytes(dir, file);
  REQUIRE(gz.size() > 40);
  std::string path = dir.file("bad.gz");

  SECTION("invalid deflate block type") {
    // Byte 10 starts the deflate data after gzip's 10-byte header; bits 1-2 = 11 is a reserved
    // block type.
    gz[10] = static_cast<std::uint8_t>(gz[10] | 0x06);
    write_file(path, gz);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "gzip: corrupt stream: invalid block type");
  }
  SECTION("CRC mismatch") {
    gz[gz.size() - 8] ^= 0xFF;  // first byte of the CRC-32 trailer
    write_file(path, gz);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "gzip: corrupt stream: incorrect data check");
  }
  SECTION("truncated stream") {
    gz.resize(gz.size() / 2);
    write_file(path, gz);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated stream: unexpected end of file");
  }
  SECTION("truncated just before the trailer") {
    gz.resize(gz.size() - 8);
    write_file(path, gz);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "truncated stream: unexpected end of file");
  }
  SECTION("only the gzip magic") {
    write_file(path, Bytes{0x1f, 0x8b});
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "gzip");
  }
  SECTION("garbage after the stream") {
    gz.insert(gz.end(), {1, 2, 3, 4, 5});
    write_file(path, gz);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx(path), path, "5 bytes of garbage after the end");
  }
}

TEST_CASE("load_idx_pair builds a scaled Dataset and validates the pair", "[dataset]") {
  TempDir dir;
  std::string images = dir.file("images");
  std::string labels = dir.file("labels");
  // 4 images of 2x3 pixels.
  Bytes pixels = {0, 255, 51, 102, 1, 254, 10, 20, 30, 40, 50, 60,
                  255, 255, 255, 0, 0, 0, 5, 6, 7, 8, 9, 100};
  write_file(images, idx_bytes({4, 2, 3}, pixels));

  SECTION("good pair") {
    write_gzip(labels, idx_bytes({4}, Bytes{3, 0, 9, 1}));
    hpcps::data::Dataset d = hpcps::data::load_idx_pair(images, labels);
    CHECK(d.count == 4);
    CHECK(d.features == 6);
    CHECK(d.classes == 10);
    // [count, H, W]: one channel of H x W, the layout a convolutional network checks.
    CHECK(d.channels == 1);
    CHECK(d.height == 2);
    CHECK(d.width == 3);
    CHECK(d.has_layout());
    REQUIRE(d.images.size() == 24);
    CHECK(d.labels == std::vector<std::int32_t>{3, 0, 9, 1});
    CHECK(d.images[0] == 0.0f);
    CHECK(d.images[1] == 1.0f);
    CHECK(d.images[2] == Approx(0.2f));
    CHECK(d.images[3] == Approx(0.4f));
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      CHECK(d.images[i] == Approx(pixels[i] / 255.0));
    }
    CHECK(*std::min_element(d.images.begin(), d.images.end()) >= 0.0f);
    CHECK(*std::max_element(d.images.begin(), d.images.end()) <= 1.0f);
  }
  SECTION("the layout follows the IDX dimensions") {
    write_file(labels, idx_bytes({4}, Bytes{3, 0, 9, 1}));
    write_file(images, idx_bytes({4, 3, 1, 2}, pixels));  // [count, C, H, W]
    hpcps::data::Dataset d = hpcps::data::load_idx_pair(images, labels);
    CHECK((d.channels == 3 && d.height == 1 && d.width == 2));
    write_file(images, idx_bytes({4, 6}, pixels));  // [count, F]: a flat sample
    d = hpcps::data::load_idx_pair(images, labels);
    CHECK((d.channels == 6 && d.height == 1 && d.width == 1));
    CHECK(d.has_layout());
    CHECK_FALSE(hpcps::data::Dataset{}.has_layout());
  }
  SECTION("classes bound is the caller's") {
    write_file(labels, idx_bytes({4}, Bytes{3, 0, 9, 1}));
    CHECK(hpcps::data::load_idx_pair(images, labels, 12).classes == 12);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, labels, 0), labels, "classes must be in 1..");
  }
  SECTION("count mismatch names both files and both counts") {
    write_file(labels, idx_bytes({5}, Bytes{1, 2, 3, 4, 5}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, labels), labels, "label count 5");
    CHECK_THROWS_WITH(hpcps::data::load_idx_pair(images, labels),
                      Catch::Contains("image count 4") && Catch::Contains(images));
  }
  SECTION("label out of range names file, index and value") {
    write_file(labels, idx_bytes({4}, Bytes{3, 0, 10, 1}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, labels), labels,
                           "label at index 2 is 10; expected a value below 10 classes");
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, labels, 3), labels, "label at index 0 is 3");
  }
  SECTION("images need rank >= 2, labels rank 1") {
    write_file(labels, idx_bytes({4}, Bytes{3, 0, 9, 1}));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(labels, labels), labels,
                           "images need at least 2 dimensions (count, features...), found 1");
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, images), images,
                           "labels need exactly 1 dimension, found 3");
  }
  SECTION("errors from read_idx pass through") {
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_idx_pair(images, dir.file("nope")), dir.file("nope"), "cannot open");
  }
}

TEST_CASE("load_fashion_mnist finds plain and .gz files and explains a missing one", "[fashion]") {
  TempDir dir;
  write_file(dir.file("train-images-idx3-ubyte"), idx_bytes({3, 2, 2}, iota_bytes(12)));
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes({3}, Bytes{0, 5, 9}));
  write_gzip(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes({2, 2, 2}, iota_bytes(8)));

  SECTION("missing file") {
    const std::string d = dir.path();
    HPCPS_CHECK_DATA_ERROR(hpcps::data::load_fashion_mnist(d), d, "t10k-labels-idx1-ubyte");
    CHECK_THROWS_WITH(hpcps::data::load_fashion_mnist(d),
                      Catch::Contains("apt-get install dataset-fashion-mnist") && Catch::Contains("--data DIR"));
  }
  SECTION("all present, mixed compression") {
    write_file(dir.file("t10k-labels-idx1-ubyte"), idx_bytes({2}, Bytes{7, 1}));
    hpcps::data::TrainTest s = hpcps::data::load_fashion_mnist(dir.path());
    CHECK(s.train.count == 3);
    CHECK(s.train.features == 4);
    CHECK(s.train.labels == std::vector<std::int32_t>{0, 5, 9});
    CHECK(s.test.count == 2);
    CHECK(s.test.labels == std::vector<std::int32_t>{7, 1});
  }
  SECTION("train and test must agree on features") {
    write_file(dir.file("t10k-images-idx3-ubyte"), idx_bytes({2, 3, 1}, iota_bytes(6)));  // preferred over .gz
    write_file(dir.file("t10k-labels-idx1-ubyte"), idx_bytes({2}, Bytes{7, 1}));
    CHECK_THROWS_WITH(hpcps::data::load_fashion_mnist(dir.path()),
                      Catch::Contains("3 features per sample") && Catch::Contains("have 4"));
  }
  CHECK(hpcps::data::default_fashion_mnist_dir() == "/usr/share/datasets/fashion-mnist");
}

TEST_CASE("the installed Fashion-MNIST loads with the expected shape", "[fashion][installed]") {
  const std::string d = hpcps::data::default_fashion_mnist_dir();
  if (!fs::is_directory(d)) {
    WARN(d << " is absent (apt-get install dataset-fashion-mnist); skipping the real-data check");
    return;
  }
  hpcps::data::TrainTest s = hpcps::data::load_fashion_mnist(d);
  CHECK(s.train.count == 60000);
  CHECK(s.test.count == 10000);
  CHECK(s.train.features == 784);
  CHECK(s.test.features == 784);
  CHECK(s.train.images.size() == 60000u * 784u);
  CHECK(s.test.labels.size() == 10000u);
  for (const hpcps::data::Dataset* set : {&s.train, &s.test}) {
    std::set<std::int32_t> seen(set->labels.begin(), set->labels.end());
    CHECK(seen == std::set<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    auto first = set->images.begin();
    auto [lo, hi] = std::minmax_element(first, first + 784);
    CHECK(*lo >= 0.0f);
    CHECK(*hi <= 1.0f);
    CHECK(*hi > *lo);  // a real image, not a blank row
  }
}

namespace {

// Bytes this process has read through read(2) and friends so far (Linux: /proc/self/io).
std::size_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  std::size_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

}  // namespace

TEST_CASE("read_idx_records reads a range of records, plain or gzip, into the memory given", "[idx][records]") {
  TempDir dir;
  const std::uint32_t records = 40, rows = 3, cols = 5;
  Bytes values = iota_bytes(records * rows * cols);
  Bytes file = idx_bytes({records, rows, cols}, values);
  write_file(dir.file("plain"), file);
  write_gzip(dir.file("packed"), file);
  for (const std::string name : {"plain", "packed"}) {
    INFO(name);
    const std::string path = dir.file(name);
    const hpcps::data::IdxShape shape = hpcps::data::read_idx_shape(path);
    CHECK(shape.dims == std::vector<std::uint32_t>{records, rows, cols});
    CHECK(shape.records() == records);
    CHECK(shape.record_bytes() == rows * cols);
    CHECK(shape.header_bytes == 16);
    CHECK(shape.gzip == (name == std::string("packed")));
    for (const auto& [begin, end] : std::vector<std::pair<std::size_t, std::size_t>>{{0, 40}, {0, 1}, {7, 23}, {39, 40}, {12, 12}}) {
      INFO("records [" << begin << ", " << end << ")");
      Bytes got((end - begin) * rows * cols + 1, 0xEE);
      hpcps::data::read_idx_records(path, shape, begin, end, got.data());
      CHECK(std::equal(got.begin(), got.end() - 1, values.begin() + static_cast<std::ptrdiff_t>(begin * rows * cols)));
      CHECK(got.back() == 0xEE);  // nothing written past the range
    }
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_records(path, shape, 30, 41, nullptr), path,
                           "records [30, 41) are not inside the file's 40 records");
  }
}

TEST_CASE("read_idx_records of a plain file reads the range, not the rest of the file", "[idx][records]") {
  TempDir dir;
  const std::uint32_t records = 4096, width = 1024;  // 4 MiB of records
  const std::string path = dir.file("big");
  write_file(path, idx_bytes({records, width}, Bytes(std::size_t{records} * width, 7)));
  const hpcps::data::IdxShape shape = hpcps::data::read_idx_shape(path);
  Bytes got(2 * width);
  const std::size_t before = bytes_read_so_far();
  hpcps::data::read_idx_records(path, shape, 3000, 3002, got.data());
  const std::size_t read = bytes_read_so_far() - before;
  CHECK(read >= 2 * width);
  CHECK(read < 256 * 1024);  // the two records, the header and stdio's buffer; not 4 MiB
  CHECK(std::all_of(got.begin(), got.end(), [](std::uint8_t v) { return v == 7; }));
}

TEST_CASE("read_idx_shape and read_idx_records reject what read_idx rejects", "[idx][records][errors]") {
  TempDir dir;
  const std::string path = dir.file("bad");
  SECTION("plain, truncated: found from the size alone") {
    Bytes file = idx_bytes({10, 4}, iota_bytes(40));
    file.resize(file.size() - 3);
    write_file(path, file);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_shape(path), path, "truncated: expected 40 data bytes, found 37");
  }
  SECTION("plain, trailing bytes") {
    Bytes file = idx_bytes({10, 4}, iota_bytes(41));
    write_file(path, file);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_shape(path), path, "1 trailing bytes after the expected 40");
  }
  SECTION("gzip, truncated: found when the missing records are read") {
    Bytes file = idx_bytes({10, 4}, iota_bytes(36));  // 4 bytes short
    write_gzip(path, file);
    const auto shape = hpcps::data::read_idx_shape(path);
    Bytes got(40);
    CHECK_NOTHROW(hpcps::data::read_idx_records(path, shape, 0, 5, got.data()));
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_records(path, shape, 5, 10, got.data()), path,
                           "truncated: expected 40 data bytes, found 36");
  }
  SECTION("gzip, trailing bytes: found when the last record is read") {
    write_gzip(path, idx_bytes({10, 4}, iota_bytes(43)));
    const auto shape = hpcps::data::read_idx_shape(path);
    Bytes got(40);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_records(path, shape, 0, 10, got.data()), path,
                           "3 trailing bytes after the expected 40");
  }
  SECTION("gzip, corrupt stream") {
    Bytes gz = gzip_bytes(dir, idx_bytes({10, 28, 28}, iota_bytes(10 * 28 * 28)));
    gz[gz.size() - 8] ^= 0xFF;  // CRC
    write_file(path, gz);
    const auto shape = hpcps::data::read_idx_shape(path);
    Bytes got(10 * 28 * 28);
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_records(path, shape, 0, 10, got.data()), path,
                           "gzip: corrupt stream: incorrect data check");
  }
  SECTION("bad header, as read_idx says it") {
    write_file(path, Bytes{0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0});
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_shape(path), path, "unsupported IDX type byte 0x0d (float32)");
  }
  SECTION("missing file") {
    HPCPS_CHECK_DATA_ERROR(hpcps::data::read_idx_shape(dir.file("none")), dir.file("none"), "cannot open");
  }
}

TEST_CASE("a stored-bytes Dataset describes, views and converts to load_idx_pair's floats", "[dataset][stored]") {
  TempDir dir;
  const std::uint32_t count = 30;
  Bytes pixels(count * 4 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 37 + 5);
  Bytes labels(count);
  for (std::size_t i = 0; i < count; ++i) labels[i] = static_cast<std::uint8_t>(i % 3);
  const std::string images_path = dir.file("images.gz"), labels_path = dir.file("labels");
  write_gzip(images_path, idx_bytes({count, 4, 4}, pixels));
  write_file(labels_path, idx_bytes({count}, labels));
  const hpcps::data::IdxPairFiles files{images_path, labels_path, 3};

  const hpcps::data::Dataset d = hpcps::data::describe_idx_pair(files);
  CHECK(d.count == count);
  CHECK(d.features == 16);
  CHECK(d.classes == 3);
  CHECK((d.channels == 1 && d.height == 4 && d.width == 4));
  CHECK_FALSE(d.holds_samples());

  const hpcps::data::Dataset floats = hpcps::data::load_idx_pair(images_path, labels_path, 3);
  const hpcps::data::Dataset stored = hpcps::data::load_stored(files);
  CHECK(stored.holds_bytes());
  CHECK(stored.images.empty());
  std::vector<float> out(count * 16);
  std::vector<std::int32_t> out_labels(count);
  hpcps::data::stage_range(stored, 0, count, out.data(), out_labels.data());
  CHECK(std::memcmp(out.data(), floats.images.data(), out.size() * sizeof(float)) == 0);
  CHECK(out_labels == floats.labels);

  const hpcps::data::Dataset part = hpcps::data::load_stored(files, hpcps::data::Range{10, 20});
  CHECK(part.held() == hpcps::data::Range{10, 20});
  CHECK(part.count == count);
  const std::size_t rows[2] = {19, 10};
  hpcps::data::stage_rows(part, rows, 2, out.data(), out_labels.data());
  CHECK(std::memcmp(out.data(), floats.images.data() + 19 * 16, 16 * sizeof(float)) == 0);
  CHECK(std::memcmp(out.data() + 16, floats.images.data() + 10 * 16, 16 * sizeof(float)) == 0);
  CHECK(out_labels[0] == floats.labels[19]);

  labels[7] = 3;  // beyond 3 classes
  write_file(labels_path, idx_bytes({count}, labels));
  HPCPS_CHECK_DATA_ERROR(hpcps::data::load_stored(files), labels_path,
                         "label at index 7 is 3; expected a value below 3 classes");
  write_file(labels_path, idx_bytes({count - 1}, Bytes(count - 1, 0)));
  HPCPS_CHECK_DATA_ERROR(hpcps::data::describe_idx_pair(files), labels_path,
                         "label count 29 does not match image count 30");
}
