// Everything you can do with tensors: include this one header.
#pragma once

#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
