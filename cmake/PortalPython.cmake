# The interpreters Portal is built for.
#
# PORTAL_PYTHON is the build's own interpreter: it runs the build's generators and
# the tests, and is the one portal-run defaults to.  It is pinned to Debian's
# /usr/bin/python3: the python3 first on PATH may be another build (pyenv, a venv)
# without torch or with another ABI.  Override with -DPORTAL_PYTHON=/path/to/python3.X
# only deliberately.
#
# The native modules (_portal._frames, _portal._toplevel) depend on the CPython
# version's internals; they are built once per interpreter in PORTAL_PYTHONS, each
# with that interpreter's SOABI suffix, side by side in the same _portal directory
# (_frames.cpython-311-x86_64-linux-gnu.so beside _frames.cpython-313-...so): each
# interpreter imports its own.  By default PORTAL_PYTHONS is PORTAL_PYTHON plus every
# python3.X of PORTAL_SUPPORTED_PYTHONS found beside it (with its headers);
# -DPORTAL_PYTHONS="/usr/bin/python3.11;/opt/py/bin/python3.13" lists them
# explicitly.  The C++ parts (supervisor, CLI) do not depend on the Python version.

# The CPython versions whose frame layout src/native/frame_access.c has been checked
# against (the one list; a version added here needs its frame_access_3XX.c).
set(PORTAL_SUPPORTED_PYTHONS 3.11 3.12 3.13 3.14)

set(PORTAL_PYTHON "/usr/bin/python3" CACHE FILEPATH "Interpreter Portal runs programs with")
set(PORTAL_PYTHONS "" CACHE STRING
    "Interpreters to build the native modules for (a ;-list); empty: PORTAL_PYTHON and the supported python3.X beside it")
set(Python_EXECUTABLE "${PORTAL_PYTHON}")
set(Python_FIND_STRATEGY LOCATION)
set(Python_FIND_VIRTUALENV STANDARD)
set(Python_FIND_UNVERSIONED_NAMES NEVER)
find_package(Python 3 REQUIRED COMPONENTS Interpreter Development.Module)
string(JOIN ", " _portal_supported_text ${PORTAL_SUPPORTED_PYTHONS})
if(NOT "${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}" IN_LIST PORTAL_SUPPORTED_PYTHONS)
  message(FATAL_ERROR "portal: python: ${Python_EXECUTABLE} is ${Python_VERSION}; "
                      "supported: ${_portal_supported_text} (choose one with -DPORTAL_PYTHON=)")
endif()
# pybind11's own CMake config must agree with the interpreter chosen above.
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 CONFIG REQUIRED)
message(STATUS "portal: python ${Python_VERSION} at ${Python_EXECUTABLE}, headers ${Python_INCLUDE_DIRS}")

