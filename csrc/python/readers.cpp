// The data readers: IDX, .npy/.npz and images (PNG, JPEG; the other formats through Python's Pillow), each
// releasing the GIL while it reads.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include "gpucore/data/readers.h"
#include "python/module.h"

namespace py = pybind11;

namespace gpucore::python {

namespace {

// Whether the GIL can no longer be taken: Python is shut down or shutting down (static destructors, reader threads
// still running at exit).
bool python_gone() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() == 0 || Py_IsFinalizing() != 0;
#else
  return Py_IsInitialized() == 0 || _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

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
  // The decoder of the formats other than PNG and JPEG (gpucore.data.pillow_formats.decode), called on the reader
  // threads with the GIL taken for the call; the readers' joins then wait with the GIL released.
  m.def(
      "set_other_format_decoder",
      [](py::object decode) {
        if (decode.is_none()) {
          set_other_format_decoder(nullptr, nullptr);
          return;
        }
        // Kept alive and released under the GIL, whichever thread drops the last reference; left as it is once
        // Python is gone (the process is ending).
        auto held = std::shared_ptr<py::object>(new py::object(std::move(decode)), [](py::object* callable) {
          if (python_gone()) return;
          py::gil_scoped_acquire gil;
          delete callable;
        });
        set_other_format_decoder(
            [held](const std::vector<unsigned char>& bytes, const DecodeOptions& options, int64_t max_pixels) {
              OtherFormatImage out;
              if (python_gone()) {
                out.error = "cannot be decoded: Python is shutting down";
                return out;
              }
              py::gil_scoped_acquire gil;
              try {
                const py::tuple result = (*held)(
                    py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()), options.channels,
                    options.exif_orientation, options.mask, max_pixels);
                const py::bytes pixels = result[0];
                char* data = nullptr;
                Py_ssize_t size = 0;
                if (PyBytes_AsStringAndSize(pixels.ptr(), &data, &size) != 0) throw py::error_already_set();
                out.data.assign(data, data + size);
                out.height = result[1].cast<int64_t>();
                out.width = result[2].cast<int64_t>();
                out.error = result[3].cast<std::string>();
                out.missing_library = result[4].cast<bool>();
              } catch (const std::exception& e) {  // the decoder's own failure: this file's error
                out = OtherFormatImage();
                out.error = std::string("cannot be decoded: ") + e.what();
              }
              return out;
            },
            [](const std::function<void()>& wait) {
              if (PyGILState_Check() != 0) {
                py::gil_scoped_release release;
                wait();
              } else {
                wait();
              }
            });
      },
      py::arg("decode"));
  m.def("mixed_sizes_hint", &mixed_sizes_hint);
  m.def("mask_classes", &mask_classes, py::arg("masks"), py::arg("table"));
  m.def("missing_reader_message", &missing_reader_message, py::arg("format"));
  m.def("set_max_image_pixels", &set_max_image_pixels, py::arg("pixels"));
  m.def("max_image_pixels", &max_image_pixels);
}

}  // namespace gpucore::python
