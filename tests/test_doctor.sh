#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# `remora doctor` and `remora info` run on any machine (GPU or not) and exit 0
# unless a check FAILs; `doctor --json` prints one parseable JSON object.
# usage: test_doctor.sh PATH/TO/remora
set -u
remora=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$remora" doctor) || fail "remora doctor exited $? (a FAIL check?):
$out"
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -Eq '^(OK|WARN|SKIP) +cuda_driver ' || fail "no cuda_driver line"
json=$("$remora" doctor --json) || fail "remora doctor --json exited $?"
if command -v python3 >/dev/null 2>&1; then
    printf '%s' "$json" | python3 -c '
import json, sys
d = json.load(sys.stdin)
names = [c["name"] for c in d["checks"]]
assert all(c["status"] in ("OK", "WARN", "FAIL", "SKIP") for c in d["checks"]), d
for want in ("cuda_driver", "ucx_cuda", "rdma_nics", "peermem", "memlock", "gpu_nic_distance"):
    assert want in names, want
' || fail "doctor --json is not the expected JSON: $json"
else
    case $json in *'"checks": ['*) ;; *) fail "no checks array: $json" ;; esac
fi
info=$("$remora" info) || fail "remora info exited $?"
printf '%s\n' "$info" | grep -Eq '^gpu paths: ' || fail "remora info lists no GPU paths: $info"
printf '%s\n' "$info" | grep -Eq '^cuda: ' || fail "remora info says nothing about CUDA: $info"
echo PASS
