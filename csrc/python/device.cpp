// Device facts, device selection, the precision policy and the device probes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "gpucore/device/arch_compat.h"
#include "gpucore/device/device_select.h"
#include "gpucore/device/precision.h"
#include "gpucore/device/probe.h"
#include "python/module.h"

namespace py = pybind11;

namespace gpucore::python {

namespace {

// A Python probe (tests inject one) or, for None, the live probe on the device.
ProbeFn make_probe(const py::object& probe) {
  if (probe.is_none()) return probe_device;
  return [probe](const std::string& device) {
    py::gil_scoped_acquire gil;
    return probe(device).cast<ProbeResult>();
  };
}

}  // namespace

void def_device(py::module_& m) {
  py::class_<ComputeCapability>(m, "ComputeCapability")
      .def(py::init([](int major, int minor) { return ComputeCapability{major, minor}; }), py::arg("major"), py::arg("minor"))
      .def_readwrite("major", &ComputeCapability::major)
      .def_readwrite("minor", &ComputeCapability::minor)
      .def("__str__", &ComputeCapability::str);

  py::class_<ArchMatch>(m, "ArchMatch")
      .def_readonly("usable", &ArchMatch::usable)
      .def_readonly("via", &ArchMatch::via)
      .def_readonly("jit", &ArchMatch::jit);
  m.def("match_arch_list", &match_arch_list, py::arg("capability"), py::arg("arch_list"));
  m.def("torch_build_advice", &torch_build_advice, py::arg("capability"), py::arg("arch_list"));

  py::class_<CudaDeviceFacts>(m, "CudaDeviceFacts")
      .def(py::init<>())
      .def_readwrite("index", &CudaDeviceFacts::index)
      .def_readwrite("name", &CudaDeviceFacts::name)
      .def_readwrite("capability", &CudaDeviceFacts::cc)
      .def_readwrite("total_memory", &CudaDeviceFacts::total_memory)
      .def_readwrite("free_memory", &CudaDeviceFacts::free_memory)
      .def_readwrite("multiprocessor_count", &CudaDeviceFacts::multiprocessor_count);

  py::class_<SystemFacts>(m, "SystemFacts")
      .def(py::init<>())
      .def_readwrite("torch_version", &SystemFacts::torch_version)
      .def_readwrite("torch_cuda_version", &SystemFacts::torch_cuda_version)
      .def_readwrite("torch_arch_list", &SystemFacts::torch_arch_list)
      .def_readwrite("cuda_devices", &SystemFacts::cuda_devices)
      .def_readwrite("cuda_unavailable_reason", &SystemFacts::cuda_unavailable_reason)
      .def_readwrite("cuda_driver_version", &SystemFacts::cuda_driver_version)
      .def_readwrite("mps_built", &SystemFacts::mps_built)
      .def_readwrite("mps_available", &SystemFacts::mps_available)
      .def_readwrite("mps_bf16", &SystemFacts::mps_bf16)
      .def_readwrite("cpu_bf16_isa", &SystemFacts::cpu_bf16_isa)
      .def_readwrite("cpu_threads", &SystemFacts::cpu_threads);

  py::class_<ProbeResult>(m, "ProbeResult")
      .def(py::init([](bool ok, std::string error) { return ProbeResult{ok, std::move(error)}; }), py::arg("ok"),
           py::arg("error") = "")
      .def_readonly("ok", &ProbeResult::ok)
      .def_readonly("error", &ProbeResult::error);

  py::class_<DeviceVerdict>(m, "DeviceVerdict")
      .def_readonly("device", &DeviceVerdict::device)
      .def_readonly("name", &DeviceVerdict::name)
      .def_readonly("usable", &DeviceVerdict::usable)
      .def_readonly("reason", &DeviceVerdict::reason)
      .def_readonly("advice", &DeviceVerdict::advice);

  py::class_<DeviceChoice>(m, "DeviceChoice")
      .def_readonly("device", &DeviceChoice::device)
      .def_readonly("reason", &DeviceChoice::reason)
      .def_readonly("warnings", &DeviceChoice::warnings)
      .def_readonly("verdicts", &DeviceChoice::verdicts);

  m.def(
      "select_device",
      [](const SystemFacts& facts, const std::string& preference, bool no_cuda, bool no_mps, const py::object& probe) {
        const ProbeFn probe_fn = make_probe(probe);
        py::gil_scoped_release release;
        return select_device(facts, preference, no_cuda, no_mps, probe_fn);
      },
      py::arg("facts"), py::arg("preference"), py::arg("no_cuda"), py::arg("no_mps"), py::arg("probe") = py::none());
  m.def(
      "assess_all_devices",
      [](const SystemFacts& facts, const py::object& probe) {
        const ProbeFn probe_fn = make_probe(probe);
        py::gil_scoped_release release;
        return assess_all_devices(facts, probe_fn);
      },
      py::arg("facts"), py::arg("probe") = py::none());

  py::class_<ResolvedPrecision>(m, "ResolvedPrecision")
      .def_property_readonly("precision", [](const ResolvedPrecision& p) { return to_string(p.precision); })
      .def_readonly("autocast_dtype", &ResolvedPrecision::autocast_dtype)
      .def_readonly("param_dtype", &ResolvedPrecision::param_dtype)
      .def_readonly("loss_scaling", &ResolvedPrecision::loss_scaling)
      .def_readonly("tf32", &ResolvedPrecision::tf32)
      .def_readonly("cudnn_benchmark", &ResolvedPrecision::cudnn_benchmark)
      .def_readonly("reason", &ResolvedPrecision::reason);
  m.def(
      "resolve_precision",
      [](const SystemFacts& facts, const std::string& device, const std::string& precision, const std::string& tf32,
         const std::string& cudnn_benchmark) {
        return resolve_precision(parse_precision(precision), device_caps(facts, device), parse_toggle("tf32", tf32),
                                 parse_toggle("cudnn_benchmark", cudnn_benchmark));
      },
      py::arg("facts"), py::arg("device"), py::arg("precision"), py::arg("tf32"), py::arg("cudnn_benchmark"));
  m.def(
      "apply_precision_policy",
      [](bool tf32, bool cudnn_benchmark) {
        ResolvedPrecision policy;
        policy.tf32 = tf32;
        policy.cudnn_benchmark = cudnn_benchmark;
        apply_precision_policy(policy);
      },
      py::arg("tf32"), py::arg("cudnn_benchmark"));

  m.def("probe_device", &probe_device, py::arg("device"), py::call_guard<py::gil_scoped_release>());
  m.def("probe_gpucore_kernels", &probe_gpucore_kernels, py::arg("device"), py::call_guard<py::gil_scoped_release>());
  m.def("gpucore_cuda_arch_list", &gpucore_cuda_arch_list);
  m.def("cuda_driver_version", &cuda_driver_version);

  py::class_<SmokeResult>(m, "SmokeResult")
      .def_readonly("device", &SmokeResult::device)
      .def_readonly("ok", &SmokeResult::ok)
      .def_readonly("matmul_rel_error", &SmokeResult::matmul_rel_error)
      .def_readonly("conv_rel_error", &SmokeResult::conv_rel_error)
      .def_readonly("matmul_ms", &SmokeResult::matmul_ms)
      .def_readonly("conv_ms", &SmokeResult::conv_ms)
      .def_readonly("tolerance", &SmokeResult::tolerance)
      .def_readonly("error", &SmokeResult::error);
  m.def("smoke_test", &smoke_test, py::arg("device"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace gpucore::python
