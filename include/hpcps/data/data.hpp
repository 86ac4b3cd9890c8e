#pragma once
// Everything in hpcps::data: IDX reading, datasets, Fashion-MNIST, sharding, RNG and batching.
#include <hpcps/data/augment.hpp>
#include <hpcps/data/batcher.hpp>
#include <hpcps/data/dataset.hpp>
#include <hpcps/data/fashion_mnist.hpp>
#include <hpcps/data/idx.hpp>
#include <hpcps/data/idx_records.hpp>
#include <hpcps/data/random.hpp>
#include <hpcps/data/rows.hpp>
#include <hpcps/data/shard.hpp>
#include <hpcps/data/stored_dataset.hpp>
