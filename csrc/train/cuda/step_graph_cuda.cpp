#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <unistd.h>

#include <exception>
#include <memory>
#include <stdexcept>

#include "gpucore/train/step_graph.h"

namespace gpucore {

struct StepGraph::Graph {
  at::cuda::CUDAGraph graph;
  pid_t owner = getpid();  // a process forked after the capture (a DataLoader worker) must not destroy it
};

namespace {

// torch's sync debug mode set to error while the step is recorded: a host sync in the step (an .item() or .cpu()
// in the model or loss) raises before it reaches CUDA, so the capture ends cleanly and is dropped. A sync that
// reached CUDA would invalidate the capture, and torch 2.11's random number generator stays in capture mode after
// an invalidated capture, failing every later dropout.
class SyncsRaise {
 public:
  SyncsRaise() : previous_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~SyncsRaise() { c10::cuda::warning_state().set_sync_debug_mode(previous_); }
  SyncsRaise(const SyncsRaise&) = delete;
  SyncsRaise& operator=(const SyncsRaise&) = delete;

 private:
  c10::cuda::SyncDebugMode previous_;
};

// `waiting` runs what is queued on it after what is queued on `done` now.
void wait_for(const c10::cuda::CUDAStream& waiting, const c10::cuda::CUDAStream& done) {
  cudaEvent_t event = nullptr;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(event, done.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(waiting.stream(), event, 0));
  C10_CUDA_CHECK(cudaEventDestroy(event));  // released once the wait is done
}

}  // namespace

StepGraph::StepGraph() = default;

StepGraph::~StepGraph() { reset(); }

std::string StepGraph::capture(const std::function<void()>& step) {
  reset();
  try {
    // Capture needs a stream of its own; it starts after what the current stream has queued (the static
    // inputs' copies) and the current stream waits for it, as torch.cuda.graph does.
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    wait_for(side, current);
    auto graph = std::make_unique<Graph>();
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      // A private pool of its own; thread-local mode: only this thread's calls that cannot be captured fail,
      // not a data or checkpoint thread's copies and allocations meanwhile.
      graph->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        const SyncsRaise syncs_raise;
        step();
      } catch (...) {
        try {
          graph->graph.capture_end();  // ends the capture, as torch.cuda.graph's exit does; the graph is dropped
        } catch (const std::exception&) {
        }
        throw;
      }
      graph->graph.capture_end();
    }
    wait_for(current, side);
    graph_ = std::move(graph);
    return {};
  } catch (const std::exception& error) {
    (void)cudaGetLastError();  // a refused call during capture is not sticky; clear it for the eager steps
    const std::string message = error.what();
    return message.substr(0, message.find('\n'));
  }
}

void StepGraph::replay() {
  if (!graph_) throw std::logic_error("StepGraph::replay: no step was captured");
  graph_->graph.replay();
}

void StepGraph::reset() {
  if (graph_ && graph_->owner != getpid()) {
    (void)graph_.release();  // the parent's CUDA context is not this process's: leave its graph alone
  }
  graph_.reset();
}

bool StepGraph::captured() const { return graph_ != nullptr; }

}  // namespace gpucore
