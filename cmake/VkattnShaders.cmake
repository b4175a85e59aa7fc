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
# Compiles a 16×16×16 cooperative-matrix product of `element` operands (float16_t, or bfloat16_t
# through GL_EXT_bfloat16) with `glslang`, as the units' shaders are, and validates it with the
# units' spirv-val: <why_var> empty where both pass, else what failed and its output.
function(vkattn_units_probe glslang element why_var)
  set(probe ${CMAKE_BINARY_DIR}/coopmat_probe_${element})
  set(types "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require")
  if(element STREQUAL "bfloat16_t")
    set(types "#extension GL_EXT_bfloat16 : require")
  endif()
  set(matrix "coopmat<${element}, gl_ScopeSubgroup, 16, 16")
  set(acc "coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>")
  file(WRITE ${probe}.comp "#version 450\n#extension GL_KHR_cooperative_matrix : require\n"
       "#extension GL_KHR_memory_scope_semantics : require\n${types}\n"
       "layout(local_size_x = 32) in;\nshared uvec4 t[32];\nshared float c_[256];\nvoid main() {\n"
       "  ${matrix}, gl_MatrixUseA> a;\n  ${matrix}, gl_MatrixUseB> b;\n  ${acc} c = ${acc}(0.0);\n"
       "  coopMatLoad(a, t, 0, 2, gl_CooperativeMatrixLayoutRowMajor);\n"
       "  coopMatLoad(b, t, 0, 2, gl_CooperativeMatrixLayoutColumnMajor);\n"
       "  c = coopMatMulAdd(a, b, c);\n  coopMatStore(c, c_, 0, 16, gl_CooperativeMatrixLayoutRowMajor);\n}\n")
  execute_process(COMMAND ${glslang} -V --target-env vulkan1.2 -S comp -o ${probe}.spv ${probe}.comp
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    set(${why_var} "${glslang} cannot compile a ${element} cooperative matrix: ${out}" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND ${VKATTN_UNITS_SPIRV_VAL} --target-env vulkan1.2 ${probe}.spv
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    set(${why_var} "${VKATTN_UNITS_SPIRV_VAL} rejects a ${element} cooperative-matrix module: ${out}" PARENT_SCOPE)
  else()
    set(${why_var} "" PARENT_SCOPE)
  endif()
endfunction()
# Compiles a probe of what flash_cm2.comp uses of GL_NV_cooperative_matrix2 (a workgroup-scope tensor
# load, a row reduction, an element operation, a conversion to an A operand) for Vulkan 1.3 with
# `glslang` and validates it: <why_var> empty where both pass.
function(vkattn_workgroup_probe glslang why_var)
  set(probe ${CMAKE_BINARY_DIR}/workgroup_matrix_probe)
  set(acc "coopmat<float, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseAccumulator>")
  file(WRITE ${probe}.comp "#version 450\n#extension GL_KHR_cooperative_matrix : require\n"
       "#extension GL_NV_cooperative_matrix2 : require\n#extension GL_KHR_memory_scope_semantics : require\n"
       "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
       "#extension GL_EXT_shader_16bit_storage : require\nlayout(local_size_x_id = 0) in;\n"
       "layout(std430, binding = 0) buffer B { float16_t h[]; };\n"
       "float add(const in float x, const in float y) { return x + y; }\n"
       "float twice(const in uint r, const in uint c, const in float x) { return 2.0 * x; }\n"
       "void main() {\n  tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> t = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);\n"
       "  t = setTensorLayoutDimensionNV(t, 100, 64);\n"
       "  coopmat<float16_t, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseB> b;\n"
       "  coopMatLoadTensorNV(b, h, 0, sliceTensorLayoutNV(t, 0, 64, 0, 64));\n"
       "  ${acc} c = ${acc}(1.0);\n  coopMatPerElementNV(c, c, twice);\n  ${acc} r;\n"
       "  coopMatReduceNV(r, c, gl_CooperativeMatrixReduceRowNV, add);\n"
       "  coopmat<float16_t, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseA> a = coopmat<float16_t, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseA>(r);\n"
       "  c = coopMatMulAdd(a, b, c);\n  coopMatStoreTensorNV(c, h, 0, t);\n}\n")
  execute_process(COMMAND ${glslang} -V --target-env vulkan1.3 -S comp -o ${probe}.spv ${probe}.comp
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(status EQUAL 0)
    execute_process(COMMAND ${VKATTN_UNITS_SPIRV_VAL} --target-env vulkan1.3 ${probe}.spv
                    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  endif()
  if(status EQUAL 0)
    set(${why_var} "" PARENT_SCOPE)
  else()
    set(${why_var} "${out}" PARENT_SCOPE)
  endif()
endfunction()
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
    vkattn_units_probe(${VKATTN_UNITS_GLSLANG} float16_t why)
    if(NOT why)
      set(VKATTN_HAVE_COOPMAT_UNITS TRUE)
    endif()
  endif()
  # bf16 operands on the units (GL_EXT_bfloat16, VK_KHR_shader_bfloat16) need glslang >= 15.3, which
  # PyPI does not have: built where VKATTN_BF16_GLSLANG (default: the units' glslang) compiles a bf16
  # probe, e.g. a Vulkan SDK's from 1.4.313 or bench/build_glslang.sh's, named by
  # -DVKATTN_BF16_GLSLANG=...; a glslang of its own, so that the f16 kernels keep the SPIR-V of the
  # toolchain they were measured with. bf16 storage then multiplies on the units; otherwise the
  # engine refuses it there by name, and it runs in the portable implementation elsewhere.
  set(VKATTN_BF16_GLSLANG "" CACHE FILEPATH "A glslang >= 15.3 for the units' bf16 shaders (default: the units' glslang)")
  set(VKATTN_HAVE_BF16_UNITS FALSE)
  set(VKATTN_BF16_COMPILER ${VKATTN_UNITS_GLSLANG})
  if(VKATTN_BF16_GLSLANG)
    set(VKATTN_BF16_COMPILER ${VKATTN_BF16_GLSLANG})
  endif()
  if(VKATTN_HAVE_COOPMAT_UNITS)
    vkattn_units_probe(${VKATTN_BF16_COMPILER} bfloat16_t bf16_why)
    if(NOT bf16_why)
      set(VKATTN_HAVE_BF16_UNITS TRUE)
    elseif(VKATTN_BF16_GLSLANG)  # asked for by name: say why not, and stop
      message(FATAL_ERROR "VKATTN_BF16_GLSLANG=${VKATTN_BF16_GLSLANG} does not build the units' bf16 shaders: ${bf16_why}")
    else()
      string(REGEX MATCH "ERROR[^\n]*" first_error "${bf16_why}")  # glslang's first error, where it ran
      if(first_error)
        set(bf16_why "${first_error}")
      endif()
    endif()
  endif()
  # The workgroup-matrix kernel (flash_cm2.comp: VK_NV_cooperative_matrix2's workgroup scope, tensor
  # loads, row reductions, element operations and conversions, SPIR-V 1.6) needs a glslang >= 15 too:
  # built with the same compiler where it compiles and validates a probe of those operations.
  set(VKATTN_HAVE_WORKGROUP_MATRICES FALSE)
  if(VKATTN_HAVE_COOPMAT_UNITS)
    vkattn_workgroup_probe(${VKATTN_BF16_COMPILER} wg_why)
    if(NOT wg_why)
      set(VKATTN_HAVE_WORKGROUP_MATRICES TRUE)
    endif()
  endif()
  if(VKATTN_HAVE_COOPMAT_UNITS)
    if(VKATTN_HAVE_WORKGROUP_MATRICES)
      message(STATUS "vkattn: the workgroup-matrix kernel (VK_NV_cooperative_matrix2) is built (${VKATTN_BF16_COMPILER})")
    else()
      message(STATUS "vkattn: the workgroup-matrix kernel is not built: ${VKATTN_BF16_COMPILER} does not compile GL_NV_cooperative_matrix2 (glslang >= 15 does: VKATTN_BF16_GLSLANG)")
    endif()
    if(VKATTN_HAVE_BF16_UNITS)
      set(bf16_note "with bf16 operands (${VKATTN_BF16_COMPILER})")
    else()
      set(bf16_note "f16 operands only: ${VKATTN_BF16_COMPILER} does not build GL_EXT_bfloat16 (${bf16_why}; glslang >= 15.3 does: VKATTN_BF16_GLSLANG)")
    endif()
    message(STATUS "vkattn: the matrix units' shaders are built (${VKATTN_UNITS_GLSLANG}), ${bf16_note}")
  elseif(VKATTN_COOPMAT_UNITS STREQUAL "ON")
    message(FATAL_ERROR "VKATTN_COOPMAT_UNITS=ON, but ${why}.")
  else()
    message(STATUS "vkattn: the matrix units' shaders are not built: ${why}; the portable cooperative-matrix kernels remain")
  endif()
endif()

set_property(GLOBAL PROPERTY VKATTN_SHADER_NAMES "")
set_property(GLOBAL PROPERTY VKATTN_SHADER_FILES "")

# vkattn_shader(NAME <variant> SOURCE <file.comp> [UNITS [GLSLANG <path>] [TARGET <env>]] [DEFINES A=1 B ...])
# UNITS: the matrix units' build (CM_KHR defined; SPIR-V 1.5, Vulkan 1.2 with VK_KHR_cooperative_matrix
# and the Vulkan memory model; TARGET vulkan1.3 for SPIR-V 1.6, which VK_NV_cooperative_matrix2 needs):
# glslc resolves the includes, the toolchain's glslang (or GLSLANG) compiles and its spirv-val checks;
# only where VKATTN_HAVE_COOPMAT_UNITS.
function(vkattn_shader)
  cmake_parse_arguments(S "UNITS" "NAME;SOURCE;GLSLANG;TARGET" "DEFINES" ${ARGN})
  if(NOT S_GLSLANG)
    set(S_GLSLANG ${VKATTN_UNITS_GLSLANG})
  endif()
  if(NOT S_TARGET)
    set(S_TARGET vulkan1.2)
  endif()
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
            COMMAND ${S_GLSLANG} -V --target-env ${S_TARGET} -S comp -o ${out} ${pre}
            COMMAND ${VKATTN_UNITS_SPIRV_VAL} --target-env ${S_TARGET} ${out})
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
