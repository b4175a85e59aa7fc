# Sanitizer and fuzzer instrumentation for everything this project compiles (library, io library,
# tool, tests, fuzzers). Included from the top-level CMakeLists.txt before any target exists, so the
# flags reach every target; the Vulkan loader, the driver and the validation layer stay uninstrumented.
#
#   -DVKATTN_SANITIZE=address,undefined   ASan + UBSan; a UB report aborts (fails the test)
#   -DVKATTN_SANITIZE=thread              TSan
#   -DVKATTN_FUZZ=ON                      libFuzzer targets in fuzz/ (clang only); implies address,undefined
#
# The runtime options (suppressions, exit codes) reach the tests through ctest's ENVIRONMENT, set in
# tests/CMakeLists.txt from VKATTN_SANITIZER_TEST_ENVIRONMENT below.

set(VKATTN_SANITIZE "" CACHE STRING "Build instrumented: empty, address,undefined, or thread")
set_property(CACHE VKATTN_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")
option(VKATTN_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang)" OFF)

if(VKATTN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "VKATTN_FUZZ needs clang (libFuzzer ships with it): configure with "
                        "CC=clang CXX=clang++; this compiler is ${CMAKE_CXX_COMPILER_ID}.")
  endif()
  if(VKATTN_SANITIZE STREQUAL "")
    set(VKATTN_SANITIZE "address,undefined" CACHE STRING "" FORCE)
  elseif(NOT VKATTN_SANITIZE STREQUAL "address,undefined")
    message(FATAL_ERROR "VKATTN_FUZZ runs under address,undefined, not VKATTN_SANITIZE=${VKATTN_SANITIZE}.")
  endif()
endif()

set(VKATTN_SANITIZER_TEST_ENVIRONMENT "")
if(NOT VKATTN_SANITIZE STREQUAL "")
  if(NOT VKATTN_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
    message(FATAL_ERROR "VKATTN_SANITIZE is \"${VKATTN_SANITIZE}\"; use address,undefined or thread.")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "VKATTN_SANITIZE needs GCC or clang; this compiler is ${CMAKE_CXX_COMPILER_ID}.")
  endif()

  set(flags -fsanitize=${VKATTN_SANITIZE} -fno-omit-frame-pointer)
  if(VKATTN_SANITIZE MATCHES "undefined")
    # Without this UBSan prints and carries on, and the test that hit undefined behaviour passes.
    list(APPEND flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${flags})
  add_link_options(${flags})
  if(VKATTN_FUZZ)
    # Coverage feedback in every library the fuzzers link; -fsanitize=fuzzer (with main) only on them.
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()

  # Runtime options. Suppressions name only code inside the Vulkan driver, the loader or the
  # validation layer, each with its reason (tests/sanitizers/*.supp).
  set(supp ${PROJECT_SOURCE_DIR}/tests/sanitizers)
  if(VKATTN_SANITIZE MATCHES "address")
    list(APPEND VKATTN_SANITIZER_TEST_ENVIRONMENT
         "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
         "LSAN_OPTIONS=suppressions=${supp}/lsan.supp:print_suppressions=0")
  endif()
  if(VKATTN_SANITIZE MATCHES "undefined")
    list(APPEND VKATTN_SANITIZER_TEST_ENVIRONMENT "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  # The property test's first 100 random requests of its 300 (its default seed): the plain suite
  # runs all 300 against the reference, and past the first 100 the draws take the same host code
  # at other shapes. Under ASan the 300 took 2.8 of the suite's 22 minutes (2 cores).
  list(APPEND VKATTN_SANITIZER_TEST_ENVIRONMENT "VKATTN_PROPERTY_CASES=100")
  if(VKATTN_SANITIZE STREQUAL "thread")
    list(APPEND VKATTN_SANITIZER_TEST_ENVIRONMENT
         "TSAN_OPTIONS=suppressions=${supp}/tsan.supp:halt_on_error=1:second_deadlock_stack=1")
  endif()
endif()

# A sanitized static vkattn needs the sanitizer runtime wherever it is linked, including a user
# project built against the installed package (the package test): carry the link flag with it.
function(vkattn_sanitize_interface target)
  if(NOT VKATTN_SANITIZE STREQUAL "")
    target_link_options(${target} INTERFACE -fsanitize=${VKATTN_SANITIZE})
  endif()
endfunction()
