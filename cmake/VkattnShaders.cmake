# Shader variants are compiled to SPIR-V in the build tree (include dependencies tracked through a
# depfile) and embedded in the library as uint32 arrays: nothing is looked up at run time.
find_program(VKATTN_GLSLC glslc)
find_program(VKATTN_GLSLANG glslangValidator)
if(NOT VKATTN_GLSLC AND NOT VKATTN_GLSLANG)
  message(FATAL_ERROR "vkattn needs glslc or glslangValidator to compile its shaders "
                      "(Debian/Ubuntu: apt-get install glslc, or glslang-tools).")
endif()

set_property(GLOBAL PROPERTY VKATTN_SHADER_NAMES "")
set_property(GLOBAL PROPERTY VKATTN_SHADER_FILES "")

# vkattn_shader(NAME <variant> SOURCE <file.comp> [DEFINES A=1 B ...])
function(vkattn_shader)
  cmake_parse_arguments(S "" "NAME;SOURCE" "DEFINES" ${ARGN})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/${S_SOURCE})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/spv/${S_NAME}.spv)
  set(dep ${CMAKE_CURRENT_BINARY_DIR}/spv/${S_NAME}.d)
  set(defs "")
  foreach(d IN LISTS S_DEFINES)
    list(APPEND defs -D${d})
  endforeach()
  if(VKATTN_GLSLC)
    # -O0: full unrolling of register-blocked loops makes glslc -O explode in memory; the driver's own
    # compiler optimises after specialization anyway.
    set(cmd ${VKATTN_GLSLC} --target-env=vulkan1.2 -O0 -fshader-stage=compute ${defs}
            -I${CMAKE_CURRENT_SOURCE_DIR} -MD -MF ${dep} -o ${out} ${src})
  else()
    set(cmd ${VKATTN_GLSLANG} --target-env vulkan1.2 -S comp ${defs}
            -I${CMAKE_CURRENT_SOURCE_DIR} --depfile ${dep} -o ${out} ${src})
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
