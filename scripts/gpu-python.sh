#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# On the GPU machine: build the Python binding and run its GPU tests (CuPy /
# torch), then the rest of the Python suite and the benchmark, logging into OUTDIR.
#   scripts/gpu-python.sh OUTDIR [BUILD_DIR]     (default build-gpu; built if missing)
# Uses the machine's python3 (3.12 with CuPy and torch). The extension is built
# in place (pip install --no-build-isolation into a venv when pip and setuptools
# are there, else `python3 setup.py build_ext --inplace`). Bounded: < 6 minutes.
# Exit status: that of the GPU tests.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/gpu-python.sh OUTDIR [BUILD_DIR]}
build=${2:-$root/build-gpu}
build=$(cd "$build" 2>/dev/null && pwd || echo "$build") # absolute: the build happens in python/
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
log=$out/gpu-python.log
exec > >(tee "$log") 2>&1

echo "== machine"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>&1
"$py" -c 'import sys; print(sys.version)'
"$py" -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1
"$py" -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
"$py" -c 'import numpy, pytest; print("numpy", numpy.__version__, "pytest", pytest.__version__)' 2>&1 | tail -1

if [ ! -e "$build/src/libremora.so" ]; then
  echo "== building libremora ($build)"
  timeout 120 "$root/scripts/gpu-test.sh" "$build" > "$out/gpu-test-build.log" 2>&1 || true
  [ -e "$build/src/libremora.so" ] || { echo "libremora did not build: see $out/gpu-test-build.log"; exit 1; }
  build=$(cd "$build" && pwd) # absolute now that it exists
fi
if [ -d "$root/.gpu-deps" ]; then # headers the machine lacks (scripts/gpu-deps.sh)
  export LD_LIBRARY_PATH=$root/.gpu-deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

echo "== python binding: build ($build, -Werror)"
export REMORA_BUILD_DIR=$build CFLAGS="-Werror"
cd "$root/python"
rm -rf build remora/_remora*.so
pyrun=$py
# In place, with the machine's own python3: there it is itself a virtual
# environment (torch, CuPy, numpy, pytest), which a venv made from it would
# not see.
if "$py" -c 'import setuptools' 2>/dev/null; then
  "$py" setup.py -q build_ext --inplace || exit 1
  export PYTHONPATH=$root/python
else
  echo "no setuptools for $py: cannot build the extension"; exit 1
fi
"$pyrun" -c 'import remora; print("remora", remora.__version__, remora.library_version(), remora.cuda_info())'

cd "$build"
export REMORA_BIN=$build/tools/remora
echo "== GPU tests"
timeout 90 "$pyrun" -m pytest -v -rs -p no:cacheprovider "$root/python/tests/test_gpu.py" \
  --junitxml="$out/gpu-tests.xml"
rc=$?
echo "gpu tests exit: $rc"
echo "== the rest of the Python suite"
timeout 60 "$pyrun" -m pytest -q -rs -p no:cacheprovider "$root/python/tests" \
  --ignore="$root/python/tests/test_gpu.py" --junitxml="$out/python-tests.xml"
echo "python suite exit: $?"
echo "== benchmark (map path, then am)"
timeout 120 "$pyrun" "$root/python/bench.py" --remora "$build/tools/remora" --seconds 3
timeout 120 "$pyrun" "$root/python/bench.py" --remora "$build/tools/remora" --seconds 3 --path am
exit $rc
