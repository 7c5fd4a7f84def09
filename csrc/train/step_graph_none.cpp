// gpucore built without CUDA: no step can be captured; the Engine trains eagerly and reports why.
#include "gpucore/train/step_graph.h"

#include <stdexcept>

namespace gpucore {

struct StepGraph::Graph {};

StepGraph::StepGraph() = default;
StepGraph::~StepGraph() = default;

std::string StepGraph::capture(const std::function<void()>&) {
  return "gpucore was built without CUDA (a CPU-only torch, no nvcc, or GPUCORE_WITH_CUDA=OFF at build time)";
}

void StepGraph::replay() { throw std::logic_error("StepGraph::replay: no step was captured"); }

void StepGraph::reset() {}

bool StepGraph::captured() const { return false; }

}  // namespace gpucore
