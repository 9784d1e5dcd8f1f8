// Everything in nn/: include this one header.
#pragma once

#include "nn/attention.h"
#include "nn/containers.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/models.h"
#include "nn/module.h"
