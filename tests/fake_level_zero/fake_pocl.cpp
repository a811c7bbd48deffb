// Kernels of the fake driver executed from the module's own SPIR-V, on PoCL.
//
// Debian's PoCL 3.1 reports an empty CL_DEVICE_IL_VERSION (it was built without SPIR-V
// input), so clCreateProgramWithIL is refused. It does take SPIR (cl_khr_spir: LLVM bitcode
// for the spir64 target, built with "-x spir"). So the bytes the backend handed to
// zeModuleCreate are translated back to LLVM bitcode by the same llvm-spirv-15 that produced
// them (llvm-spirv -r --spirv-target-env=CL1.2), and that bitcode is built by PoCL. What
// runs is the shipped SPIR-V's content, not a fresh compile of the .cl source. Pointer
// arguments are passed as SVM pointers: PoCL's CPU device has fine-grained system SVM, and the
// fake's device memory is host memory, so no buffers are wrapped or copied.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "fake_state.hpp"

#ifdef FAKE_ZE_HAVE_OPENCL
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

extern char** environ;

#ifndef FAKE_ZE_LLVM_SPIRV
#error "FAKE_ZE_LLVM_SPIRV must name the llvm-spirv that builds the plugin's kernels"
#endif

namespace fake_ze {
namespace {

struct Runtime {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context context = nullptr;
  std::string error;  // why PoCL is not usable
};

// Created once and kept for the process (programs are cached across contexts).
Runtime& runtime() {
  static Runtime* rt = [] {
    auto* r = new Runtime;
    cl_uint n = 0;
    if (clGetPlatformIDs(1, &r->platform, &n) != CL_SUCCESS || n == 0) {
      r->error = "no OpenCL platform (install pocl-opencl-icd)";
    } else if (clGetDeviceIDs(r->platform, CL_DEVICE_TYPE_ALL, 1, &r->device, &n) != CL_SUCCESS ||
               n == 0) {
      r->error = "the OpenCL platform has no device";
    } else {
      cl_int err = 0;
      r->context = clCreateContext(nullptr, 1, &r->device, nullptr, nullptr, &err);
      if (err != CL_SUCCESS) r->error = "clCreateContext failed: " + std::to_string(err);
    }
    return r;
  }();
  return *rt;
}

std::string temp_path(const char* suffix) {
  const char* dir = std::getenv("TMPDIR");
  std::string p = std::string(dir != nullptr && dir[0] != '\0' ? dir : "/tmp") + "/fake-ze-XXXXXX";
  std::vector<char> buf(p.begin(), p.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) return {};
  ::close(fd);
  ::unlink(buf.data());
  return std::string(buf.data()) + suffix;
}

// SPIR-V -> SPIR bitcode with llvm-spirv -r; "" or why not.
std::string spirv_to_bitcode(const std::uint8_t* spirv, std::size_t size, std::string* bitcode) {
  const std::string in = temp_path(".spv"), out = temp_path(".bc");
  if (in.empty() || out.empty()) return "cannot create a temporary file";
  std::ofstream(in, std::ios::binary)
      .write(reinterpret_cast<const char*>(spirv), static_cast<std::streamsize>(size));
  const std::string tool = FAKE_ZE_LLVM_SPIRV;
  std::vector<std::string> args = {tool, "-r", "--spirv-target-env=CL1.2", in, "-o", out};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  const bool ran = ::posix_spawn(&pid, tool.c_str(), nullptr, nullptr, argv.data(), environ) == 0 &&
                   ::waitpid(pid, &status, 0) == pid;
  std::ifstream bc(out, std::ios::binary);
  bitcode->assign(std::istreambuf_iterator<char>(bc), std::istreambuf_iterator<char>());
  ::unlink(in.c_str());
  ::unlink(out.c_str());
  if (!ran || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || bitcode->empty())
    return tool + " -r failed on the module's SPIR-V";
  return {};
}

std::string build_log(cl_program p, cl_device_id d) {
  std::size_t size = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  return log;
}

// Per worker thread: an in-order queue and one cl_kernel per (program, name), since
// clSetKernelArg on a kernel shared between threads would race.
struct ThreadState {
  cl_command_queue queue = nullptr;
  std::map<std::pair<void*, std::string>, cl_kernel> kernels;
  ~ThreadState() {
    for (auto& [key, k] : kernels) clReleaseKernel(k);
    if (queue != nullptr) clReleaseCommandQueue(queue);
  }
};

}  // namespace

const char* kernel_executor() {
  const char* v = std::getenv("FAKE_ZE_KERNELS");
  return v != nullptr && std::strcmp(v, "cpu") == 0 ? "cpu" : "pocl";
}

void* pocl_program(const std::uint8_t* spirv, std::size_t size, std::string* log) {
  static std::mutex mutex;
  static auto* cache = new std::map<std::string, cl_program>;  // by SPIR-V bytes
  std::lock_guard lock(mutex);
  Runtime& rt = runtime();
  if (!rt.error.empty())
    return *log = rt.error + " (FAKE_ZE_KERNELS=cpu runs the CPU reference instead)", nullptr;
  std::string key(reinterpret_cast<const char*>(spirv), size);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  std::string bitcode;
  if (std::string why = spirv_to_bitcode(spirv, size, &bitcode); !why.empty())
    return *log = why, nullptr;
  const auto* bytes = reinterpret_cast<const unsigned char*>(bitcode.data());
  const std::size_t n = bitcode.size();
  cl_int err = 0, status = 0;
  cl_program p = clCreateProgramWithBinary(rt.context, 1, &rt.device, &n, &bytes, &status, &err);
  if (err != CL_SUCCESS) return *log = "clCreateProgramWithBinary: " + std::to_string(err), nullptr;
  if (clBuildProgram(p, 1, &rt.device, "-x spir -spir-std=1.2", nullptr, nullptr) != CL_SUCCESS) {
    *log = "PoCL build failed:\n" + build_log(p, rt.device);
    clReleaseProgram(p);
    return nullptr;
  }
  cache->emplace(std::move(key), p);
  return p;
}

std::string pocl_run(void* program, const KernelLaunch& launch, const KernelPlan& plan) {
  thread_local ThreadState ts;
  Runtime& rt = runtime();
  cl_int err = 0;
  if (ts.queue == nullptr)
    ts.queue = clCreateCommandQueueWithProperties(rt.context, rt.device, nullptr, &err);
  if (ts.queue == nullptr) return "clCreateCommandQueue: " + std::to_string(err);
  cl_kernel& k = ts.kernels[{program, launch.name}];
  if (k == nullptr) k = clCreateKernel(static_cast<cl_program>(program), launch.name.c_str(), &err);
  if (k == nullptr) return "clCreateKernel(" + launch.name + "): " + std::to_string(err);
  for (std::uint32_t i = 0; i < launch.args.size(); ++i) {
    const auto& bytes = launch.args[i];
    const bool pointer =
        std::find(plan.pointer_args.begin(), plan.pointer_args.end(), i) != plan.pointer_args.end();
    void* value = nullptr;
    if (pointer) std::memcpy(&value, bytes.data(), sizeof value);
    err = pointer ? clSetKernelArgSVMPointer(k, i, value)
                  : clSetKernelArg(k, i, bytes.size(), bytes.data());
    if (err != CL_SUCCESS)
      return "clSetKernelArg " + std::to_string(i) + ": " + std::to_string(err);
  }
  const std::uint32_t counts[3] = {launch.groups.groupCountX, launch.groups.groupCountY,
                                   launch.groups.groupCountZ};
  std::size_t global[3], local[3];
  for (int d = 0; d < 3; ++d) {
    local[d] = launch.group_size[d];
    global[d] = static_cast<std::size_t>(counts[d]) * local[d];
  }
  err = clEnqueueNDRangeKernel(ts.queue, k, 3, nullptr, global, local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return "clEnqueueNDRangeKernel: " + std::to_string(err);
  err = clFinish(ts.queue);
  return err == CL_SUCCESS ? std::string() : "clFinish: " + std::to_string(err);
}

}  // namespace fake_ze

#else  // no OpenCL at build time: modules cannot be built unless FAKE_ZE_KERNELS=cpu

namespace fake_ze {
const char* kernel_executor() {
  const char* v = std::getenv("FAKE_ZE_KERNELS");
  return v != nullptr && std::strcmp(v, "cpu") == 0 ? "cpu" : "pocl";
}
void* pocl_program(const std::uint8_t*, std::size_t, std::string* log) {
  *log = "the fake driver was built without OpenCL (set FAKE_ZE_KERNELS=cpu)";
  return nullptr;
}
std::string pocl_run(void*, const KernelLaunch&, const KernelPlan&) { return "no OpenCL"; }
}  // namespace fake_ze

#endif
