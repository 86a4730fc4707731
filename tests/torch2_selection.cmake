# TORCH2_SELECTION (tests/CMakeLists.txt): every name in CADRE_TORCH2_TESTS is a test labelled
# `torch2`. cmake -DCTEST=... -DBUILD_DIR=... -DNAMES=a;b;c -P torch2_selection.cmake
execute_process(COMMAND ${CTEST} -N -L "^torch2$" WORKING_DIRECTORY ${BUILD_DIR}
                OUTPUT_VARIABLE listed RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ctest -N -L torch2 in ${BUILD_DIR} failed (${rc})")
endif()
set(missing "")
list(LENGTH NAMES count)
foreach(name IN LISTS NAMES)
  string(REPLACE "." "\\." pattern "${name}")
  if(NOT listed MATCHES "Test +#[0-9]+: ${pattern}\n")
    list(APPEND missing ${name})
  endif()
endforeach()
if(missing)
  string(REPLACE ";" ", " missing "${missing}")
  message(FATAL_ERROR "CADRE_TORCH2_TESTS (tests/CMakeLists.txt) names tests that do not exist or lack the "
                      "torch2 label: ${missing}")
endif()
message(STATUS "all ${count} tests of CADRE_TORCH2_TESTS carry the torch2 label")
