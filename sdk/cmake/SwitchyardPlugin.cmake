# switchyard_add_plugin(<target> <sources>...)
# A Switchyard plugin: a MODULE library that links only the SDK headers,
# exports nothing but its entry point (hidden visibility), and must not
# leave undefined symbols for the host to resolve.
function(switchyard_add_plugin target)
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE Switchyard::sdk)
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(NOT APPLE)
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()
