# SPDX-License-Identifier: BSD-3-Clause
# GPU sockets (docs/gpunet.md): the CUDA examples, benchmark and GPU test.
# Built wherever nvcc is found (check_language), for sm_90 unless
# CMAKE_CUDA_ARCHITECTURES says otherwise; the library itself stays plain C.
# Kept in this file so that other CUDA users of the build stay separate.
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER OR REMORA_SANITIZE)
  message(STATUS "GPU socket examples, benchmark and tests not built (no nvcc, or a sanitizer build)")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

function(remora_gpunet_program name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE remora)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
endfunction()

remora_gpunet_program(gpu_echo_client ${PROJECT_SOURCE_DIR}/examples/gpu_echo_client.cu)
remora_gpunet_program(gpu_echo_server ${PROJECT_SOURCE_DIR}/examples/gpu_echo_server.cu)
remora_gpunet_program(gpunet_bench ${PROJECT_SOURCE_DIR}/bench/gpunet_bench.cu)
if(REMORA_TESTS)
  remora_gpunet_program(test_gpunet ${PROJECT_SOURCE_DIR}/tests/gpu/test_gpunet.cu)
  add_test(NAME gpu_gpunet COMMAND test_gpunet $<TARGET_FILE:gpu_echo_server>)
  set_tests_properties(gpu_gpunet PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                       LABELS "gpu" ENVIRONMENT "REMORA_LOG=warn")
  remora_gpunet_program(test_gpunet_queued ${PROJECT_SOURCE_DIR}/tests/gpu/test_gpunet_queued.cu)
  add_test(NAME gpu_gpunet_queued COMMAND test_gpunet_queued)
  set_tests_properties(gpu_gpunet_queued PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                       LABELS "gpu" ENVIRONMENT "REMORA_LOG=warn")
endif()
