// The table of the `transforms` list: torchvision's name, the arguments it takes, the factory. An
// unknown name or argument is a ConfigError listing what is valid.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "batches/transforms/factories.h"
#include "gpucore/errors.h"

namespace gpucore {

namespace transforms {
namespace {

// One argument and its default as the docs show it (YAML): a value, "null" (torchvision's None: the argument's
// effect is off) or "required". The factories apply these defaults; tests/python/test_docs_reference.py checks that
// giving each default explicitly changes nothing.
struct Argument {
  const char* name;
  const char* default_value;
};

struct Row {
  const char* name;
  std::vector<Argument> arguments;
  std::function<std::unique_ptr<Transform>(const Arguments&)> factory;
};

const std::vector<Row>& table() {
  static const std::vector<Row> rows = {
      {"CenterCrop", {{"size", "required"}}, make_center_crop},
      {"RandomAffine",
       {{"degrees", "required"}, {"translate", "null"}, {"scale", "null"}, {"shear", "null"},
        {"interpolation", "nearest"}, {"fill", "0"}, {"center", "null"}},
       make_random_affine},
      {"RandomCrop",
       {{"size", "required"}, {"padding", "null"}, {"pad_if_needed", "false"}, {"fill", "0"},
        {"padding_mode", "constant"}},
       make_random_crop},
      {"RandomHorizontalFlip", {{"p", "0.5"}}, make_horizontal_flip},
      {"RandomResizedCrop",
       {{"size", "required"}, {"scale", "[0.08, 1.0]"}, {"ratio", "[0.75, 1.3333333333333333]"},
        {"interpolation", "bilinear"}, {"antialias", "true"}},
       make_random_resized_crop},
      {"RandomRotation",
       {{"degrees", "required"}, {"interpolation", "nearest"}, {"expand", "false"}, {"center", "null"}, {"fill", "0"}},
       make_random_rotation},
      {"RandomVerticalFlip", {{"p", "0.5"}}, make_vertical_flip},
      {"Resize",
       {{"size", "required"}, {"interpolation", "bilinear"}, {"max_size", "null"}, {"antialias", "true"}},
       make_resize},
      // Photometric (color_transforms.cpp, auto_augment.cpp, erasing.cpp).
      {"AutoAugment", {{"policy", "imagenet"}, {"interpolation", "nearest"}, {"fill", "null"}}, make_auto_augment},
      {"ColorJitter", {{"brightness", "null"}, {"contrast", "null"}, {"saturation", "null"}, {"hue", "null"}},
       make_color_jitter},
      {"RandAugment",
       {{"num_ops", "2"}, {"magnitude", "9"}, {"num_magnitude_bins", "31"}, {"interpolation", "nearest"},
        {"fill", "null"}},
       make_rand_augment},
      {"RandomAdjustSharpness", {{"sharpness_factor", "required"}, {"p", "0.5"}}, make_random_adjust_sharpness},
      {"RandomAutocontrast", {{"p", "0.5"}}, make_random_autocontrast},
      {"RandomEqualize", {{"p", "0.5"}}, make_random_equalize},
      {"RandomErasing",
       {{"p", "0.5"}, {"scale", "[0.02, 0.33]"}, {"ratio", "[0.3, 3.3]"}, {"value", "0"}, {"inplace", "false"}},
       make_random_erasing},
      {"RandomGrayscale", {{"p", "0.1"}}, make_random_grayscale},
      {"RandomInvert", {{"p", "0.5"}}, make_random_invert},
      {"RandomPosterize", {{"bits", "required"}, {"p", "0.5"}}, make_random_posterize},
      {"RandomSolarize", {{"threshold", "required"}, {"p", "0.5"}}, make_random_solarize},
      {"TrivialAugmentWide", {{"num_magnitude_bins", "31"}, {"interpolation", "nearest"}, {"fill", "null"}},
       make_trivial_augment_wide},
  };
  return rows;
}

// Normalize is the pipeline's own step (pipeline.cpp), not a factory of the table.
const std::vector<Argument> kNormalizeArguments = {{"mean", "required"}, {"std", "required"}, {"inplace", "false"}};

std::vector<std::string> argument_names(const std::vector<Argument>& arguments) {
  std::vector<std::string> names;
  for (const Argument& argument : arguments) names.emplace_back(argument.name);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::ostringstream out;
  for (size_t i = 0; i < names.size(); ++i) out << (i ? ", " : "") << names[i];
  return out.str();
}

std::string shown(const std::vector<double>& values) {
  std::ostringstream out;
  if (values.size() == 1) {
    out << values[0];
  } else {
    out << "[";
    for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
    out << "]";
  }
  return out.str();
}

}  // namespace

bool is_integer(double value) { return std::isfinite(value) && std::floor(value) == value; }

bool Arguments::is_word(const std::string& name) const { return spec_.words.count(name) > 0; }

bool Arguments::has(const std::string& name) const {
  return spec_.numbers.count(name) > 0 || spec_.words.count(name) > 0;
}

void Arguments::fail(const std::string& name, const std::string& message) const {
  throw ConfigError(spec_.name + ": argument '" + name + "' " + message);
}

std::vector<double> Arguments::numbers(const std::string& name, std::vector<double> fallback,
                                       const std::vector<size_t>& counts) const {
  if (const auto word = spec_.words.find(name); word != spec_.words.end()) {
    fail(name, "must be a number or a list of numbers, got '" + word->second + "'");
  }
  const auto found = spec_.numbers.find(name);
  if (found == spec_.numbers.end()) return fallback;
  const std::vector<double>& values = found->second;
  if (std::find(counts.begin(), counts.end(), values.size()) == counts.end()) {
    std::vector<std::string> lengths;
    for (const size_t count : counts) lengths.push_back(count == 1 ? "a number" : std::to_string(count) + " numbers");
    fail(name, "must be " + joined(lengths) + ", got " + shown(values));
  }
  for (const double value : values) {
    if (!std::isfinite(value)) fail(name, "must be finite, got " + shown(values));
  }
  return values;
}

double Arguments::number(const std::string& name, double fallback) const {
  return numbers(name, {fallback}, {1})[0];
}

bool Arguments::flag(const std::string& name, bool fallback) const {
  const double value = number(name, fallback ? 1.0 : 0.0);
  if (value != 0.0 && value != 1.0) fail(name, "must be true or false, got " + shown({value}));
  return value == 1.0;
}

std::string Arguments::word(const std::string& name, const std::string& fallback,
                            const std::vector<std::string>& choices) const {
  if (spec_.numbers.count(name)) fail(name, "must be one of " + joined(choices) + ", got " + shown(spec_.numbers.at(name)));
  const auto found = spec_.words.find(name);
  const std::string value = found == spec_.words.end() ? fallback : found->second;
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    fail(name, "is '" + value + "'; valid: " + joined(choices));
  }
  return value;
}

std::array<int64_t, 2> Arguments::size(const std::string& name) const {
  if (!has(name)) fail(name, "is required: an output size, one integer or [height, width]");
  const std::vector<double> values = numbers(name, {}, {1, 2});
  for (const double value : values) {
    if (!is_integer(value) || value < 1 || value > 65536) {
      fail(name, "must be integers in [1, 65536], got " + shown(values));
    }
  }
  return {static_cast<int64_t>(values[0]), static_cast<int64_t>(values.back())};
}

std::pair<double, double> Arguments::symmetric_range(const std::string& name, std::pair<double, double> fallback) const {
  if (!has(name)) return fallback;
  const std::vector<double> values = numbers(name, {}, {1, 2});
  if (values.size() == 1) {
    if (values[0] < 0) fail(name, "as a single number must be >= 0, got " + shown(values));
    return {-values[0], values[0]};
  }
  if (values[0] > values[1]) fail(name, "must be [low, high] with low <= high, got " + shown(values));
  return {values[0], values[1]};
}

std::pair<double, double> Arguments::ordered_pair(const std::string& name, std::pair<double, double> fallback,
                                                  bool (*check)(double), const std::string& valid) const {
  if (!has(name)) return fallback;
  const std::vector<double> values = numbers(name, {}, {2});
  if (values[0] > values[1] || !check(values[0]) || !check(values[1])) {
    fail(name, "must be [low, high] with low <= high, " + valid + ", got " + shown(values));
  }
  return {values[0], values[1]};
}

}  // namespace transforms

