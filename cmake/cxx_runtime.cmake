# Does the C++ compiler link its runtime (libstdc++ / libc++) as a shared library?
#
# libcoda.so must take the C++ runtime from the shared library: a private, statically linked copy
# inside a library that a host process loads next to its own (PyTorch brings one) is what crashed
# issue 10. Nothing in this project asks for a static runtime, but a toolchain can: -static-libstdc++
# in CXXFLAGS/LDFLAGS or in the compiler's specs, or a toolchain that ships only libstdc++.a. This
# probe links a small program the way the toolchain links by default and reads its NEEDED entries,
# so such a toolchain is named at configure time (tests/abi's abi.exports then fails until it is
# fixed) instead of after a full build.
function(coda_check_cxx_runtime)
  set(_key "${CMAKE_CXX_COMPILER}|${CMAKE_CXX_FLAGS}|${CMAKE_SHARED_LINKER_FLAGS}")
  if(DEFINED CACHE{CODA_CXX_RUNTIME_NEEDED} AND CODA_CXX_RUNTIME_KEY STREQUAL _key)
    return()
  endif()
  set(_dir ${CMAKE_BINARY_DIR}/CMakeFiles/coda_cxx_runtime)
  file(WRITE ${_dir}/probe.cpp "#include <iostream>\nint main(int argc, char**) { std::cout << argc; }\n")
  separate_arguments(_link_flags NATIVE_COMMAND "${CMAKE_SHARED_LINKER_FLAGS}")  # what libcoda.so links with
  try_compile(_linked ${_dir}/build SOURCES ${_dir}/probe.cpp LINK_OPTIONS ${_link_flags}
              COPY_FILE ${_dir}/probe OUTPUT_VARIABLE _log)
  set(_runtime "")
  if(_linked AND CMAKE_READELF)
    execute_process(COMMAND ${CMAKE_READELF} -d ${_dir}/probe OUTPUT_VARIABLE _dynamic ERROR_QUIET)
    string(REGEX MATCH "\\[(lib(stdc|c)\\+\\+\\.so[^]]*)\\]" _m "${_dynamic}")
    set(_runtime "${CMAKE_MATCH_1}")
  endif()
  set(CODA_CXX_RUNTIME_NEEDED "${_runtime}" CACHE INTERNAL "The shared C++ runtime a linked program needs")
  set(CODA_CXX_RUNTIME_KEY "${_key}" CACHE INTERNAL "Compiler and flags CODA_CXX_RUNTIME_NEEDED was probed with")
  if(NOT _linked OR NOT CMAKE_READELF)
    message(STATUS "coda: could not probe how ${CMAKE_CXX_COMPILER} links the C++ runtime")
  elseif(_runtime STREQUAL "")
    message(WARNING "coda: ${CMAKE_CXX_COMPILER} links the C++ runtime statically (a program it links "
            "needs no libstdc++.so / libc++.so): -static-libstdc++ in the flags, LDFLAGS or the compiler's "
            "specs, or a toolchain without a shared libstdc++. libcoda.so would carry a private copy of the "
            "runtime (kept local by src/libcoda.map, yet not the host process's); use a toolchain that links "
            "it dynamically. The test abi.exports fails until then.")
  else()
    message(STATUS "coda: C++ runtime linked dynamically (${_runtime})")
  endif()
endfunction()