# What the native build needs to know of one interpreter, asked of the interpreter
# itself: <prefix>_VERSION (3.X), <prefix>_INCLUDE (the directory of Python.h) and
# <prefix>_SUFFIX (its EXT_SUFFIX, .cpython-3X-<triplet>.so).  <prefix>_OK is FALSE
# with <prefix>_WHY when it cannot be built for.
function(portal_python_query interpreter prefix)
  execute_process(
    COMMAND "${interpreter}" -I -c
            "import sys, sysconfig; print('%d.%d' % sys.version_info[:2]); print(sysconfig.get_path('include')); print(sysconfig.get_config_var('EXT_SUFFIX'))"
    OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(${prefix}_OK FALSE PARENT_SCOPE)
  if(NOT _rc EQUAL 0)
    set(${prefix}_WHY "it does not run" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" _lines "${_out}")
  list(GET _lines 0 _version)
  list(GET _lines 1 _include)
  list(GET _lines 2 _suffix)
  set(${prefix}_VERSION "${_version}" PARENT_SCOPE)
  set(${prefix}_INCLUDE "${_include}" PARENT_SCOPE)
  set(${prefix}_SUFFIX "${_suffix}" PARENT_SCOPE)
  if(NOT _version IN_LIST PORTAL_SUPPORTED_PYTHONS)
    set(${prefix}_WHY "it is ${_version}; supported: ${_portal_supported_text}" PARENT_SCOPE)
  elseif(NOT EXISTS "${_include}/Python.h" OR NOT EXISTS "${_include}/internal/pycore_frame.h")
    set(${prefix}_WHY "its headers are missing (${_include}/Python.h, internal/; Debian: python${_version}-dev)"
        PARENT_SCOPE)
  else()
    set(${prefix}_OK TRUE PARENT_SCOPE)
  endif()
endfunction()

# PORTAL_NATIVE_PYTHONS: the interpreters the native modules are built for, the
# build's own first; PORTAL_NATIVE_<i>_{VERSION,INCLUDE,SUFFIX} for each.
set(_portal_candidates)
set(_portal_explicit FALSE)
if(PORTAL_PYTHONS)
  set(_portal_explicit TRUE)
  set(_portal_candidates ${PORTAL_PYTHONS})
else()
  get_filename_component(_portal_bindir "${Python_EXECUTABLE}" DIRECTORY)
  foreach(_v IN LISTS PORTAL_SUPPORTED_PYTHONS)
    if(EXISTS "${_portal_bindir}/python${_v}")
      list(APPEND _portal_candidates "${_portal_bindir}/python${_v}")
    endif()
  endforeach()
endif()
set(PORTAL_NATIVE_PYTHONS "${Python_EXECUTABLE}")
set(_portal_suffixes "${Python_SOABI}")
foreach(_candidate IN LISTS _portal_candidates)
  portal_python_query("${_candidate}" _q)
  if(NOT _q_OK)
    if(_portal_explicit)
      message(FATAL_ERROR "portal: python: cannot build for ${_candidate}: ${_q_WHY}")
    endif()
    message(STATUS "portal: python: not building for ${_candidate}: ${_q_WHY}")
    continue()
  endif()
  # The same interpreter twice (python3 and python3.11 beside it): built once.
  if(_q_SUFFIX MATCHES "^\\.(.*)\\.so$")
    set(_soabi "${CMAKE_MATCH_1}")
  else()
    set(_soabi "${_q_SUFFIX}")
  endif()
  if(_soabi IN_LIST _portal_suffixes)
    continue()
  endif()
  list(APPEND _portal_suffixes "${_soabi}")
  list(APPEND PORTAL_NATIVE_PYTHONS "${_candidate}")
  list(LENGTH PORTAL_NATIVE_PYTHONS _n)
  math(EXPR _i "${_n} - 1")
  set(PORTAL_NATIVE_${_i}_VERSION "${_q_VERSION}")
  set(PORTAL_NATIVE_${_i}_INCLUDE "${_q_INCLUDE}")
  set(PORTAL_NATIVE_${_i}_SUFFIX "${_q_SUFFIX}")
  message(STATUS "portal: python ${_q_VERSION} at ${_candidate}: native modules too (${_q_SUFFIX})")
endforeach()

# portal_native_module(<target> <output name> <sources>... [OUTPUT_DIRECTORY <dir>]
#                      [NO_INSTALL]): the extension module _portal.<output name> (in
# <dir> instead: a test's module, with NO_INSTALL) for each interpreter of
# PORTAL_NATIVE_PYTHONS.  The build's own interpreter's is <target>
# (Python_add_library, as always); another's is <target>_<3XX>, compiled against
# that interpreter's headers with its suffix.  Extension modules do not link
# libpython: its symbols come from the interpreter that loads them.
function(portal_native_module target output)
  cmake_parse_arguments(PARSE_ARGV 2 _arg "NO_INSTALL" "OUTPUT_DIRECTORY" "")
  set(_sources ${_arg_UNPARSED_ARGUMENTS})
  set(_outdir ${PORTAL_STAGE_PYDIR}/_portal)
  if(_arg_OUTPUT_DIRECTORY)
    set(_outdir ${_arg_OUTPUT_DIRECTORY})
  endif()
  Python_add_library(${target} MODULE WITH_SOABI ${_sources})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${output}
    LIBRARY_OUTPUT_DIRECTORY ${_outdir})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  set(_targets ${target})
  list(LENGTH PORTAL_NATIVE_PYTHONS _n)
  math(EXPR _last "${_n} - 1")
  if(_last GREATER 0)
    foreach(_i RANGE 1 ${_last})
      string(REPLACE "." "" _tag "${PORTAL_NATIVE_${_i}_VERSION}")
      set(_t ${target}_${_tag})
      add_library(${_t} MODULE ${_sources})
      set_target_properties(${_t} PROPERTIES
        PREFIX ""
        OUTPUT_NAME ${output}
        SUFFIX "${PORTAL_NATIVE_${_i}_SUFFIX}"
        LIBRARY_OUTPUT_DIRECTORY ${_outdir})
      target_include_directories(${_t} PRIVATE ${PROJECT_SOURCE_DIR}/include "${PORTAL_NATIVE_${_i}_INCLUDE}")
      target_compile_options(${_t} PRIVATE -Wall -Wextra)
      list(APPEND _targets ${_t})
    endforeach()
  endif()
  if(NOT _arg_NO_INSTALL)
    install(TARGETS ${_targets} LIBRARY DESTINATION ${PORTAL_INSTALL_PYDIR}/_portal)
  endif()
endfunction()
