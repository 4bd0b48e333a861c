# Embeds a text resource (a style sheet, a script) into the program: writes OUTPUT, a C++ source defining
#   std::string_view NAMESPACE::FUNCTION()
# that returns the bytes of INPUT without its final newline (a file ends with one; the text it is pasted
# into does not). The bytes are written as hexadecimal character codes, so any content is embedded exactly.
# Run in script mode at build time (neuromkl_embed_resource below), so an edited resource is embedded again:
#   cmake -DINPUT=report.css -DOUTPUT=report_css.cpp -DNAMESPACE=neuromkl::exporting::resources -DFUNCTION=ReportCss -P EmbedResource.cmake
if(CMAKE_SCRIPT_MODE_FILE)
  foreach(var INPUT OUTPUT NAMESPACE FUNCTION)
    if(NOT DEFINED ${var})
      message(FATAL_ERROR "EmbedResource.cmake: -D${var}=... is required")
    endif()
  endforeach()
  file(READ "${INPUT}" hex HEX)
  string(REGEX REPLACE "0a$" "" hex "${hex}")
  string(LENGTH "${hex}" length)
  math(EXPR bytes "${length} / 2")
  if(bytes EQUAL 0)
    set(body "  return {};")
  else()
    set(chars "")
    foreach(start RANGE 0 ${length} 48)  # 24 bytes a line
      string(SUBSTRING "${hex}" ${start} 48 line)
      string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," line "${line}")
      if(NOT line STREQUAL "")
        string(APPEND chars "      ${line}\n")
      endif()
    endforeach()
    set(body "  static constexpr char kBytes[${bytes}] = {\n${chars}  };\n  return {kBytes, ${bytes}};")
  endif()
  file(WRITE "${OUTPUT}.tmp"
       "// Generated at build time by cmake/EmbedResource.cmake from ${INPUT}: edit that file, not this one.\n"
       "#include <string_view>\n\nnamespace ${NAMESPACE} {\n\nstd::string_view ${FUNCTION}() {\n${body}\n}\n\n}  // namespace ${NAMESPACE}\n")
  # Rewritten only when the content changed, so an unchanged resource recompiles nothing.
  execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUTPUT}.tmp" "${OUTPUT}")
  file(REMOVE "${OUTPUT}.tmp")
  return()
endif()

# neuromkl_embed_resource(<target> <input file> <namespace> <function>): adds to <target> a generated source that
# defines <namespace>::<function>() with the file's text (declare it in a header of the target).
function(neuromkl_embed_resource target input namespace function)
  get_filename_component(name "${input}" NAME)
  string(MAKE_C_IDENTIFIER "${name}" stem)
  set(output "${CMAKE_CURRENT_BINARY_DIR}/resources/${stem}.cpp")
  add_custom_command(OUTPUT "${output}"
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${output} -DNAMESPACE=${namespace} -DFUNCTION=${function}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedResource.cmake
    DEPENDS "${input}" "${PROJECT_SOURCE_DIR}/cmake/EmbedResource.cmake"
    COMMENT "Embedding ${name}"
    VERBATIM)
  target_sources(${target} PRIVATE "${output}")
endfunction()
