# SPDX-License-Identifier: BSD-3-Clause
"""Build the remora extension (remora._remora) against libremora.

Where libremora comes from, first match wins:
  1. REMORA_BUILD_DIR (a CMake build tree of this repository; default: ../build
     when it holds src/libremora.so): headers from ../include, the library from
     BUILD_DIR/src, with an RPATH to it so no LD_LIBRARY_PATH is needed;
  2. pkg-config remora (an installed libremora).
Extra compiler flags come from CFLAGS (the test script passes -Werror).
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(here)


def remora_flags():
    build = os.environ.get("REMORA_BUILD_DIR") or os.path.join(repo, "build")
    lib = os.path.join(build, "src")
    if os.path.exists(os.path.join(lib, "libremora.so")):
        return dict(include_dirs=[os.path.join(repo, "include")], library_dirs=[lib],
                    runtime_library_dirs=[lib])
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "remora"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs-only-L", "remora"], text=True)
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("libremora not found: build it (cmake -S . -B build && ninja -C build) "
                         "or install it, or set REMORA_BUILD_DIR")
    incs = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    dirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
    return dict(include_dirs=incs, library_dirs=dirs, runtime_library_dirs=dirs)


ext = Extension(
    "remora._remora",
    sources=[os.path.join("src", f) for f in
             ("module.c", "errors.c", "buffer.c", "queue.c", "server.c", "client.c",
              "ring.c", "signals.c")],
    depends=[os.path.join("src", "rp.h")],
    libraries=["remora"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Wshadow",
                        "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type", "-fvisibility=hidden"],
    **remora_flags(),
)

setup(
    name="remora",
    version="0.1.0",
    description="Python binding of remora: regions, rings and GPU buffers over UCX",
    packages=["remora"],
    package_data={"remora": ["py.typed", "*.pyi"]},
    ext_modules=[ext],
    python_requires=">=3.9",
)
