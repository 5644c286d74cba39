# FFmpeg's libraries for video input and output (Debian libavformat-dev, libavcodec-dev, libswscale-dev,
# libavutil-dev; libavdevice-dev for cameras), found by header and library as the image libraries are. Used by the
# main project and by the fuzz targets' project (tests/fuzz).
#   vision_find_video(<target> [REQUIRED])
# creates the INTERFACE IMPORTED target <target> (their include folders and libraries) and sets <target>_FOUND in the
# caller's scope. Without REQUIRED a missing library leaves <target>_FOUND false; with it, it is a configure error
# naming the packages.
function(vision_find_video target)
  cmake_parse_arguments(arg "REQUIRED" "" "" ${ARGN})
  set(includes "")
  set(libraries "")
  foreach(lib IN ITEMS "avformat;libavformat/avformat.h" "avcodec;libavcodec/avcodec.h" "swscale;libswscale/swscale.h"
                       "avutil;libavutil/avutil.h" "avdevice;libavdevice/avdevice.h")
    list(GET lib 0 name)
    list(GET lib 1 header)
    string(TOUPPER ${name} var)
    find_path(${var}_INCLUDE_DIR ${header})
    find_library(${var}_LIBRARY ${name})
    if(NOT ${var}_INCLUDE_DIR OR NOT ${var}_LIBRARY)
      if(arg_REQUIRED)
        message(FATAL_ERROR "lib${name} not found (${header} and the library): install the Debian packages "
                            "libavformat-dev, libavcodec-dev, libswscale-dev, libavutil-dev and libavdevice-dev "
                            "(tools/install-deps.sh), or configure with -DVISION_VIDEO=OFF (no video input or output)")
      endif()
      message(STATUS "lib${name} not found (${header} and the library): no video")
      set(${target}_FOUND FALSE PARENT_SCOPE)
      return()
    endif()
    list(APPEND includes ${${var}_INCLUDE_DIR})
    list(APPEND libraries ${${var}_LIBRARY})
  endforeach()
  list(REMOVE_DUPLICATES includes)
  add_library(${target} INTERFACE IMPORTED)
  target_include_directories(${target} INTERFACE ${includes})
  target_link_libraries(${target} INTERFACE ${libraries})
  set(${target}_FOUND TRUE PARENT_SCOPE)
endfunction()
