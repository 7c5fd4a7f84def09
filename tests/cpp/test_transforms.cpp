// The transforms registry and pipeline: names and arguments checked by torchvision's rules, output sizes,
// parameters drawn within their ranges and reproducibly, and hand-computed results.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "gpucore/batches/transforms.h"
#include "gpucore/errors.h"
#include "pipeline_error.h"

using gpucore::TransformPipeline;
using gpucore::TransformSpec;

TEST(Transforms, UnknownNamesAndArgumentsNameTheEntryAndWhatIsValid) {
  EXPECT_EQ(pipeline_error({{"RandomHorizontalFlip", {}, {}}, {"Rezise", {}, {}}}),
            "transforms[1] Rezise: unknown transform; supported: AutoAugment, CenterCrop, ColorJitter, Normalize, "
            "RandAugment, RandomAdjustSharpness, RandomAffine, RandomAutocontrast, RandomCrop, RandomEqualize, "
            "RandomErasing, RandomGrayscale, RandomHorizontalFlip, RandomInvert, RandomPosterize, RandomResizedCrop, "
            "RandomRotation, RandomSolarize, RandomVerticalFlip, Resize, TrivialAugmentWide");
  EXPECT_EQ(pipeline_error({{"RandomHorizontalFlip", {{"q", {0.5}}}, {}}}),
            "transforms[0] RandomHorizontalFlip: unknown argument 'q'; valid arguments: p");
  EXPECT_EQ(pipeline_error({{"RandomHorizontalFlip", {{"p", {1.5}}}, {}}}),
            "transforms[0] RandomHorizontalFlip: argument 'p' must be in [0, 1], got 1.500000");
  EXPECT_EQ(pipeline_error({{"RandomResizedCrop", {}, {}}}),
            "transforms[0] RandomResizedCrop: argument 'size' is required: an output size, one integer or [height, "
            "width]");
  EXPECT_EQ(pipeline_error({{"Resize", {{"size", {8}}}, {{"interpolation", "lanczos"}}}}),
            "transforms[0] Resize: argument 'interpolation' is 'lanczos'; valid: nearest, bilinear");
}

TEST(Transforms, OutputSizesFollowTorchvision) {
  const TransformPipeline smaller_edge({{"Resize", {{"size", {10}}}, {}}}, {}, {});
  EXPECT_EQ(smaller_edge.output_size(20, 30), (std::array<int64_t, 2>{10, 15}));
  EXPECT_EQ(smaller_edge.output_size(31, 20), (std::array<int64_t, 2>{15, 10}));
  const TransformPipeline capped({{"Resize", {{"size", {10}}, {"max_size", {12}}}, {}}}, {}, {});
  EXPECT_EQ(capped.output_size(20, 30), (std::array<int64_t, 2>{8, 12}));
  const TransformPipeline chain({{"RandomResizedCrop", {{"size", {24}}}, {}}, {"CenterCrop", {{"size", {20, 16}}}, {}}},
                                {}, {});
  EXPECT_EQ(chain.output_size(5, 7), (std::array<int64_t, 2>{20, 16}));
}

TEST(Transforms, DrawsStayInRangeAndRepeatForTheSameSeed) {
  const TransformPipeline pipeline({{"RandomCrop", {{"size", {9, 12}}, {"padding", {3}}}, {}},
                                    {"RandomResizedCrop", {{"size", {5}}, {"scale", {0.3, 0.6}}}, {}}},
                                   {}, {});
  at::Generator first = at::detail::createCPUGenerator(11), second = at::detail::createCPUGenerator(11);
  const auto params = pipeline.sample(500, 9, 12, first);
  const auto again = pipeline.sample(500, 9, 12, second);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(at::equal(params[0][0], again[0][0]) && at::equal(params[1][0], again[1][0]));
  const at::Tensor offsets = params[0][0], boxes = params[1][0];
  EXPECT_EQ(offsets.min().item<int64_t>(), -3);
  EXPECT_EQ(offsets.max().item<int64_t>(), 3);
  const at::Tensor area = boxes.select(1, 2) * boxes.select(1, 3);
  EXPECT_GE(area.min().item<int64_t>(), static_cast<int64_t>(0.3 * 108 * 0.8));  // rounding of the sides
  EXPECT_TRUE((boxes.select(1, 0) + boxes.select(1, 2) <= 9).all().item<bool>());
  EXPECT_TRUE((boxes.select(1, 1) + boxes.select(1, 3) <= 12).all().item<bool>());
}

