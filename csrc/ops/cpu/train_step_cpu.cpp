// CPU kernels of the train-step ops: plain loops, the metrics parallel over samples.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>

#include "ops/train_step/train_step.h"

namespace gpucore::ops {
namespace {

struct Hits {
  int64_t correct = 0, top_k = 0, counted = 0;
};

template <typename T>
Hits count_hits(const at::Tensor& output, const at::Tensor& target, int64_t top_k, int64_t ignore_index) {
  // output (N, C, S...) read as N x C x S, targets as N x S.
  const int64_t n = output.size(0), classes = output.size(1), spatial = target.numel() / std::max<int64_t>(n, 1);
  const T* out = output.data_ptr<T>();
  const int64_t* t = target.data_ptr<int64_t>();
  const int64_t limit = std::max<int64_t>(top_k, 1);
  return at::parallel_reduce(
      0, n * spatial, 256, Hits{},
      [&](int64_t begin, int64_t end, Hits hits) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t label = t[row];
          if (label == ignore_index) continue;
          ++hits.counted;
          if (label < 0 || label >= classes) continue;
          const T* values = out + (row / spatial) * classes * spatial + row % spatial;
          const auto value = [&](int64_t j) { return static_cast<double>(values[j * spatial]); };
          const int64_t beaten = classes_beating(value, classes, label, limit);
          hits.correct += beaten == 0;
          hits.top_k += beaten < top_k;
        }
        return hits;
      },
      [](Hits a, Hits b) { return Hits{a.correct + b.correct, a.top_k + b.top_k, a.counted + b.counted}; });
}

void accumulate_metrics_cpu(const at::Tensor& sums, const at::Tensor& output, const std::optional<at::Tensor>& target,
                            const at::Tensor& loss, int64_t top_k, int64_t ignore_index) {
  check_metrics_inputs(sums, output, target, loss, top_k);
  double* s = sums.data_ptr<double>();
  const float loss_value = loss.contiguous().data_ptr<float>()[0];
  if (!target) {
    add_loss(s, loss_value, static_cast<double>(output.size(0)));
    return;
  }
  const at::Tensor out = output.contiguous(), labels = target->to(at::kLong).contiguous();
  Hits hits;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "accumulate_metrics_cpu",
                                  [&] { hits = count_hits<scalar_t>(out, labels, top_k, ignore_index); });
  add_loss(s, loss_value, static_cast<double>(hits.counted));
  s[2] += static_cast<double>(hits.correct);
  if (top_k > 0) s[3] += static_cast<double>(hits.top_k);
  s[4] += static_cast<double>(hits.counted);
}

void count_step_cpu(const at::Tensor& counters, const at::Tensor& found_inf) {
  check_count_step_inputs(counters, found_inf);
  float* c = counters.data_ptr<float>();
  float* skipped = found_inf.data_ptr<float>();
  const float f = *skipped;
  c[0] = c[0] + 1.0f - f;
  c[1] = c[1] + f;
  c[2] = (c[2] + 1.0f) * f;
  *skipped = 0.0f;
}

void learning_rate_cpu(const at::Tensor& step, const at::Tensor& lr, const at::Tensor& schedule) {
  const ScheduleParams params = schedule_params(step, lr, schedule);
  const double count = step.to(at::kDouble).contiguous().data_ptr<double>()[0];
  lr.data_ptr<float>()[0] = static_cast<float>(scheduled_lr(params, count));
}

}  // namespace

TORCH_LIBRARY_IMPL(gpucore, CPU, m) {
  m.impl("accumulate_metrics", &accumulate_metrics_cpu);
  m.impl("count_step", &count_step_cpu);
  m.impl("learning_rate", &learning_rate_cpu);
}

}  // namespace gpucore::ops
