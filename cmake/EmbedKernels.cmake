# vision_embed_kernels(target dir): embeds every .cuh under dir, and the few CUDA toolkit headers the kernels include, into
# the target as text. A build step (a `cmake -P` script, re-run whenever one of those files changes) writes
# generated/vision/cuda/embedded_kernels.cpp, which defines the lookups declared in vision/cuda/embedded.h.

# Toolkit headers handed to NVRTC as named headers (NVRTC 13 has no built-in cuda_fp16.h / cuda_bf16.h). Under NVRTC
# these include only each other, so the set is closed.
set(VISION_EMBEDDED_TOOLKIT_HEADERS cuda_fp16.h cuda_fp16.hpp cuda_bf16.h cuda_bf16.hpp)
set(VISION_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/EmbedKernelsScript.cmake)

function(vision_embed_kernels target dir)
  get_filename_component(root "${dir}/.." ABSOLUTE)  # kernel paths are spelled like includes: "vision/ops/kernels/x.cuh"
  file(GLOB_RECURSE cuh_files CONFIGURE_DEPENDS "${dir}/*.cuh")
  list(SORT cuh_files)

  set(toolkit_files "")
  foreach(name IN LISTS VISION_EMBEDDED_TOOLKIT_HEADERS)
    unset(found)
    find_file(found NAMES ${name} PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH NO_CACHE)
    if(NOT found)
      message(FATAL_ERROR "vision_embed_kernels: ${name} not found in the CUDA toolkit (${CUDAToolkit_INCLUDE_DIRS})")
    endif()
    list(APPEND toolkit_files "${found}")
  endforeach()

  set(out "${CMAKE_CURRENT_BINARY_DIR}/generated/vision/cuda/embedded_kernels.cpp")
  # Lists travel to the script through a file: a command line would split them at the semicolons.
  set(manifest "${CMAKE_CURRENT_BINARY_DIR}/generated/vision/cuda/embedded_kernels.manifest.cmake")
  file(CONFIGURE OUTPUT "${manifest}" CONTENT [=[
set(EMBED_ROOT "@root@")
set(EMBED_KERNELS "@cuh_files@")
set(EMBED_TOOLKIT "@toolkit_files@")
]=] @ONLY)
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DMANIFEST=${manifest} -DOUTPUT=${out} -P ${VISION_EMBED_SCRIPT}
    DEPENDS ${cuh_files} ${toolkit_files} "${manifest}" ${VISION_EMBED_SCRIPT}
    COMMENT "Embedding CUDA kernel sources"
    VERBATIM)
  target_sources(${target} PRIVATE "${out}")
endfunction()
