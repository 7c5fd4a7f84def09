// The formats other than PNG and JPEG go to the decoder set from outside the core (Pillow's, in Python): here a
// decoder of a made-up format ("TST" + height + width + the pixels) stands in for it, so that what the readers do
// with its answers is checked: pixels passed on as given, on several threads; its error named with the file and
// skipped where asked; a missing library never skipped; a wrong pixel count refused; the joins run through the wait.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "gpucore/data/readers.h"
#include "gpucore/errors.h"
#include "temp_files.h"

namespace gpucore {
namespace {

// A file of the made-up format: its pixels are `seed`, seed + 1, ... (mod 256), height x width x 3.
std::vector<unsigned char> made_up(unsigned char height, unsigned char width, unsigned char seed) {
  std::vector<unsigned char> bytes = {'T', 'S', 'T', height, width};
  for (int i = 0; i < height * width * 3; ++i) bytes.push_back(static_cast<unsigned char>(seed + i));
  return bytes;
}

std::atomic<int> waits{0};

// Decodes the made-up format ("BAD" files fail, "LIB" files lack their library, "ODD" files give too few bytes).
OtherFormatImage made_up_decoder(const std::vector<unsigned char>& bytes, const DecodeOptions& options, int64_t) {
  OtherFormatImage out;
  const std::string magic(bytes.begin(), bytes.begin() + 3);
  if (magic == "BAD") {
    out.error = "corrupt TST: broken on purpose";
  } else if (magic == "LIB") {
    out.error = "is a TST file, whose reader is not installed: pip install tst";
    out.missing_library = true;
  } else {
    out.height = bytes[3];
    out.width = bytes[4];
    out.data.assign(bytes.begin() + 5, bytes.end());
    if (magic == "ODD") out.data.pop_back();
    if (options.channels == 1) out.data.resize(out.height * out.width);  // its first third: enough for the test
  }
  return out;
}

class OtherFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    waits = 0;
    set_other_format_decoder(made_up_decoder, [](const std::function<void()>& wait) {
      ++waits;
      wait();
    });
  }
  void TearDown() override { set_other_format_decoder(nullptr, nullptr); }
};

at::Tensor expected(const std::vector<unsigned char>& bytes) {
  return at::tensor(std::vector<uint8_t>(bytes.begin() + 5, bytes.end())).reshape({bytes[3], bytes[4], 3});
}

TEST_F(OtherFormats, PixelsAsTheDecoderGivesThem) {
  const std::vector<unsigned char> first = made_up(3, 4, 7), second = made_up(3, 4, 200);
  const std::string a = write_file("a.tst", first), b = write_file("b.tst", second);
  EXPECT_TRUE(at::equal(decode_image(a, {3}), expected(first)));
  const DecodedImages both = decode_images({a, b, a}, {3}, /*threads=*/2, /*skip_errors=*/false);
  ASSERT_EQ(both.images.size(0), 3);
  EXPECT_TRUE(at::equal(both.images[1], expected(second)));
  EXPECT_TRUE(at::equal(both.images[2], expected(first)));
  EXPECT_EQ(waits.load(), 1);  // the join of decode_images' threads
  ImageFile file(b, {3});
  EXPECT_EQ(file.size(), (std::array<int64_t, 2>{3, 4}));
  EXPECT_TRUE(at::equal(file.read({1, 2, 2, 2}, 2, 2, DecodeScaling::kExact),
                        expected(second).slice(0, 1, 3).slice(1, 2, 4)));
}

TEST_F(OtherFormats, ErrorsNameTheFile) {
  const std::string good = write_file("good.tst", made_up(2, 2, 0));
  const std::string bad = write_file("bad.tst", {'B', 'A', 'D', 0, 0});
  try {
    decode_image(bad, {3});
    FAIL() << "a broken file was accepted";
  } catch (const MissingReaderError&) {
    FAIL() << "a broken file is not a missing reader";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("image '" + bad + "': corrupt TST: broken on purpose"), std::string::npos)
        << e.what();
  }
  const DecodedImages kept = decode_images({bad, good}, {3}, 2, /*skip_errors=*/true);
  EXPECT_EQ(kept.kept, (std::vector<int64_t>{1}));
  ASSERT_EQ(kept.skipped.size(), 1u);
  EXPECT_EQ(kept.skipped[0], bad + ": corrupt TST: broken on purpose");

  const std::string odd = write_file("odd.tst", {'O', 'D', 'D', 1, 1, 9, 9, 9});
  try {
    decode_image(odd, {3});
    FAIL() << "a wrong pixel count was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the decoder gave 2 bytes for 1x1 pixels of 3 channel(s)"), std::string::npos)
        << e.what();
  }
}

TEST_F(OtherFormats, AMissingLibraryIsNeverSkipped) {
  const std::string lib = write_file("lib.tst", {'L', 'I', 'B', 0, 0});
  EXPECT_THROW(decode_images({lib}, {3}, 1, /*skip_errors=*/true), MissingReaderError);
  try {
    decode_image(lib, {3});
    FAIL() << "a file without its reader was accepted";
  } catch (const MissingReaderError& e) {
    EXPECT_NE(std::string(e.what()).find("pip install tst"), std::string::npos) << e.what();
  }
}

TEST(OtherFormatsUnset, WithoutADecoderOnlyPngAndJpegAreRead) {
  const std::string path = write_file("alone.tst", made_up(1, 1, 0));
  try {
    decode_image(path, {3});
    FAIL() << "a file of another format was accepted without its decoder";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("neither PNG nor JPEG"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpucore
