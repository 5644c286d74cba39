// The NVRTC functions the engine calls, forwarded to libnvrtc loaded on first use (lazy_library.h): it is needed only
// to compile a kernel and to key the kernel cache. Each definition must match nvrtc.h's declaration (a mismatch does
// not compile).
#include <nvrtc.h>

#include "vision/cuda/lazy_library.h"

#define NVRTC(fn, ...) VISION_LAZY_CALL(nvrtc_library, fn, __VA_ARGS__)

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult result) { return NVRTC(nvrtcGetErrorString, result); }
nvrtcResult nvrtcVersion(int* major, int* minor) { return NVRTC(nvrtcVersion, major, minor); }

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                               const char* const* headers, const char* const* include_names) {
  return NVRTC(nvrtcCreateProgram, prog, src, name, num_headers, headers, include_names);
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) { return NVRTC(nvrtcDestroyProgram, prog); }
nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char* const name_expression) {
  return NVRTC(nvrtcAddNameExpression, prog, name_expression);
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
  return NVRTC(nvrtcCompileProgram, prog, num_options, options);
}
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  return NVRTC(nvrtcGetProgramLogSize, prog, size);
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) { return NVRTC(nvrtcGetProgramLog, prog, log); }
nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char* const name_expression, const char** lowered_name) {
  return NVRTC(nvrtcGetLoweredName, prog, name_expression, lowered_name);
}
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) { return NVRTC(nvrtcGetPTXSize, prog, size); }
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) { return NVRTC(nvrtcGetPTX, prog, ptx); }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) { return NVRTC(nvrtcGetCUBINSize, prog, size); }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) { return NVRTC(nvrtcGetCUBIN, prog, cubin); }

}  // extern "C"
