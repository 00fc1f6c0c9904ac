# GRADSYNC_SANITIZE=address|thread|undefined adds the sanitizer to every target.
if(GRADSYNC_SANITIZE)
  if(NOT GRADSYNC_SANITIZE MATCHES "^(address|thread|undefined)$")
    message(FATAL_ERROR "GRADSYNC_SANITIZE must be address, thread or undefined, not '${GRADSYNC_SANITIZE}'")
  endif()
  # -O1 and -g1 (line tables: every report still names file and line) after the build type's
  # flags: the sanitizers' own advice, and 40% less compile time than -O2 -g (engine_test.cc under
  # TSan: 12.8 s -> 7.6 s), which is most of a CI run's sanitizer stages.
  add_compile_options(-fsanitize=${GRADSYNC_SANITIZE} -fno-omit-frame-pointer -O1 -g1)
  add_link_options(-fsanitize=${GRADSYNC_SANITIZE})
  # Tests size their largest cases down under a sanitizer (tests/support/sanitized.h).
  add_compile_definitions(GRADSYNC_SANITIZED=1)
endif()
