#include "gpucore/batches/file_batches.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/ParallelGuard.h>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "gpucore/ranges.h"

namespace gpucore {

namespace {

// The size of the first readable image (the data set's size when none is given).
std::pair<int64_t, int64_t> first_image_size(const std::vector<std::string>& paths, const DecodeOptions& options,
                                             bool skip_errors) {
  std::string first_error;
  for (const std::string& path : paths) {
    try {
      const at::Tensor image = decode_image(path, options);
      return {image.size(0), image.size(1)};
    } catch (const MissingReaderError&) {
      throw;
    } catch (const ConfigError& e) {
      if (!skip_errors) throw;
      if (first_error.empty()) first_error = e.what();
    }
  }
  throw ConfigError("none of the " + std::to_string(paths.size()) + " image files could be read; the first: " +
                    first_error);
}

// An image file as the per-image transforms read it: the box they resize decoded alone (ImageFile).
class FileSource final : public PerImageSource {
 public:
  FileSource(const std::string& path, const DecodeOptions& options, DecodeScaling scaling)
      : file_(path, options), scaling_(scaling) {}
  std::array<int64_t, 2> size() override { return file_.size(); }
  at::Tensor whole() override {
    const auto [height, width] = file_.size();
    return file_.read({0, 0, height, width}, height, width, DecodeScaling::kExact);
  }
  at::Tensor read_box(const std::array<int64_t, 4>& box, int64_t least_height, int64_t least_width) override {
    return file_.read({box[0], box[1], box[2], box[3]}, least_height, least_width, scaling_);
  }

 private:
  ImageFile file_;
  DecodeScaling scaling_;
};

c10::Device with_index(const c10::Device& device) {
  if (!device.is_cuda() || device.has_index()) return device;
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice();
}

}  // namespace

FileBatches::FileBatches(std::vector<std::string> paths, const at::Tensor& targets, int64_t batch_size, bool shuffle,
                         bool drop_last, uint64_t seed, const at::Device& device, AugmentConfig augment,
                         FileBatchesConfig config, std::vector<std::string> mask_paths, std::vector<at::Tensor> images,
                         const at::Tensor& mask_table)
    : EpochBatches(static_cast<int64_t>(paths.size()), targets, batch_size, shuffle, drop_last, seed,
                   with_index(device), std::move(augment), "image files"),
      paths_(std::move(paths)), mask_paths_(std::move(mask_paths)), images_(std::move(images)), config_(config) {
  if (paths_.empty()) throw ConfigError("image files: the list of files is empty");
  if (!mask_paths_.empty() && mask_paths_.size() != paths_.size()) {
    throw ConfigError("segmentation files: " + std::to_string(paths_.size()) + " images but " +
                      std::to_string(mask_paths_.size()) + " masks");
  }
  if (mask_paths_.empty() && !targets.defined()) throw ConfigError("image files: the targets tensor is missing");
  if (!mask_paths_.empty()) {
    check_mask_table(mask_table);
    mask_table_ = mask_table.to(device_);
  }
  check_image_request(image_options(), config_.height, config_.width);
  if (config_.threads < 1) throw ConfigError("threads must be >= 1, got " + std::to_string(config_.threads));
  ranges::kPrefetch.require(config_.prefetch);
  if (!images_.empty() && images_.size() != paths_.size()) {
    throw ConfigError("image files: " + std::to_string(paths_.size()) + " paths but " +
                      std::to_string(images_.size()) + " decoded images");
  }
  for (const at::Tensor& image : images_) {
    if (image.dim() != 3 || image.size(2) != config_.channels || image.scalar_type() != at::kByte) {
      throw ConfigError("image files: decoded images must be uint8 H x W x " + std::to_string(config_.channels) +
                        ", got " + c10::str(image.sizes()));
    }
  }
  per_image_ = config_.own_sizes;
  if (per_image_ && (config_.height != 0 || config_.resize)) {
    throw ConfigError("image files: images at their own sizes take no size (got " + std::to_string(config_.height) +
                      "x" + std::to_string(config_.width) + ")");
  }
  if (per_image_ && pipeline().per_image_count() == 0) {
    throw ConfigError("image files: images at their own sizes need a transforms list that starts with "
                      "RandomResizedCrop (or Resize + CenterCrop), which brings each to one size; " +
                      mixed_sizes_hint());
  }
  if (per_image_ && !mask_paths_.empty()) {
    throw ConfigError("segmentation pairs need one image size: give the readers' size argument "
                      "(gpucore.data.read_segmentation(images, masks, size=(H, W)), which resizes the masks alike)");
  }
  if (per_image_) {
    std::tie(slot_height_, slot_width_) = std::pair(pipeline().per_image_size()[0], pipeline().per_image_size()[1]);
    set_image_size(0, 0);  // each image at its own size, through the per-image transforms
  } else {
    if (!images_.empty()) throw ConfigError("image files: decoded images are taken only at their own sizes (own_sizes)");
    if (config_.height == 0) {
      std::tie(config_.height, config_.width) = first_image_size(paths_, image_options(), config_.skip_errors);
    }
    slot_height_ = config_.height, slot_width_ = config_.width;
    set_image_size(config_.height, config_.width);
  }
  // Decoded images are uint8; the transform always scales them (and crops, flips, normalises as asked).
  augment_.enabled = true;
  const bool cuda = device_.is_cuda();
  const std::vector<int64_t> slot_shape = {longest_batch(), slot_height_, slot_width_, config_.channels};
  slots_.resize(static_cast<size_t>(config_.prefetch));
  const std::vector<int64_t> mask_shape = {longest_batch(), slot_height_, slot_width_};
  const bool masks = !mask_paths_.empty();
  for (Slot& slot : slots_) {
    slot.host = at::empty(slot_shape, at::TensorOptions().dtype(at::kByte).pinned_memory(cuda));
    if (masks) slot.host_masks = at::empty(mask_shape, at::TensorOptions().dtype(at::kByte).pinned_memory(cuda));
    if (cuda) {
      slot.device = at::empty(slot_shape, at::TensorOptions().dtype(at::kByte).device(device_));
      if (masks) slot.device_masks = at::empty(mask_shape, at::TensorOptions().dtype(at::kByte).device(device_));
      slot.copied.emplace(c10::DeviceType::CUDA);
      slot.consumed.emplace(c10::DeviceType::CUDA);
    }
  }
  if (cuda) copy_stream_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStreamFromGlobalPool(device_);
  start_epoch(0);
}

FileBatches::~FileBatches() {
  stop_readers();
  // No pinned buffer is freed while a copy from it may still run.
  for (Slot& slot : slots_) {
    if (slot.copied) slot.copied->synchronize();
  }
}

void FileBatches::stop_readers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  // A reader in the other formats' decoder (Pillow) may need the GIL this thread holds (a destructor run by Python)
  wait_for_decoders([this] {
    for (std::thread& reader : readers_) reader.join();
  });
  readers_.clear();
  stop_ = false;
}

