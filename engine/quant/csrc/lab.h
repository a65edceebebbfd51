// The lab's products, for the other files of the library (layer.cpp's decode_layer calls
// them directly, not through the dispatcher); matvec.cpp defines them and says what they do.

#pragma once

#include <ATen/core/Tensor.h>

namespace lab {

// x [m, K] bfloat16 @ int8 w [N, K / 32, 32] (scales s [N], bfloat16 or float32)
at::Tensor int8_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& s);
// x [m, K] bfloat16 @ int4 w [N, K / 64, 32] (scales and zeros sz [N, 2, K / 32])
at::Tensor int4_mm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz);

}  // namespace lab
