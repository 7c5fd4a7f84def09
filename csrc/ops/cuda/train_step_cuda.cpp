// CUDA side of the train-step ops: checks, contiguous inputs, device guard and stream, then the kernels.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "ops/cuda/train_step_kernels.h"
#include "ops/cuda/kernel_launch_check.h"
#include "ops/train_step/train_step.h"

namespace gpucore::ops {
namespace {

void accumulate_metrics_cuda(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                             const at::Tensor& loss, int64_t top_k, int64_t ignore_index) {
  check_metrics_inputs(sums, output, target, loss, top_k);
  const c10::cuda::CUDAGuard guard(sums.device());
  const cuda::KernelDtype type =
      kernel_dtype(output.scalar_type(), cuda::MetricsOutputDtypes::values, "accumulate_metrics", "output");
  const at::Tensor out = output.contiguous(), loss_value = loss.contiguous();
  const at::Tensor labels = target ? target->to(at::kLong).contiguous() : at::Tensor();
  // The batch's count of targets, between the kernels (uint64 travels as int64's bytes).
  const at::Tensor counted = target ? at::zeros({1}, sums.options().dtype(at::kLong)) : at::Tensor();
  const int64_t n = out.size(0);
  const int64_t classes = target ? out.size(1) : 0;
  const int64_t spatial = target && n > 0 ? labels.numel() / n : 0;
  cuda::launch_accumulate_metrics(sums.data_ptr<double>(), loss_value.data_ptr<float>(), out.data_ptr(), type,
                                  target ? labels.data_ptr<int64_t>() : nullptr, n, classes, spatial, top_k,
                                  ignore_index,
                                  target ? reinterpret_cast<unsigned long long*>(counted.data_ptr<int64_t>()) : nullptr,
                                  c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::accumulate_metrics");
}

void count_step_cuda(const at::Tensor& counters, const at::Tensor& found_inf) {
  check_count_step_inputs(counters, found_inf);
  const c10::cuda::CUDAGuard guard(counters.device());
  cuda::launch_count_step(counters.data_ptr<float>(), found_inf.data_ptr<float>(),
                          c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::count_step");
}

void learning_rate_cuda(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule) {
  const ScheduleParams params = schedule_params(step, lr, schedule);
  const c10::cuda::CUDAGuard guard(lr.device());
  const at::Tensor count = step.to(at::kFloat).contiguous();
  cuda::launch_learning_rate(count.data_ptr<float>(), lr.data_ptr<float>(), params,
                             c10::cuda::getCurrentCUDAStream().stream());
  check_kernel_launch("gpucore::learning_rate");
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CUDA, m) {
  m.impl("accumulate_metrics", &accumulate_metrics_cuda);
  m.impl("count_step", &count_step_cuda);
  m.impl("learning_rate", &learning_rate_cuda);
}

}  // namespace gpucore::ops
