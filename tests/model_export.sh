#!/bin/sh
# --save-model writes the trained parameters as .npz; --evaluate-only --load-model must give the
# accuracy the training run ended with, and numpy.load (where Debian's python3-numpy is installed)
# must read one named array per layer with the layer's shape.
#   model_export.sh MPIEXEC PROGRAM WORKDIR
set -u
mpiexec=$1
program=$2
work=$3
rm -rf "$work" && mkdir -p "$work" || exit 1
fail() { echo "FAILED: $*"; exit 1; }
"$mpiexec" -iface lo -n 2 "$program" --servers 1 --epochs 1 --train-samples 6000 --save-model "$work/model.npz" \
  > "$work/train.out" 2>&1 || fail "training failed: $(cat "$work/train.out")"
cat "$work/train.out"
trained=$(sed -n 's/^final test accuracy \([0-9.]*\),.*/\1/p' "$work/train.out")
"$mpiexec" -iface lo -n 1 "$program" --evaluate-only --load-model "$work/model.npz" > "$work/eval.out" 2>&1 ||
  fail "evaluation failed: $(cat "$work/eval.out")"
cat "$work/eval.out"
evaluated=$(sed -n 's/.*: test accuracy \([0-9.]*\),.*/\1/p' "$work/eval.out")
[ -n "$trained" ] && [ "$trained" = "$evaluated" ] || fail "evaluated $evaluated, training ended with $trained"
if /usr/bin/python3 -c 'import numpy' 2> /dev/null; then
  /usr/bin/python3 - "$work/model.npz" << 'PY' || fail "numpy.load did not read the model as expected"
import sys
import numpy as np
m = np.load(sys.argv[1])
assert str(m["description"]) == "mlp[784-256-128-10]-relu", m["description"]
shapes = {k: m[k].shape for k in m.keys() if k != "description"}
assert shapes == {"dense0.weight": (256, 784), "dense0.bias": (256,), "dense1.weight": (128, 256),
                  "dense1.bias": (128,), "dense2.weight": (10, 128), "dense2.bias": (10,)}, shapes
assert m["dense0.weight"].dtype == np.float32
print("numpy.load:", shapes)
PY
else
  echo "numpy not installed: the numpy.load check is left out"
fi
echo "passed: the saved model evaluates to the trained accuracy $trained"
