#pragma once
// Can a CUDA device run code compiled for a given list of architectures?
//
// The list uses the names torch.cuda.get_arch_list() prints: "sm_XY" is machine code (SASS) and
// runs on compute capability X.Z with Z >= Y (same major); "compute_XY" is PTX, JIT-compiled by
// the driver for any compute capability >= X.Y. An "a" suffix (sm_90a) marks arch-specific code
// that runs on exactly X.Y; an "f" suffix (sm_100f) marks family code, treated like plain SASS.
#include <string>
#include <vector>

namespace gpucore {

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  std::string str() const;  // "8.6"
};

enum class CodeKind { kSass, kPtx };

struct ArchTarget {
  CodeKind kind = CodeKind::kSass;
  ComputeCapability cc;
  bool arch_specific = false;  // "a" suffix
  std::string name;            // as written, e.g. "sm_90a"
};

// Parses "sm_86", "compute_90", "sm_90a", "sm_100f"; throws ConfigError naming the entry otherwise.
ArchTarget parse_arch(const std::string& name);

// Whether `target` can run on a device of capability `cc`.
bool runs_on(const ArchTarget& target, const ComputeCapability& cc);

struct ArchMatch {
  bool usable = false;
  std::string via;   // the arch-list entry that serves the device ("sm_80"), empty when none
  bool jit = false;  // served through PTX, compiled by the driver on first use
};

// The best entry of `arch_list` for `cc`: SASS before PTX (no JIT delay), then the newest.
ArchMatch match_arch_list(const ComputeCapability& cc, const std::vector<std::string>& arch_list);

// One sentence on which kind of torch build would run a device of capability `cc`, given that
// the build with `arch_list` does not.
std::string torch_build_advice(const ComputeCapability& cc, const std::vector<std::string>& arch_list);

// "sm_75, sm_80, compute_90" or "no CUDA code (CPU-only build)".
std::string describe_arch_list(const std::vector<std::string>& arch_list);

// What an op says when gpucore's CUDA kernel cannot run on its device (the launch failed with
// cudaErrorNoKernelImageForDevice): the op, the device ("cuda:0 (Tesla M40)") and its capability, the
// architectures gpucore was built for (`arch_list`), and how to rebuild gpucore for this GPU.
std::string missing_kernel_message(const std::string& op, const std::string& device, const ComputeCapability& cc,
                                   const std::vector<std::string>& arch_list);

}  // namespace gpucore
