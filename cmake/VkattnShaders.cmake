# Shader variants are compiled to SPIR-V in the build tree (include dependencies tracked through a
# depfile), checked with spirv-val, and embedded in the library as uint32 arrays: nothing is looked
# up at run time.
find_program(VKATTN_GLSLC glslc)
find_program(VKATTN_GLSLANG glslangValidator)
if(NOT VKATTN_GLSLC AND NOT VKATTN_GLSLANG)
  message(FATAL_ERROR "vkattn needs glslc or glslangValidator to compile its shaders "
                      "(Debian/Ubuntu: apt-get install glslc, or glslang-tools).")
endif()
find_program(VKATTN_SPIRV_VAL spirv-val)
if(NOT VKATTN_SPIRV_VAL)
  message(FATAL_ERROR "vkattn validates every shader module with spirv-val (Debian/Ubuntu: apt-get install spirv-tools).")
endif()

# The matrix units' shaders (GL_KHR_cooperative_matrix, issue #33) need glslang >= 13 and a spirv-val
# that knows the capability; Debian 12 has neither, PyPI has both (shaders/toolchain.txt, which the
# README's commands install into build/toolchain). AUTO builds them where that toolchain compiles and
# validates a probe shader; the engine then offers the units' kernels, otherwise only the portable ones.
set(VKATTN_COOPMAT_UNITS AUTO CACHE STRING "Build the matrix units' shaders: AUTO, ON (required) or OFF")
set_property(CACHE VKATTN_COOPMAT_UNITS PROPERTY STRINGS AUTO ON OFF)
set(VKATTN_SHADER_TOOLCHAIN ${CMAKE_BINARY_DIR}/toolchain CACHE PATH
    "Where shaders/toolchain.txt is installed (a Python environment with glslangValidator and spirv-val in bin/)")
