# Writes ${OUT} with the current git commit (+ "-dirty" for uncommitted changes), at build time,
# rewriting it only when it changes. Used for the "commit" field of benchmark results.
# Only coda's own checkout counts: a source tree exported into another repository (a tarball
# unpacked inside it) would otherwise record that repository's commit.
execute_process(COMMAND git rev-parse --show-toplevel WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE toplevel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc_top)
set(own_checkout FALSE)
if(rc_top EQUAL 0 AND NOT toplevel STREQUAL "")
  get_filename_component(top_real "${toplevel}" REALPATH)
  get_filename_component(src_real "${SRC}" REALPATH)
  if(top_real STREQUAL src_real)
    set(own_checkout TRUE)
  endif()
endif()
set(rc 1)
# CODA_COMMIT (environment) names the commit where git cannot see it: a copy of the tree whose .git
# is not the commit being built (the device machine's copy of a session's checkout).
if(DEFINED ENV{CODA_COMMIT} AND NOT "$ENV{CODA_COMMIT}" STREQUAL "")
  set(own_checkout FALSE)
  set(commit "$ENV{CODA_COMMIT}")
  set(rc 0)
  set(from_env TRUE)
endif()
if(own_checkout)
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
elseif(NOT from_env)
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
set(text "#define CODA_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
