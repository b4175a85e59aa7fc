# One warnings target for all our code (vk-bootstrap's habit): warnings are on, and they are errors.
add_library(vkattn_warnings INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(vkattn_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
    -Wnon-virtual-dtor -Wno-missing-field-initializers $<$<BOOL:${VKATTN_WERROR}>:-Werror>)
endif()
option(VKATTN_WERROR "Treat warnings as errors" OFF)
