// Everything a user of vkattn needs.
#pragma once

#include "vkattn/attention.hpp"
#include "vkattn/batch.hpp"
#include "vkattn/context.hpp"
#include "vkattn/device_tensor.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/kv_cache.hpp"
#include "vkattn/mha.hpp"
#include "vkattn/mha_layer.hpp"
#include "vkattn/multi_device.hpp"
#include "vkattn/paged_kv_cache.hpp"
#include "vkattn/plan.hpp"
#include "vkattn/quantize.hpp"
#include "vkattn/reference.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/tune.hpp"
#include "vkattn/variants.hpp"
