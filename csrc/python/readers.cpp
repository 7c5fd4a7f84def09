// The data readers: IDX, .npy/.npz and images (PNG, JPEG), each releasing the GIL while it reads.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include "gpucore/data/readers.h"
#include "python/module.h"

namespace py = pybind11;

namespace gpucore::python {

void def_readers(py::module_& m) {
  m.def("read_idx", &read_idx, py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def("read_npy", &read_npy, py::arg("path"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "read_npz",
      [](const std::string& path) {
        std::vector<std::pair<std::string, at::Tensor>> arrays;
        {
          py::gil_scoped_release release;
          arrays = read_npz(path);
        }
        py::dict named;
        for (const auto& [name, array] : arrays) named[py::str(name)] = array;
        return named;
      },
      py::arg("path"));
  // Images with `channels` (1 or 3), or masks (mask=True: class ids, 1 channel), turned upright by their EXIF
  // orientation unless exif_orientation=False (DecodeOptions).
  m.def(
      "decode_image",
      [](const std::string& path, int64_t channels, bool exif_orientation, bool mask) {
        return decode_image(path, {channels, exif_orientation, mask});
      },
      py::arg("path"), py::arg("channels"), py::arg("exif_orientation") = true, py::arg("mask") = false,
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "decode_images",
      [](const std::vector<std::string>& paths, int64_t channels, int64_t threads, bool skip_errors, int64_t height,
         int64_t width, bool exif_orientation, bool mask) {
        DecodedImages decoded;
        {
          py::gil_scoped_release release;
          decoded = decode_images(paths, {channels, exif_orientation, mask}, threads, skip_errors, height, width);
        }
        return py::make_tuple(decoded.images, decoded.kept, decoded.skipped);
      },
      py::arg("paths"), py::arg("channels"), py::arg("threads"), py::arg("skip_errors"), py::arg("height") = 0,
      py::arg("width") = 0, py::arg("exif_orientation") = true, py::arg("mask") = false);
  // Each image at its own size (shorter side bounded by max_shorter_side > 0): (images, kept, skipped, how many were
  // downsized to the bound).
  m.def(
      "decode_images_at_own_size",
      [](const std::vector<std::string>& paths, int64_t channels, int64_t threads, bool skip_errors,
         int64_t max_shorter_side, bool exif_orientation, const std::string& decode) {
        const DecodeScaling scaling = parse_decode_scaling(decode);
        DecodedImageList decoded;
        {
          py::gil_scoped_release release;
          decoded = decode_images_at_own_size(paths, {channels, exif_orientation}, threads, skip_errors,
                                              max_shorter_side, scaling);
        }
        return py::make_tuple(decoded.images, decoded.kept, decoded.skipped, decoded.downsized);
      },
      py::arg("paths"), py::arg("channels"), py::arg("threads"), py::arg("skip_errors"), py::arg("max_shorter_side"),
      py::arg("exif_orientation") = true, py::arg("decode") = "exact");
  // One box (top, left, height, width) of an image, upright, read alone (ImageFile): a JPEG decodes only the rows and
  // iMCU columns that cover it, with decode="fast" at the DCT scale that keeps it at least `least` (height, width).
  m.def(
      "decode_image_box",
      [](const std::string& path, const std::array<int64_t, 4>& box, int64_t channels, bool exif_orientation,
         const std::array<int64_t, 2>& least, const std::string& decode) {
        const DecodeScaling scaling = parse_decode_scaling(decode);
        ImageFile file(path, {channels, exif_orientation});
        return file.read({box[0], box[1], box[2], box[3]}, least[0], least[1], scaling);
      },
      py::arg("path"), py::arg("box"), py::arg("channels") = 3, py::arg("exif_orientation") = true,
      py::arg("least") = std::array<int64_t, 2>{0, 0}, py::arg("decode") = "exact",
      py::call_guard<py::gil_scoped_release>());
  m.def("mixed_sizes_hint", &mixed_sizes_hint);
  m.def("mask_classes", &mask_classes, py::arg("masks"), py::arg("table"));
  m.def("missing_reader_message", &missing_reader_message, py::arg("format"));
  m.def("set_max_image_pixels", &set_max_image_pixels, py::arg("pixels"));
  m.def("max_image_pixels", &max_image_pixels);
}

}  // namespace gpucore::python
