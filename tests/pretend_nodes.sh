#!/bin/sh
# A job across two pretend nodes (scripts/pretend_nodes: network namespaces joined by a link
# throttled to 1 Gbit/s) must use shared memory only inside each node, train, and end with the
# parameters, bit for bit, of the same job with every rank on one node: the synchronous result
# depends on the rank layout, never on the transport. Where the machine cannot make network
# namespaces (not root, no veth or tbf) the script says why in one line and the test is skipped
# (exit 77).
#   pretend_nodes.sh MPIEXEC PROGRAM WORKDIR
set -u
mpiexec=$1
program=$2
work=$3
here=$(dirname "$0")
nodes="$here/../scripts/pretend_nodes"
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAILED: $*"; exit 1; }
"$nodes" check || exit $?
args="--train-samples 2048 --epochs 1 --batch 64"
"$mpiexec" -iface lo -n 4 "$program" $args --save-model "$work/one_node.npz" > "$work/one_node.out" 2>&1 ||
  fail "the one-node run failed: $(cat "$work/one_node.out")"
# --share-ipc: the bits do not depend on whether UCX takes the link or shared memory between
# the nodes, and with TCP a job of 2 ranks per node can hang in MPI_Finalize (openucx/ucx#8738).
"$nodes" run --share-ipc --nodes 2 --ranks-per-node 2 --rate 1gbit -- "$program" $args --save-model "$work/two_nodes.npz" \
  > "$work/two_nodes.out" 2>&1 || fail "the run across two pretend nodes failed: $(cat "$work/two_nodes.out")"
cat "$work/two_nodes.out"
grep -q "shared memory among ranks {0,1} and {2,3}, messages between the others" "$work/two_nodes.out" ||
  fail "the two pretend nodes did not share memory exactly within each node"
grep -q "shared memory among ranks {0,1,2,3}" "$work/one_node.out" ||
  fail "the one-node run did not share memory among all four ranks: $(cat "$work/one_node.out")"
cmp -s "$work/one_node.npz" "$work/two_nodes.npz" ||
  fail "the parameters after training differ between one node and two pretend nodes"
echo "passed: two pretend nodes trained to the one-node run's parameters, bit for bit"
