// The formats other than PNG and JPEG, decoded by the decoder set from outside the core (gpucore._C sets Pillow's):
// kept here so that the readers (images.cpp) call one function for them, set or not.
#include <mutex>
#include <utility>

#include "gpucore/data/readers.h"

namespace gpucore {

namespace {

// Set once at import, read by every reader thread: shared pointers, so a decoder replaced meanwhile stays alive
// for the calls already in it.
std::mutex decoder_mutex;
std::shared_ptr<const OtherFormatDecoder> other_decoder;
std::shared_ptr<const DecoderWait> decoder_wait;

}  // namespace

void set_other_format_decoder(OtherFormatDecoder decoder, DecoderWait wait) {
  std::lock_guard<std::mutex> lock(decoder_mutex);
  other_decoder = decoder ? std::make_shared<const OtherFormatDecoder>(std::move(decoder)) : nullptr;
  decoder_wait = wait ? std::make_shared<const DecoderWait>(std::move(wait)) : nullptr;
}

OtherFormatImage decode_other_format(const std::vector<unsigned char>& bytes, const DecodeOptions& options) {
  std::shared_ptr<const OtherFormatDecoder> decoder;
  {
    std::lock_guard<std::mutex> lock(decoder_mutex);
    decoder = other_decoder;
  }
  if (!decoder) {
    OtherFormatImage out;
    out.error = "neither PNG nor JPEG (by its first bytes); the other formats (WebP, BMP, GIF, TIFF, PPM, HEIC, "
                "AVIF) are read through Pillow by gpucore's Python package, not by the C++ core alone";
    return out;
  }
  OtherFormatImage out = (*decoder)(bytes, options, max_image_pixels());
  const int64_t expected = out.height * out.width * options.channels;
  if (out.error.empty() && (out.height < 1 || out.width < 1 || static_cast<int64_t>(out.data.size()) != expected)) {
    out.error = "the decoder gave " + std::to_string(out.data.size()) + " bytes for " + std::to_string(out.height) +
                "x" + std::to_string(out.width) + " pixels of " + std::to_string(options.channels) + " channel(s)";
    out.data.clear();
  }
  return out;
}

void wait_for_decoders(const std::function<void()>& wait) {
  std::shared_ptr<const DecoderWait> how;
  {
    std::lock_guard<std::mutex> lock(decoder_mutex);
    how = decoder_wait;
  }
  if (how) {
    (*how)(wait);
  } else {
    wait();
  }
}

}  // namespace gpucore
