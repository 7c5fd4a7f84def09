#pragma once
// One optimizer step captured as a CUDA graph and replayed: the step's hundred-odd kernels launched by one
// call instead of one by one from the host, which is most of a small model's step time on a fast GPU.
// The Engine decides what is captured and when (engine.cpp); this owns the graph, its side stream and its
// private memory pool. A build without CUDA can capture nothing and says so.
#include <functional>
#include <memory>
#include <string>

namespace gpucore {

class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Records `step` on a side stream into a private memory pool (nothing runs while it is recorded; the random
  // number generator of the CUDA device is registered, so every replay draws fresh numbers). Empty when the
  // graph was captured, else why not (a host sync inside the step, an op that cannot be captured): the graph is
  // dropped and nothing ran. The caller replays it for the step itself.
  std::string capture(const std::function<void()>& step);
  // Runs the captured step on the current stream.
  void replay();
  // Drops the graph and its memory pool.
  void reset();
  bool captured() const;

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
};

}  // namespace gpucore
