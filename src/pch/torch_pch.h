// Precompiled header: the libtorch headers shared by every torch-using library.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>
