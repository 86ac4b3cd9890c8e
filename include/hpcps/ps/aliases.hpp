#pragma once
// Named compositions for the common cases (ensmallen's StandardSGD idea): the network and backend
// stay open, the synchronization strategy and update rule are fixed by the name.
#include "hpcps/backend/cpu.hpp"
#include "hpcps/optim/adam.hpp"
#include "hpcps/optim/sgd.hpp"
#include "hpcps/ps/parameter_server.hpp"
#include "hpcps/sync/asynchronous.hpp"
#include "hpcps/sync/stale_synchronous.hpp"
#include "hpcps/sync/synchronous.hpp"

namespace hpcps {

// Bulk-synchronous SGD with momentum: the reproducible baseline.
template <class Network, class Backend = backend::Cpu>
using SyncServer = ParameterServer<Network, Backend, sync::Synchronous, optim::MomentumSgd>;

// Stale synchronous parallel with SGD with momentum; the bound is given at run time.
template <class Network, class Backend = backend::Cpu>
using SspServer = ParameterServer<Network, Backend, sync::StaleSynchronous, optim::MomentumSgd>;

// Downpour-style asynchronous SGD (plain SGD: momentum and asynchrony compound).
template <class Network, class Backend = backend::Cpu>
using AsyncServer = ParameterServer<Network, Backend, sync::Asynchronous, optim::StandardSgd>;

// Asynchronous Adam, which tolerates stale gradients well in practice.
template <class Network, class Backend = backend::Cpu>
using AsyncAdamServer = ParameterServer<Network, Backend, sync::Asynchronous, optim::Adam>;

}  // namespace hpcps