void FileBatches::start_readers() {
  for (int64_t t = 0; t < config_.threads; ++t) {
    readers_.emplace_back([this] { read_images(); });
#ifdef __linux__
    pthread_setname_np(readers_.back().native_handle(), "gpucore-reader");  // as top -H, py-spy and gdb list it
    if (device_.is_cpu()) {
      // Training on the CPU, the step's threads use every core: a reader at normal priority takes a core from an
      // OpenMP region, which then waits for its slowest thread. As SCHED_IDLE the readers decode only in the time
      // the step leaves idle, and next() decodes what they have not (ResNet-18 at 224 px from JPEGs on 2 cores:
      // 87% -> 93% of the in-memory limit with a frozen backbone, camera photos 80% -> 85%; docs/benchmarks.md).
      // Where the policy cannot be set the readers keep the normal one: slower, the same batches.
      sched_param none{};
      pthread_setschedparam(readers_.back().native_handle(), SCHED_IDLE, &none);
    }
#endif
  }
}

void FileBatches::start_epoch(int64_t epoch, int64_t skip_batches) {
  stop_readers();
  for (Slot& slot : slots_) {
    if (slot.copied) slot.copied->synchronize();  // a host slot may be rewritten from now on
    slot.decoded = 0;
    slot.failed.clear();
  }
  EpochBatches::start_epoch(epoch, skip_batches);
  const int64_t batches = total_batches();
  end_sample_ = batches == 0 ? 0 : batch_end(batches - 1);
  next_sample_ = std::min(batch_begin(position_), end_sample_);
  released_ = position_;
  start_readers();
}

void FileBatches::read_images() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] {
      return stop_ || (next_sample_ < end_sample_ && batch_of(next_sample_) < released_ + config_.prefetch);
    });
    if (stop_) return;
    read_next_image(lock);
  }
}

