# ctest -P script: install vkattn into a temporary prefix, build examples/${EXAMPLE} against it with
# find_package(vkattn), run it with ${ARGS} (after ${LAUNCHER}, a ;-list such as mpirun's command
# line, when given). Proves the package users link, rather than assuming it.
set(prefix ${WORK}/prefix)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix} RESULT_VARIABLE r OUTPUT_QUIET)
if(r)
  message(FATAL_ERROR "cmake --install failed: ${r}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/examples/${EXAMPLE} -B ${WORK}/${EXAMPLE} -DCMAKE_PREFIX_PATH=${prefix}
                RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "configuring the example against the installed package failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/${EXAMPLE} -j2 RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "building the example failed")
endif()
execute_process(COMMAND ${LAUNCHER} ${WORK}/${EXAMPLE}/${EXAMPLE} ${ARGS} RESULT_VARIABLE r)
if(r)
  message(FATAL_ERROR "the example ran and failed: ${r}")
endif()
