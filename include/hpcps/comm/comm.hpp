#pragma once
// The whole comm layer: the only part of hpcps that calls MPI.
#include <hpcps/comm/communicator.hpp>
#include <hpcps/comm/datatype.hpp>
#include <hpcps/comm/environment.hpp>
#include <hpcps/comm/error.hpp>
#include <hpcps/comm/request.hpp>
#include <hpcps/comm/run.hpp>
#include <hpcps/comm/shared_window.hpp>
