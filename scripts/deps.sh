#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Install what remora needs to build, test and benchmark on Debian 12.
# Idempotent: skips apt when every package is already installed.
set -euo pipefail

pkgs=(build-essential cmake ninja-build pkg-config git
      libucx-dev ucx-utils libsodium-dev libcmocka-dev libglib2.0-dev
      iproute2 procps clang libclang-rt-14-dev groff-base man-db
      python3-dev python3-numpy python3-pytest python3-setuptools python3-venv)

missing=()
for p in "${pkgs[@]}"; do
  grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