void FileBatches::read_next_image(std::unique_lock<std::mutex>& lock) {
  const size_t image_bytes = static_cast<size_t>(slot_height_ * slot_width_ * config_.channels);
  const int64_t position = next_sample_++;
  const int64_t batch = batch_of(position), row = position - batch_begin(batch);
  Slot& slot = slots_[static_cast<size_t>(batch % config_.prefetch)];
  const int64_t sample = order_host_.data_ptr<int64_t>()[position];
  uint8_t* destination = slot.host.data_ptr<uint8_t>() + static_cast<size_t>(row) * image_bytes;
  uint8_t* mask_destination = mask_paths_.empty() ? nullptr
                                                  : slot.host_masks.data_ptr<uint8_t>() +
                                                        static_cast<size_t>(row) * config_.height * config_.width;
  lock.unlock();
  std::string path = paths_[static_cast<size_t>(sample)], error;
  try {  // an exception must not escape a thread (that would end the process)
    if (per_image_) {
      const c10::ParallelGuard serial(true);  // torch's kernels on this thread alone
      at::Tensor out;  // C x h x w
      if (images_.empty()) {
        FileSource source(path, image_options(), config_.decode);
        out = per_image_image(source, sample);
      } else {
        out = per_image_image(images_[sample], sample);
      }
      at::from_blob(destination, {slot_height_, slot_width_, config_.channels}, at::TensorOptions().dtype(at::kByte))
          .copy_(out.permute({1, 2, 0}));
    } else {
      error = decode_image_into(path, image_options(), config_.height, config_.width, config_.resize, destination);
      if (error.empty() && mask_destination != nullptr) {
        path = mask_paths_[static_cast<size_t>(sample)];
        error = decode_image_into(path, mask_options(), config_.height, config_.width, config_.resize,
                                  mask_destination);
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
    const std::string named = "image '" + path + "': ";  // decode_image's error names the file, as the row does
    if (error.rfind(named, 0) == 0) error.erase(0, named.size());
  }
  lock.lock();
  if (!error.empty()) slot.failed.push_back({row, sample, path, error});
  if (++slot.decoded == batch_end(batch) - batch_begin(batch)) batch_ready_.notify_all();
}

void FileBatches::release_slots(int64_t batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (released_ < batch) {
      Slot& slot = slots_[static_cast<size_t>(released_ % config_.prefetch)];
      if (slot.copied) {
        // The slot the next batch needs is waited for; the others only when their copies are done.
        if (released_ <= batch - config_.prefetch) {
          slot.copied->synchronize();
        } else if (!slot.copied->query()) {
          break;
        }
      }
      slot.decoded = 0;
      slot.failed.clear();
      ++released_;
    }
  }
  work_ready_.notify_all();
}

bool FileBatches::next(at::Tensor& inputs, at::Tensor& targets) {
  if (position_ >= total_batches()) return false;
  const int64_t batch = position_;
  release_slots(batch);
  Slot& slot = slots_[static_cast<size_t>(batch % config_.prefetch)];
  const int64_t rows = batch_end(batch) - batch_begin(batch);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (slot.decoded != rows) {
      // The images of this batch no reader has taken yet are decoded here: the training thread never sleeps while
      // its batch has work left, and a batch never waits on readers that get no core (a CPU busy with other work).
      if (next_sample_ < batch_end(batch)) {
        read_next_image(lock);
      } else {
        batch_ready_.wait(lock);
      }
    }
  }
  // The readers are done with this slot until it is released.
  at::Tensor images = slot.host.slice(0, 0, rows);
  at::Tensor masks = mask_paths_.empty() ? at::Tensor() : slot.host_masks.slice(0, 0, rows);
  at::Tensor index = next_index(batch);
  if (!slot.failed.empty()) {
    std::sort(slot.failed.begin(), slot.failed.end());
    if (!config_.skip_errors) {
      const FailedFile& first = slot.failed.front();
      throw ConfigError("image '" + first.path + "' (index " + std::to_string(first.sample) + "): " + first.why +
                        " (on_error: skip leaves unreadable files out)");
    }
    std::vector<int64_t> keep;
    {
      const std::lock_guard<std::mutex> lock(mutex_);  // skipped_ is read by skipped()
      size_t f = 0;
      for (int64_t row = 0; row < rows; ++row) {
        if (f < slot.failed.size() && slot.failed[f].row == row) {
          skipped_.insert(slot.failed[f].path + ": " + slot.failed[f].why);  // as the cached reader lists them
          ++f;
        } else {
          keep.push_back(row);
        }
      }
    }
    if (keep.empty()) {  // nothing readable in this batch: the next one
      ++position_;
      return next(inputs, targets);
    }
    const at::Tensor rows_kept = at::tensor(keep, at::TensorOptions().dtype(at::kLong));
    images = images.index_select(0, rows_kept);
    if (masks.defined()) masks = masks.index_select(0, rows_kept);
    index = index.index_select(0, rows_kept.to(device_));
  }
  if (device_.is_cuda()) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    const c10::Stream training = cuda.getStream(device_);
    at::Tensor on_device = slot.device.slice(0, 0, images.size(0));
    at::Tensor masks_on_device = masks.defined() ? slot.device_masks.slice(0, 0, masks.size(0)) : at::Tensor();
    {
      const c10::StreamGuard on_copy_stream(*copy_stream_);
      slot.consumed->block(*copy_stream_);  // the transform that last read this device slot
      on_device.copy_(images, /*non_blocking=*/true);
      if (masks.defined()) masks_on_device.copy_(masks, /*non_blocking=*/true);
      slot.copied->record(*copy_stream_);
    }
    slot.copied->block(training);
    finish_batch(on_device.permute({0, 3, 1, 2}), index, inputs, targets,
                 masks.defined() ? mask_classes(masks_on_device, mask_table_) : at::Tensor());
    slot.consumed->record(training);
  } else {
    finish_batch(images.permute({0, 3, 1, 2}), index, inputs, targets,
                 masks.defined() ? mask_classes(masks, mask_table_) : at::Tensor());
  }
  ++position_;
  return true;
}

std::vector<std::string> FileBatches::skipped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {skipped_.begin(), skipped_.end()};
}

}  // namespace gpucore
