// Small host helpers shared by the loss ops' CPU runtimes and launchers.
#pragma once

#include <cstring>
#include <string>

#include "vision/core/tensor.h"

namespace vision::models::yolo::kernels::loss {

// t.str(), or "an undefined tensor" (for error messages about optional tensors).
inline std::string tensor_str(const core::Tensor& t) {
  return t.defined() ? t.str() : std::string("an undefined tensor");
}

// Zeroes a host tensor when it is defined.
inline void zero_if_defined(const core::Tensor& t) {
  if (t.defined()) std::memset(t.raw(), 0, t.nbytes());
}

}  // namespace vision::models::yolo::kernels::loss
