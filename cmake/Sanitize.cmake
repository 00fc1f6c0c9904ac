# GRADSYNC_SANITIZE=address|thread|undefined adds the sanitizer to every target.
if(GRADSYNC_SANITIZE)
  if(NOT GRADSYNC_SANITIZE MATCHES "^(address|thread|undefined)$")
    message(FATAL_ERROR "GRADSYNC_SANITIZE must be address, thread or undefined, not '${GRADSYNC_SANITIZE}'")
  endif()
  add_compile_options(-fsanitize=${GRADSYNC_SANITIZE} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${GRADSYNC_SANITIZE})
endif()
