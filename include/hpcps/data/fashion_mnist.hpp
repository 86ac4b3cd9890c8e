#pragma once
// Locates and loads the Fashion-MNIST train and test sets. The files are not downloaded here:
// compute nodes usually have no network, so the error says how to install them instead.
#include <hpcps/data/dataset.hpp>
#include <hpcps/data/stored_dataset.hpp>

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

// The four files of the set in `dir`, resolved before any is read, so a missing one is reported
// first.
struct TrainTestFiles {
  IdxPairFiles train;
  IdxPairFiles test;
};

inline TrainTestFiles fashion_mnist_files(const std::string& dir = default_fashion_mnist_dir()) {
  return TrainTestFiles{{detail::find_fashion_mnist_file(dir, "train-images-idx3-ubyte"),
                         detail::find_fashion_mnist_file(dir, "train-labels-idx1-ubyte"), 10},
                        {detail::find_fashion_mnist_file(dir, "t10k-images-idx3-ubyte"),
                         detail::find_fashion_mnist_file(dir, "t10k-labels-idx1-ubyte"), 10}};
}

namespace detail {

inline void check_same_features(const TrainTestFiles& files, const Dataset& train, const Dataset& test) {
  if (train.features != test.features) {
    throw DataError(fmt::format("{}: test images have {} features per sample but train images ({}) have {}",
                                files.test.images, test.features, files.train.images, train.features));
  }
}

}  // namespace detail

// Both sets as floats, read whole (the simple form; ps/node_dataset.hpp keeps one copy of the
// stored bytes per node instead).
inline TrainTest load_fashion_mnist(const std::string& dir = default_fashion_mnist_dir()) {
  const TrainTestFiles files = fashion_mnist_files(dir);
  TrainTest sets{load_idx_pair(files.train.images, files.train.labels, 10),
                 load_idx_pair(files.test.images, files.test.labels, 10)};
  detail::check_same_features(files, sets.train, sets.test);
  return sets;
}

// Both sets described from their headers: counts, features, layout; no samples.
inline TrainTest describe_fashion_mnist(const TrainTestFiles& files) {
  TrainTest sets{describe_idx_pair(files.train), describe_idx_pair(files.test)};
  detail::check_same_features(files, sets.train, sets.test);
  return sets;
}

}  // namespace hpcps::data
