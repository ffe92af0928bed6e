# libcoda.so takes the C++ runtime (libstdc++ / libc++) from the shared library, whatever the toolchain.
#
# A private, statically linked copy of the runtime inside a library that a host process loads next
# to its own (PyTorch brings one) is what crashed issue 10. Nothing in this project asks for a static
# runtime, but a toolchain can: -static-libstdc++ in CXXFLAGS/LDFLAGS, in the compiler's specs or in
# a wrapper script (the GPU machine's /opt/gcc/bin/g++ does), or a toolchain that ships only
# libstdc++.a. So:
#   1. probe: link a small program the way the toolchain links by default and read its NEEDED;
#   2. if no shared runtime is there, find the shared libstdc++ (the toolchain's own, else the
#      system's libstdc++.so.6) and probe again with it named on the link line: named first, it
#      resolves every runtime symbol, and the static archive the driver appends later is never read;
#   3. coda_link_cxx_runtime(target) adds that library to libcoda.so's link (nothing when the
#      toolchain links the runtime dynamically by itself).
# tests/abi's abi.exports checks the result (libstdc++ in NEEDED, no runtime symbol defined).

function(_coda_probe_cxx_runtime out_var extra_libs)
  set(_dir ${CMAKE_BINARY_DIR}/CMakeFiles/coda_cxx_runtime)
  file(WRITE ${_dir}/probe.cpp "#include <iostream>\nint main(int argc, char**) { std::cout << argc; }\n")
  separate_arguments(_link_flags NATIVE_COMMAND "${CMAKE_SHARED_LINKER_FLAGS}")  # what libcoda.so links with
  string(MD5 _tag "${extra_libs}")
  try_compile(_linked ${_dir}/build-${_tag} SOURCES ${_dir}/probe.cpp LINK_OPTIONS ${_link_flags}
              LINK_LIBRARIES ${extra_libs} COPY_FILE ${_dir}/probe-${_tag} OUTPUT_VARIABLE _log)
  set(_runtime "")
  if(_linked AND CMAKE_READELF)
    execute_process(COMMAND ${CMAKE_READELF} -d ${_dir}/probe-${_tag} OUTPUT_VARIABLE _dynamic ERROR_QUIET)
    string(REGEX MATCH "\\[(lib(stdc|c)\\+\\+\\.so[^]]*)\\]" _m "${_dynamic}")
    set(_runtime "${CMAKE_MATCH_1}")
  elseif(NOT CMAKE_READELF)
    set(_runtime "unknown")
  endif()
  set(${out_var} "${_runtime}" PARENT_SCOPE)
endfunction()

function(coda_check_cxx_runtime)
  set(_key "${CMAKE_CXX_COMPILER}|${CMAKE_CXX_FLAGS}|${CMAKE_SHARED_LINKER_FLAGS}")
  if(DEFINED CACHE{CODA_CXX_RUNTIME_LINK} AND CODA_CXX_RUNTIME_KEY STREQUAL _key)
    return()
  endif()
  set(_link "")
  _coda_probe_cxx_runtime(_runtime "")
  if(_runtime STREQUAL "unknown")
    message(STATUS "coda: could not probe how ${CMAKE_CXX_COMPILER} links the C++ runtime (no readelf)")
  elseif(NOT _runtime STREQUAL "")
    message(STATUS "coda: C++ runtime linked dynamically (${_runtime})")
  else()
    # The toolchain links the runtime statically: name a shared one on libcoda.so's link line.
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                    OUTPUT_VARIABLE _own OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    set(_candidates "")
    if(IS_ABSOLUTE "${_own}" AND EXISTS "${_own}")
      list(APPEND _candidates "${_own}")
    endif()
    find_library(CODA_SYSTEM_LIBSTDCXX NAMES libstdc++.so.6 stdc++
                 PATHS /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu /lib64 NO_DEFAULT_PATH)
    if(CODA_SYSTEM_LIBSTDCXX)
      list(APPEND _candidates "${CODA_SYSTEM_LIBSTDCXX}")
    endif()
    foreach(_lib IN LISTS _candidates)
      _coda_probe_cxx_runtime(_runtime "${_lib}")
      if(NOT _runtime STREQUAL "" AND NOT _runtime STREQUAL "unknown")
        set(_link "${_lib}")
        break()
      endif()
    endforeach()
    if(_link)
      message(STATUS "coda: ${CMAKE_CXX_COMPILER} links the C++ runtime statically by default; libcoda.so "
              "links the shared one explicitly: ${_link} (${_runtime})")
    else()
      message(WARNING "coda: ${CMAKE_CXX_COMPILER} links the C++ runtime statically (-static-libstdc++ in the "
              "flags, LDFLAGS, the compiler's specs or a wrapper) and no shared libstdc++ linked in its place "
              "(tried: ${_candidates}). libcoda.so would carry a private copy of the runtime (kept local by "
              "src/libcoda.map, yet not the host process's); use a toolchain with a shared libstdc++. The "
              "test abi.exports fails until then.")
    endif()
  endif()
  set(CODA_CXX_RUNTIME_LINK "${_link}" CACHE INTERNAL "A shared C++ runtime libcoda.so links explicitly (empty: the default)")
  set(CODA_CXX_RUNTIME_KEY "${_key}" CACHE INTERNAL "Compiler and flags CODA_CXX_RUNTIME_LINK was probed with")
endfunction()

function(coda_link_cxx_runtime target)
  if(CODA_CXX_RUNTIME_LINK)
    target_link_libraries(${target} PRIVATE "${CODA_CXX_RUNTIME_LINK}")
  endif()
endfunction()
