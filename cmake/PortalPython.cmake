# Pin FindPython to Debian's /usr/bin/python3 and its libpython3.11.
#
# The python3 first on PATH may be another build (pyenv, a venv) without torch or
# with another ABI; Portal must build and run against the interpreter the product
# supports.  Override with -DPORTAL_PYTHON=/path/to/python3.11 only deliberately.
set(PORTAL_PYTHON "/usr/bin/python3" CACHE FILEPATH "Interpreter Portal runs programs with")
set(Python_EXECUTABLE "${PORTAL_PYTHON}")
set(Python_FIND_STRATEGY LOCATION)
set(Python_FIND_VIRTUALENV STANDARD)
set(Python_FIND_UNVERSIONED_NAMES NEVER)
find_package(Python 3.11 EXACT REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT Python_VERSION_MAJOR EQUAL 3 OR NOT Python_VERSION_MINOR EQUAL 11)
  message(FATAL_ERROR "portal: python: ${Python_EXECUTABLE} is ${Python_VERSION}; only 3.11 is supported")
endif()
# pybind11's own CMake config must agree with the interpreter chosen above.
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 CONFIG REQUIRED)
message(STATUS "portal: python ${Python_VERSION} at ${Python_EXECUTABLE}, headers ${Python_INCLUDE_DIRS}")
