// Everything a user of vkattn needs.
#pragma once

#include "vkattn/attention.hpp"
#include "vkattn/context.hpp"
#include "vkattn/errors.hpp"
#include "vkattn/mha.hpp"
#include "vkattn/reference.hpp"
#include "vkattn/tensor.hpp"
