#pragma once
// Locates and loads the Fashion-MNIST train and test sets. The files are not downloaded here:
// compute nodes usually have no network, so the error says how to install them instead.
#include <hpcps/data/dataset.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <string>

namespace hpcps::data {

// Where the Debian package dataset-fashion-mnist installs the files.
inline std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

struct TrainTest {
  Dataset train;
  Dataset test;
};

namespace detail {

// Prefers the uncompressed file so a user who gunzipped the data is not slowed down by inflate.
inline std::string find_fashion_mnist_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path plain = fs::path(dir) / name;
  if (fs::is_regular_file(plain, ec)) return plain.string();
  fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::is_regular_file(gz, ec)) return gz.string();
  throw DataError(fmt::format("{}: Fashion-MNIST file {} (or {}.gz) not found; install it with "
                              "`apt-get install dataset-fashion-mnist` (into {}) or pass --data DIR naming "
                              "a directory that holds the four Fashion-MNIST IDX files",
                              dir, name, name, default_fashion_mnist_dir()));
}

}  // namespace detail

inline TrainTest load_fashion_mnist(const std::string& dir = default_fashion_mnist_dir()) {
  // Resolve all four names first so a missing file is reported before any file is read.
  std::string train_images = detail::find_fashion_mnist_file(dir, "train-images-idx3-ubyte");
  std::string train_labels = detail::find_fashion_mnist_file(dir, "train-labels-idx1-ubyte");
  std::string test_images = detail::find_fashion_mnist_file(dir, "t10k-images-idx3-ubyte");
  std::string test_labels = detail::find_fashion_mnist_file(dir, "t10k-labels-idx1-ubyte");
  TrainTest sets{load_idx_pair(train_images, train_labels, 10), load_idx_pair(test_images, test_labels, 10)};
  if (sets.train.features != sets.test.features) {
    throw DataError(fmt::format("{}: test images have {} features per sample but train images ({}) have {}",
                                test_images, sets.test.features, train_images, sets.train.features));
  }
  return sets;
}

}  // namespace hpcps::data
