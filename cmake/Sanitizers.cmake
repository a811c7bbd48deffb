# ZOB_SANITIZE applies to every target of the build (the presets asan and tsan set it).
if(ZOB_SANITIZE)
  string(REPLACE ";" "," _zob_san "${ZOB_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_zob_san}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_zob_san})
  message(STATUS "zob: sanitizers: ${_zob_san}")
endif()
