#pragma once
// FileBatches: image files decoded while training runs, for data sets that do not fit in memory.
//
// Reader threads (C++ threads, no processes) decode the images of the next `prefetch` batches straight
// into the slots of a ring of host buffers (pinned when training on CUDA). next() takes the oldest
// slot, copies it on a side CUDA stream into the slot's device buffer, makes the training stream wait
// for that copy with an event, and runs the fused transform there. A host slot is refilled only after
// its copy finished (an event), a device slot only after the transform that read it finished (another
// event). On the CPU the transform reads the host slot directly. Order and augmentation are those of
// every EpochBatches source: the same batches as TensorBatches over the same images, whatever the
// thread count.
//
// Segmentation pairs: with `mask_paths` (one mask per image) each sample's mask is decoded beside
// its image (DecodeOptions::mask; resized with nearest), travels the same ring, becomes class ids
// (mask_classes) and gets the image's crop and flip; `targets` is then undefined.
//
// Images of their own sizes (config own_sizes, without a size, with a transforms list whose first transforms bring
// any size to one: TransformPipeline::per_image_count, RandomResizedCrop, Resize + CenterCrop): each image is decoded at its own size and goes through those transforms on its reader thread, one image at a
// time as torchvision does, with its sample's draws; the slots hold their output. `images` (uint8 H x W x C, one
// per path, any sizes): the decoded images kept in memory (the cache of such a data set), read instead of the files.
// Read from the files, only the part of each image the first per-image transform uses is decoded
// (FileBatchesConfig::decode).
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpucore/batches/batches.h"
#include "gpucore/data/readers.h"

namespace gpucore {

struct FileBatchesConfig {
  int64_t channels = 3;            // 1 (grey) or 3 (RGB)
  int64_t height = 0, width = 0;   // the images' size; 0: the first image's size
  bool resize = false;             // images (and masks) of another size are resized, else refused
  int64_t threads = 4;             // reader threads
  int64_t prefetch = 4;            // batches decoded ahead (ring slots)
  bool skip_errors = false;        // unreadable files: left out of their batch and reported, else an error
  bool exif_orientation = true;    // images and masks turned as their EXIF orientation says (DecodeOptions)
  // Each image at its own size through the list's per-image transforms (needs height = width = 0 and a list that
  // starts with them), instead of all at one size.
  bool own_sizes = false;
  // Images at their own sizes read from their files: a JPEG decodes only the box the first per-image transform
  // resizes (RandomResizedCrop's, Resize's whole image), at the DCT scale that keeps it at least that transform's
  // output size with kFast, at full size with kExact (the same pixels as decoding the whole image).
  DecodeScaling decode = DecodeScaling::kFast;
};

class FileBatches : public EpochBatches {
 public:
  FileBatches(std::vector<std::string> paths, const at::Tensor& targets, int64_t batch_size, bool shuffle,
              bool drop_last, uint64_t seed, const at::Device& device, AugmentConfig augment,
              FileBatchesConfig config, std::vector<std::string> mask_paths = {}, std::vector<at::Tensor> images = {},
              const at::Tensor& mask_table = {});
  ~FileBatches() override;
  FileBatches(const FileBatches&) = delete;
  FileBatches& operator=(const FileBatches&) = delete;

  void start_epoch(int64_t epoch, int64_t skip_batches = 0) override;
  bool next(at::Tensor& inputs, at::Tensor& targets) override;
  // "path: why" of every file left out so far (skip_errors), each once.
  std::vector<std::string> skipped() const;
  // The slots' image size: the images', or the per-image transforms' output size.
  int64_t height() const { return slot_height_; }
  int64_t width() const { return slot_width_; }
  bool per_image() const { return per_image_; }

 private:
  // A file of a batch its reader could not decode: its row in the batch, its sample index and why.
  struct FailedFile {
    int64_t row;
    int64_t sample;
    std::string path, why;
    bool operator<(const FailedFile& other) const { return row < other.row; }
  };
  struct Slot {
    at::Tensor host, device;            // batch_size x H x W x C uint8; device only when training on CUDA
    at::Tensor host_masks, device_masks;  // batch_size x H x W uint8, for segmentation pairs
    int64_t decoded = 0;                // images of its batch written so far
    std::vector<FailedFile> failed;
    std::optional<c10::Event> copied;   // host -> device copy done (side stream)
    std::optional<c10::Event> consumed; // transform that read `device` done (training stream)
  };

  void read_images();        // a reader thread's loop
  // Takes the next image of the epoch's order (the caller holds `lock`, and next_sample_ < end_sample_), decodes it
  // into its slot with the lock released, and counts it (a failure is recorded in the slot).
  void read_next_image(std::unique_lock<std::mutex>& lock);
  void stop_readers();       // waits until no reader touches a slot
  void start_readers();
  void release_slots(int64_t batch);  // frees the slots of batches before `batch` whose copies are done
  int64_t batch_of(int64_t sample_position) const { return sample_position / batch_size_; }
  DecodeOptions image_options() const { return {config_.channels, config_.exif_orientation}; }
  DecodeOptions mask_options() const { return {1, config_.exif_orientation, /*mask=*/true}; }

  std::vector<std::string> paths_, mask_paths_;
  std::vector<at::Tensor> images_;
  at::Tensor mask_table_;  // masks: each uint8 value's class id (mask_classes), on the training device
  FileBatchesConfig config_;
  bool per_image_ = false;
  int64_t slot_height_ = 0, slot_width_ = 0;
  std::vector<Slot> slots_;
  std::optional<c10::Stream> copy_stream_;
  std::vector<std::thread> readers_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_, batch_ready_;
  int64_t next_sample_ = 0;  // position in the epoch's order of the next image to decode
  int64_t end_sample_ = 0;   // positions served this epoch (drop_last leaves the rest)
  int64_t released_ = 0;     // batches whose slots may be refilled
  bool stop_ = false;
  std::set<std::string> skipped_;
};

}  // namespace gpucore
