# Finds Debian's Python 3 (interpreter + development files) and pybind11 for the Python package.
# Sets NEUROMKL_PYTHON_FOUND. The interpreter defaults to /usr/bin/python3, the one Debian's
# python3-numpy / python3-sklearn / python3-pytest are installed for (a pyenv or conda python
# earlier on PATH would not see them); override with -DPython3_EXECUTABLE=...
set(NEUROMKL_PYTHON_FOUND OFF)
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python interpreter for the neuromkl package")
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
if(Python3_FOUND)
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 CONFIG)
endif()
if(Python3_FOUND AND pybind11_FOUND)
  set(NEUROMKL_PYTHON_FOUND ON)
  message(STATUS "neuromkl: Python package enabled (Python ${Python3_VERSION} at ${Python3_EXECUTABLE}, pybind11 ${pybind11_VERSION})")
else()
  message(STATUS "neuromkl: Python package disabled (needs Debian's python3-dev and pybind11-dev)")
endif()