at::Tensor Transform::apply_to_mask(const at::Tensor& masks, const std::vector<at::Tensor>& /*params*/) const {
  return masks;  // a transform that moves no pixel leaves the mask as it is
}

at::Tensor Transform::apply_to_region(const at::Tensor&, int64_t, int64_t) const {
  throw ConfigError("this transform does not resize a box of its input; only Resize and RandomResizedCrop do");
}

std::vector<TransformSpec> Transform::validation_form(const TransformSpec& spec) const {
  if (is_random()) return {};
  return {spec};
}

std::vector<std::vector<TransformSpec>> validation_form(const std::vector<TransformSpec>& specs) {
  const TransformPipeline checked(specs, {}, {});  // every entry valid, named in the error otherwise
  std::vector<std::vector<TransformSpec>> form;
  for (const TransformSpec& spec : specs) {
    form.push_back(spec.name == "Normalize" ? std::vector<TransformSpec>{spec} : make_transform(spec)->validation_form(spec));
  }
  return form;
}

std::unique_ptr<Transform> make_transform(const TransformSpec& spec) {
  const auto& rows = transforms::table();
  const auto row = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return spec.name == r.name; });
  if (row == rows.end()) {
    throw ConfigError(spec.name + ": unknown transform; supported: " + transforms::joined(transform_names()));
  }
  std::vector<std::string> given;
  for (const auto& [name, values] : spec.numbers) given.push_back(name);
  for (const auto& [name, value] : spec.words) given.push_back(name);
  const std::vector<std::string> valid = transforms::argument_names(row->arguments);
  for (const std::string& name : given) {
    if (std::find(valid.begin(), valid.end(), name) == valid.end()) {
      throw ConfigError(spec.name + ": unknown argument '" + name + "'; valid arguments: " + transforms::joined(valid));
    }
  }
  return row->factory(transforms::Arguments(spec));
}

std::vector<std::string> transform_names() {
  std::vector<std::string> names{"Normalize"};
  for (const auto& row : transforms::table()) names.emplace_back(row.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> transform_arguments() {
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> result;
  const auto add = [&](const std::string& name, const std::vector<transforms::Argument>& arguments) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& argument : arguments) pairs.emplace_back(argument.name, argument.default_value);
    result.emplace_back(name, std::move(pairs));
  };
  add("Normalize", transforms::kNormalizeArguments);
  for (const auto& row : transforms::table()) add(row.name, row.arguments);
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}

}  // namespace gpucore
