# End-to-end: the real binary with --device xpu on the fake driver.
#   cmake -DBIN=<exe> -DDRIVER=<fake .so> [-DKERNELS=pocl|cpu] -DMODE=M -P e2e_xpu.cmake
# MODE equal: against --device cpu on the same flags. The fake runs the plugin's SPIR-V on
# PoCL: xpu and cpu are two implementations, so the per-step losses must agree within the
# tolerance scripts/cuda-vs-cpu-loss uses for CUDA (GEMM summation order differs), while the
# two xpu arms must agree bit for bit.
# MODE schedules: every --schedule with all four arms, each under another FAKE_ZE_SEED, one or
# two copy engines, overlap also with small pieces, and --offload-param once; every arm of
# every run bit for bit equal.
# MODE no_import: without an import path the registered arm fails loudly.
# Every xpu run has the fake's copy delay on (a host read that does not wait reads stale
# bytes) and must leave no "fake-ze:" complaint on stderr.
cmake_policy(VERSION 3.25)  # -P scripts start with old policies: keep empty list elements
set(flags --hidden 64 --layers 2 --batch 2 --seq 16 --vocab 512 --steps 2 --warmup 1 --repeats 1)

function(run_arm device out_json out_rc out_text)
  if(NOT KERNELS)
    set(KERNELS pocl)
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ZE_ENABLE_ALT_DRIVERS=${DRIVER}
                          FAKE_ZE_KERNELS=${KERNELS} FAKE_ZE_COPY_DELAY_US=2000 ${EXTRA_ENV}
                          ${BIN} --device ${device} ${flags} ${EXTRA_FLAGS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  string(REGEX MATCH "DRIVERRESULT=([^\n]*)" _ "${out}")
  set(${out_json} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  if(rc EQUAL 0 AND err MATCHES "fake-ze:")
    set(rc "0, but the fake driver complained")
  endif()
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_text} "${out}\n${err}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "schedules")
  set(arms registered unregistered pageable hostalloc)
  set(want "")
  # schedule | FAKE_ZE_SEED | FAKE_ZE_COPY_ENGINES | extra flags (comma-separated). Overlap with
  # small pieces: a piece's bf16 copy into the device's parameters must wait for the backward
  # that still reads them (the fake reports the race otherwise; one piece hides it).
  foreach(run "stock|1|1|" "overlap|2|2|" "overlap|5|2|--chunk-elems,3001"
              "deepspeed|3|2|--offload-param")
    string(REPLACE "|" ";" run "${run}")
    list(GET run 0 schedule)
    list(GET run 1 seed)
    list(GET run 2 engines)
    list(GET run 3 extra)
    string(REPLACE "," ";" extra "${extra}")
    set(EXTRA_ENV FAKE_ZE_SEED=${seed} FAKE_ZE_COPY_ENGINES=${engines})
    set(EXTRA_FLAGS --schedule ${schedule} --arms registered,unregistered,pageable,hostalloc ${extra})
    run_arm(xpu json rc text)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "--schedule ${schedule} (seed ${seed}, ${engines} copy engine(s)): exit ${rc}:\n${text}")
    endif()
    foreach(arm ${arms})
      string(JSON sum GET "${json}" ${arm} param_checksum)
      if(want STREQUAL "")
        set(want "${sum}")
      elseif(NOT sum STREQUAL want)
        message(FATAL_ERROR "--schedule ${schedule} ${arm}: param_checksum ${sum}, other runs ${want}")
      endif()
    endforeach()
    message(STATUS "--schedule ${schedule} ${extra} (FAKE_ZE_SEED=${seed}, ${engines} copy engine(s)): "
                   "4 arms, param_checksum ${want}")
  endforeach()
  return()
endif()

if(MODE STREQUAL "no_import")
  set(EXTRA_ENV FAKE_ZE_NO_IMPORT=1)
  run_arm(xpu json rc text)
  if(NOT rc EQUAL 1)
    message(FATAL_ERROR "expected exit 1 with FAKE_ZE_NO_IMPORT=1, got ${rc}:\n${text}")
  endif()
  if(NOT text MATCHES "ZEX_driver_import_host_pointer")
    message(FATAL_ERROR "the refusal does not name the missing import path:\n${text}")
  endif()
  return()
endif()

run_arm(cpu cpu_json cpu_rc cpu_text)
set(EXTRA_ENV FAKE_ZE_SEED=4)
run_arm(xpu xpu_json xpu_rc xpu_text)
if(NOT cpu_rc EQUAL 0 OR NOT xpu_rc EQUAL 0)
  message(FATAL_ERROR "exit codes cpu ${cpu_rc} xpu ${xpu_rc}:\n${cpu_text}\n${xpu_text}")
endif()
foreach(arm registered unregistered)
  string(JSON dev GET "${xpu_json}" ${arm} device)
  string(JSON xsum_${arm} GET "${xpu_json}" ${arm} param_checksum)
  if(NOT dev STREQUAL "xpu")
    message(FATAL_ERROR "${arm}: device '${dev}', expected xpu")
  endif()
endforeach()
if(NOT xsum_registered STREQUAL xsum_unregistered)
  message(FATAL_ERROR "xpu arms differ: ${xsum_registered} vs ${xsum_unregistered}")
endif()
string(JSON csum GET "${cpu_json}" registered param_checksum)
execute_process(COMMAND /usr/bin/python3 -c [=[
import json, sys
cpu, xpu = (json.loads(a)["registered"]["losses"] for a in sys.argv[1:3])
assert len(cpu) == len(xpu) and cpu, (cpu, xpu)
scale = max(abs(x) for x in cpu)
worst = max(abs(a - b) / scale for a, b in zip(cpu, xpu))
print(f"losses cpu {cpu} xpu {xpu}: worst |diff|/max|loss| {worst:.2e} (tolerance 2e-2)")
sys.exit(0 if worst <= 2e-2 else 1)
]=] "${cpu_json}" "${xpu_json}" RESULT_VARIABLE loss_rc OUTPUT_VARIABLE loss_text ERROR_VARIABLE loss_err)
if(NOT loss_rc EQUAL 0)
  message(FATAL_ERROR "xpu losses are not close to cpu's: ${loss_text}${loss_err}")
endif()
message(STATUS "${loss_text}")
set(xsum "xpu ${xsum_registered}, cpu ${csum}")
string(JSON method GET "${xpu_json}" registered registration)
if(NOT method STREQUAL "zexDriverImportExternalPointer")
  message(FATAL_ERROR "registered arm reports registration '${method}'")
endif()
message(STATUS "param_checksum ${xsum} (kernels: ${KERNELS}); registration ${method}")
