// Kernel lookup by value: a shader variant's name and its specialization constants, built in one
// place per shader with a named constant per field.
#pragma once

#include "attention/tuning.hpp"
#include "vk/pipeline.hpp"

namespace vkattn::detail {

class Runtime;

// bmm.comp: A and B dtypes (the SSBO variants' storage), C dtype; `bias` adds an fp32 bias per
// column of C (binding 4, which every variant declares: bind a placeholder without one).
const vk::Kernel& bmm_kernel(Runtime& runtime, const BmmConfig& config, bool b_transposed, DType a, DType b,
                             DType c, bool bias = false);
const vk::Kernel& softmax_kernel(Runtime& runtime, const SoftmaxConfig& config);
// flash.comp; `split` writes fp32 partials for combine.comp.
const vk::Kernel& flash_kernel(Runtime& runtime, const FusedConfig& config, DType dtype, bool split);
const vk::Kernel& combine_kernel(Runtime& runtime, DType dtype);

}  // namespace vkattn::detail
