# Which Python the module is built for. FindPython3 takes the first python3 on PATH, which may be a shim or a
# virtual environment without NumPy (a pyenv shim on the CI machine); the module needs NumPy at run time and its tests
# need pytest. So, unless -DPython3_EXECUTABLE names one, the first interpreter on PATH that imports them is taken,
# then Debian's /usr/bin/python3 (where python3-numpy and python3-pytest install).
if(NOT Python3_EXECUTABLE)
  set(vision_python_needs "numpy")
  if(VISION_TESTS)
    set(vision_python_needs "numpy, pytest")
  endif()
  string(REPLACE ":" ";" vision_path_dirs "$ENV{PATH}")
  set(vision_python_candidates "")
  foreach(dir IN LISTS vision_path_dirs)
    if(dir AND EXISTS "${dir}/python3")
      list(APPEND vision_python_candidates "${dir}/python3")
    endif()
  endforeach()
  list(APPEND vision_python_candidates /usr/bin/python3)
  foreach(candidate IN LISTS vision_python_candidates)
    execute_process(COMMAND "${candidate}" -c "import ${vision_python_needs}" RESULT_VARIABLE vision_python_lacks
                    OUTPUT_QUIET ERROR_QUIET)
    if(vision_python_lacks EQUAL 0)
      set(Python3_EXECUTABLE "${candidate}" CACHE FILEPATH "The Python the module is built for")
      message(STATUS "Python module: ${candidate} (it imports ${vision_python_needs})")
      break()
    endif()
  endforeach()
endif()
