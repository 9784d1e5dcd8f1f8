// Everything you can do with tensors: include this one header.
#pragma once

#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/indexing.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/normalization.h"
#include "runtime/ops/reduce.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
