#pragma once
// The usual request of a training run's ranks for its training and test sets, once their roles
// are known: every worker the whole training set, worker 0 (the rank that evaluates) the test set,
// a server nothing, each set held once per node (ps::NodeDataset).
#include <optional>

#include "hpcps/comm/communicator.hpp"
#include "hpcps/data/dataset.hpp"
#include "hpcps/data/fashion_mnist.hpp"
#include "hpcps/data/shard.hpp"
#include "hpcps/ps/node_dataset.hpp"

namespace hpcps::ps {

struct NodeTrainTest {
  NodeDataset train;
  NodeDataset test;
};

// Collective over the ParameterServer's world. `described`: the sets' descriptions
// (data::describe_fashion_mnist), the same on every rank; `evaluate`: whether worker 0 reads the
// test set (ps::train evaluates only where it is given one).
template <class Server>
NodeTrainTest load_node_data(const Server& ps, const data::TrainTestFiles& files, const data::TrainTest& described,
                             bool evaluate = true, NodeDatasetOptions options = {}) {
  using Rows = std::optional<data::Range>;
  const bool evaluates = evaluate && ps.is_worker() && ps.worker_index() == 0;
  return NodeTrainTest{
      NodeDataset(ps.world(), files.train, described.train,
                  ps.is_worker() ? Rows(data::Range{0, described.train.count}) : Rows(), options),
      NodeDataset(ps.world(), files.test, described.test,
                  evaluates ? Rows(data::Range{0, described.test.count}) : Rows(), options)};
}

}  // namespace hpcps::ps