TEST(Transforms, FlipsAndNormalizeComputeWhatTheyShould) {
  const TransformPipeline pipeline({{"RandomHorizontalFlip", {{"p", {1.0}}}, {}},
                                    {"Normalize", {{"mean", {0.5}}, {"std", {0.25}}}, {}}},
                                   {}, {});
  const at::Tensor images = at::arange(2 * 3 * 4 * 5, at::kLong).remainder(256).to(at::kByte).reshape({2, 3, 4, 5});
  at::Generator generator = at::detail::createCPUGenerator(0);
  const auto params = pipeline.sample(2, 4, 5, generator);
  at::Tensor masks = at::arange(2 * 4 * 5, at::kLong).reshape({2, 4, 5});
  const at::Tensor out = pipeline.apply(images, params, at::kFloat, masks);
  const at::Tensor expected = (images.flip({3}).to(at::kFloat) / 255 - 0.5) / 0.25;
  EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-5));
  EXPECT_TRUE(at::equal(masks, at::arange(2 * 4 * 5, at::kLong).reshape({2, 4, 5}).flip({2})));
}

TEST(Transforms, PerImageTransformsEndAtTheFirstOfOneOutputSize) {
  const TransformPipeline resize_crop({{"RandomHorizontalFlip", {}, {}}, {"Resize", {{"size", {12}}}, {}},
                                       {"CenterCrop", {{"size", {10}}}, {}}, {"ColorJitter", {{"brightness", {0.2}}}, {}}},
                                      {}, {});
  EXPECT_EQ(resize_crop.per_image_count(), 3u);
  EXPECT_EQ(resize_crop.per_image_size(), (std::array<int64_t, 2>{10, 10}));
  EXPECT_EQ(resize_crop.output_size(0, 0), (std::array<int64_t, 2>{10, 10}));  // images of any sizes
  EXPECT_EQ(TransformPipeline({{"Resize", {{"size", {12}}}, {}}}, {}, {}).per_image_count(), 0u);
  EXPECT_EQ(TransformPipeline({{"Resize", {{"size", {12, 9}}}, {}}}, {}, {}).per_image_count(), 1u);
  const TransformPipeline none({{"RandomHorizontalFlip", {}, {}}}, {}, {});
  at::Generator generator = at::detail::createCPUGenerator(0);
  try {
    none.sample(3, 0, 0, generator);
    ADD_FAILURE() << "images of their own sizes without per-image transforms were drawn for";
  } catch (const gpucore::ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("images of mixed sizes need a transform that brings each to one size"),
              std::string::npos) << error.what();
  }
}

TEST(Transforms, EachImageAtItsOwnSizeIsCroppedWithItsOwnDraws) {
  // One image at a time (apply_per_image) is the batch pipeline on that image alone with the draws of the sample's
  // own generator; the transforms after the per-image ones draw from the epoch's generator as for a batch.
  const std::vector<TransformSpec> crop = {{"RandomResizedCrop", {{"size", {7, 9}}, {"scale", {0.2, 1.0}}}, {}}};
  std::vector<TransformSpec> specs = crop;
  specs.push_back({"RandomHorizontalFlip", {}, {}});
  const TransformPipeline pipeline(specs, {}, {}), crop_alone(crop, {}, {});
  at::Generator generator = at::detail::createCPUGenerator(5);
  const at::Tensor images = at::randint(0, 256, {6, 3, 15, 13}, generator, at::kByte);
  at::Generator epoch = at::detail::createCPUGenerator(7);
  uint64_t seed = 0;
  const auto params = pipeline.sample(6, 0, 0, epoch, &seed);
  EXPECT_TRUE(params[0].empty());
  at::Generator after_seed = at::detail::createCPUGenerator(7);
  {
    const std::lock_guard<std::mutex> lock(after_seed.mutex());
    EXPECT_EQ(at::check_generator<at::CPUGeneratorImpl>(after_seed)->random64(), seed);
  }
  const TransformPipeline flip({{"RandomHorizontalFlip", {}, {}}}, {}, {});
  EXPECT_TRUE(at::equal(params[1][1], flip.sample(6, 7, 9, after_seed)[0][1]));
  at::Tensor no_masks;
  for (int64_t i = 0; i < 6; ++i) {
    const at::Tensor image = i % 2 ? images[i] : images[i].slice(1, 0, 11 - i);  // sizes differ
    at::Generator own = at::detail::createCPUGenerator(gpucore::sample_seed(seed, i));
    const at::Tensor expected = crop_alone.apply(image.unsqueeze(0).contiguous(), crop_alone.sample(1, image.size(1),
                                                 image.size(2), own), at::kByte, no_masks)[0];
    const at::Tensor got = pipeline.apply_per_image(image.permute({1, 2, 0}).contiguous(), seed, i);
    EXPECT_TRUE(at::equal(got, expected)) << "sample " << i;
    EXPECT_EQ(got.sizes(), (at::IntArrayRef{3, 7, 9}));
  }
  EXPECT_NE(gpucore::sample_seed(seed, 0), gpucore::sample_seed(seed, 1));
}
