#include "ops/cpu/batch_memory.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/accumulate.h>

#include <deque>
#include <iterator>
#include <mutex>

namespace gpucore::ops {
namespace {

constexpr size_t kReusedBytes = size_t{16} << 20;  // smaller blocks malloc reuses by itself
constexpr size_t kKeptBuffers = 4;                 // a batch's few large outputs, each size kept once or twice

struct Buffer {
  void* data;
  size_t bytes;
};

class BufferPool {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {  // the most recently freed first: warm in cache
        if (it->bytes == bytes) {
          void* data = it->data;
          free_.erase(std::next(it).base());
          return data;
        }
      }
    }
    return c10::alloc_cpu(bytes);
  }

  void give_back(const Buffer& buffer) {
    void* evicted = nullptr;  // the oldest kept buffer once more than kKeptBuffers are free
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(buffer);
      if (free_.size() > kKeptBuffers) {
        evicted = free_.front().data;
        free_.pop_front();
      }
    }
    if (evicted != nullptr) c10::free_cpu(evicted);
  }

 private:
  std::mutex mutex_;
  std::deque<Buffer> free_;
};

// Never destroyed: a tensor may outlive static destruction at exit and still return its buffer.
BufferPool& pool() {
  static auto* buffers = new BufferPool();
  return *buffers;
}

void return_to_pool(void* context) {
  const auto* buffer = static_cast<Buffer*>(context);
  pool().give_back(*buffer);
  delete buffer;
}

}  // namespace

at::Tensor empty_batch(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t bytes = c10::multiply_integers(sizes) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (bytes < kReusedBytes || options.device().type() != at::kCPU) return at::empty(sizes, options);
  auto* buffer = new Buffer{pool().take(bytes), bytes};
  return at::for_blob(buffer->data, sizes).context(buffer, &return_to_pool).options(options).make_tensor();
}

at::Tensor copy_batch(const at::Tensor& images) {
  at::Tensor copy = empty_batch(images.sizes(), images.options());
  copy.copy_(images);
  return copy;
}

}  // namespace gpucore::ops
