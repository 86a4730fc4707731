// BatchNorm, an optional residual add and ReLU as one autograd function on the CPU: a ResNet
// block's tail, relu(bn(x) + residual). Training takes two passes over the activations forward
// (the statistics, then normalise, add and clamp) and two backward, where libtorch's ops take
// five forward (mean, variance, normalise, add, clamp) and three backward (the ReLU mask, the
// BatchNorm reduction and its input gradient), each writing a tensor of its own.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/batchnorm.h>

namespace cadre {

// relu(batch_norm(x) + residual) (residual may be undefined: no add). With `training`, x is
// normalised by its own batch statistics and running_mean / running_var (either may be
// undefined) move towards them by `momentum`, the variance unbiased, as at::batch_norm does;
// otherwise by the running statistics. Differentiable in x, weight, bias and residual. Runs fused
// for training on float32 CPU tensors in channels-last memory format (x [N, C, H, W] stored as
// [N, H, W, C]) with a weight and a bias; everything else takes libtorch's ops.
at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& residual, const at::Tensor& running_mean, const at::Tensor& running_var,
                           bool training, double momentum, double eps);

// The same through a BatchNorm2d module's parameters, buffers and options, counting the batch in
// num_batches_tracked and choosing the momentum as the module's own forward does.
at::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual = {});

// The same through libtorch's ops (the reference the fused kernel is tested against).
at::Tensor batch_norm_relu_composite(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& residual, const at::Tensor& running_mean,
                                     const at::Tensor& running_var, bool training, double momentum, double eps);

}  // namespace cadre
