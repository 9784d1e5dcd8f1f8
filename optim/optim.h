// Everything in ember::optim: include this one header.
#pragma once

#include "optim/adam.h"
#include "optim/grad_clip.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedulers.h"
#include "optim/sgd.h"