set(VKATTN_HAVE_COOPMAT_UNITS FALSE)
if(NOT VKATTN_COOPMAT_UNITS STREQUAL "OFF")
  # Also the README's build/toolchain for other build trees of the checkout (the GPU kit's, the
  # Python package's).
  set(toolchain_bins ${VKATTN_SHADER_TOOLCHAIN}/bin ${PROJECT_SOURCE_DIR}/build/toolchain/bin)
  find_program(VKATTN_UNITS_GLSLANG glslangValidator HINTS ${toolchain_bins} NO_DEFAULT_PATH)
  find_program(VKATTN_UNITS_SPIRV_VAL spirv-val HINTS ${toolchain_bins} NO_DEFAULT_PATH)
  set(why "")
  if(NOT VKATTN_GLSLC)
    set(why "glslc (its preprocessor resolves the includes) was not found")
  elseif(NOT VKATTN_UNITS_GLSLANG OR NOT VKATTN_UNITS_SPIRV_VAL)
    set(why "no glslangValidator and spirv-val in ${VKATTN_SHADER_TOOLCHAIN}/bin (pip install -r shaders/toolchain.txt there)")
  else()
    set(probe ${CMAKE_BINARY_DIR}/coopmat_probe)
    file(WRITE ${probe}.comp "#version 450
#extension GL_KHR_cooperative_matrix : require
"
         "#extension GL_KHR_memory_scope_semantics : require
"
         "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
"
         "layout(local_size_x = 32) in;
shared float16_t t[256];
shared float c_[256];
"
         "void main() {
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
"
         "  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
"
         "  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c = "
         "coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
"
         "  coopMatLoad(a, t, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
"
         "  coopMatLoad(b, t, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
"
         "  c = coopMatMulAdd(a, b, c);
  coopMatStore(c, c_, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
")
    execute_process(COMMAND ${VKATTN_UNITS_GLSLANG} -V --target-env vulkan1.2 -S comp -o ${probe}.spv ${probe}.comp
                    RESULT_VARIABLE compiled OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(compiled EQUAL 0)
      execute_process(COMMAND ${VKATTN_UNITS_SPIRV_VAL} --target-env vulkan1.2 ${probe}.spv
                      RESULT_VARIABLE validated OUTPUT_VARIABLE out ERROR_VARIABLE out)
    endif()
    if(NOT compiled EQUAL 0)
      set(why "${VKATTN_UNITS_GLSLANG} cannot compile GL_KHR_cooperative_matrix: ${out}")
    elseif(NOT validated EQUAL 0)
      set(why "${VKATTN_UNITS_SPIRV_VAL} rejects a cooperative-matrix module: ${out}")
    else()
      set(VKATTN_HAVE_COOPMAT_UNITS TRUE)
    endif()
  endif()
  if(VKATTN_HAVE_COOPMAT_UNITS)
    message(STATUS "vkattn: the matrix units' shaders are built (${VKATTN_UNITS_GLSLANG})")
  elseif(VKATTN_COOPMAT_UNITS STREQUAL "ON")
    message(FATAL_ERROR "VKATTN_COOPMAT_UNITS=ON, but ${why}.")
  else()
    message(STATUS "vkattn: the matrix units' shaders are not built: ${why}; the portable cooperative-matrix kernels remain")
  endif()
endif()

set_property(GLOBAL PROPERTY VKATTN_SHADER_NAMES "")
set_property(GLOBAL PROPERTY VKATTN_SHADER_FILES "")

# vkattn_shader(NAME <variant> SOURCE <file.comp> [UNITS] [DEFINES A=1 B ...])
# UNITS: the matrix units' build (CM_KHR defined; SPIR-V 1.5, Vulkan 1.2 with VK_KHR_cooperative_matrix
# and the Vulkan memory model): glslc resolves the includes, the
# toolchain's glslang compiles and its spirv-val checks; only where VKATTN_HAVE_COOPMAT_UNITS.
function(vkattn_shader)
  cmake_parse_arguments(S "UNITS" "NAME;SOURCE" "DEFINES" ${ARGN})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/${S_SOURCE})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/spv/${S_NAME}.spv)
  set(dep ${CMAKE_CURRENT_BINARY_DIR}/spv/${S_NAME}.d)
  set(defs "")
  foreach(d IN LISTS S_DEFINES)
    list(APPEND defs -D${d})
  endforeach()
  if(S_UNITS)
    set(pre ${CMAKE_CURRENT_BINARY_DIR}/spv/${S_NAME}.pre.comp)
    set(cmd ${VKATTN_GLSLC} -E -fshader-stage=compute -DCM_KHR ${defs} -I${CMAKE_CURRENT_SOURCE_DIR}
            -MD -MF ${dep} -MT ${out} -o ${pre} ${src}
            COMMAND ${VKATTN_UNITS_GLSLANG} -V --target-env vulkan1.2 -S comp -o ${out} ${pre}
            COMMAND ${VKATTN_UNITS_SPIRV_VAL} --target-env vulkan1.2 ${out})
  elseif(VKATTN_GLSLC)
    # -O0: full unrolling of register-blocked loops makes glslc -O explode in memory; the driver's own
    # compiler optimises after specialization anyway.
    set(cmd ${VKATTN_GLSLC} --target-env=vulkan1.2 -O0 -fshader-stage=compute ${defs}
            -I${CMAKE_CURRENT_SOURCE_DIR} -MD -MF ${dep} -o ${out} ${src}
            COMMAND ${VKATTN_SPIRV_VAL} --target-env vulkan1.2 ${out})
  else()
    set(cmd ${VKATTN_GLSLANG} --target-env vulkan1.2 -S comp ${defs}
            -I${CMAKE_CURRENT_SOURCE_DIR} --depfile ${dep} -o ${out} ${src}
            COMMAND ${VKATTN_SPIRV_VAL} --target-env vulkan1.2 ${out})
  endif()
  add_custom_command(OUTPUT ${out} COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/spv
                     COMMAND ${cmd} DEPENDS ${src} DEPFILE ${dep}
                     COMMENT "Compiling shader ${S_NAME}" VERBATIM)
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_NAMES ${S_NAME})
  set_property(GLOBAL APPEND PROPERTY VKATTN_SHADER_FILES ${out})
endfunction()

# Writes one C++ file embedding every shader declared so far; returns its path in <out_var>.
function(vkattn_embed_shaders out_var)
  get_property(names GLOBAL PROPERTY VKATTN_SHADER_NAMES)
  get_property(files GLOBAL PROPERTY VKATTN_SHADER_FILES)
  set(cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/embedded_shaders.cpp)
  add_custom_command(OUTPUT ${cpp}
    COMMAND ${CMAKE_COMMAND} -DOUT=${cpp} "-DNAMES=${names}" "-DFILES=${files}"
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedSpirv.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/EmbedSpirv.cmake
    COMMENT "Embedding SPIR-V" VERBATIM)
  set(${out_var} ${cpp} PARENT_SCOPE)
endfunction()
