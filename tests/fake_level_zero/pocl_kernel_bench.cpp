// Times the xpu kernels on PoCL (the CPU OpenCL device), old shapes against new, each with its
// own launch geometry: a relative figure on a CPU, not a GPU number.
//   pocl_kernel_bench OLD_KERNEL_DIR NEW_KERNEL_DIR [REPEATS]
// OLD: one output per GEMM work-item (16x16 local tile), one element per element-wise item,
// the sum in one work-group. NEW: register-tiled GEMM (4x4 per item), 4 elements per item,
// the sum over up to 512 work-groups then one. Prints one line per kernel: median seconds.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Cl {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  cl_context ctx = nullptr;
  cl_command_queue queue = nullptr;
};

bool ok(cl_int err, const char* what) {
  if (err != CL_SUCCESS) std::fprintf(stderr, "%s failed: %d\n", what, err);
  return err == CL_SUCCESS;
}

cl_program build(Cl& cl, const std::string& dir, const std::string& file) {
  std::ifstream in(dir + "/" + file + ".cl");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string src = ss.str();
  const char* text = src.c_str();
  cl_int err = 0;
  cl_program p = clCreateProgramWithSource(cl.ctx, 1, &text, nullptr, &err);
  const std::string opts = "-cl-std=CL1.2 -I " + dir;
  if (!ok(err, "clCreateProgramWithSource") ||
      !ok(clBuildProgram(p, 1, &cl.device, opts.c_str(), nullptr, nullptr), file.c_str()))
    std::exit(1);
  return p;
}

template <typename... A>
void launch(Cl& cl, cl_kernel k, std::size_t gx, std::size_t gy, std::size_t lx, std::size_t ly,
            const A&... args) {
  cl_uint i = 0;
  (clSetKernelArg(k, i++, sizeof(A), &args), ...);
  const std::size_t global[2] = {gx, gy}, local[2] = {lx, ly};
  if (!ok(clEnqueueNDRangeKernel(cl.queue, k, 2, nullptr, global, local, 0, nullptr, nullptr),
          "launch"))
    std::exit(1);
}

double median_seconds(Cl& cl, int repeats, const std::function<void()>& run) {
  run();  // warm-up: PoCL compiles the work-group function on first launch
  clFinish(cl.queue);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto a = std::chrono::steady_clock::now();
    run();
    clFinish(cl.queue);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::size_t up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OLD_KERNEL_DIR NEW_KERNEL_DIR [REPEATS]\n", argv[0]);
    return 2;
  }
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  Cl cl;
  cl_uint n = 0;
  cl_int err = 0;
  if (clGetPlatformIDs(1, &cl.platform, &n) != CL_SUCCESS || n == 0 ||
      clGetDeviceIDs(cl.platform, CL_DEVICE_TYPE_ALL, 1, &cl.device, &n) != CL_SUCCESS) {
    std::fprintf(stderr, "no OpenCL device\n");
    return 1;
  }
  cl.ctx = clCreateContext(nullptr, 1, &cl.device, nullptr, nullptr, &err);
  cl.queue = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);

  const cl_long M = 512, N = 512, K = 512, E = 1 << 24;  // GEMM 512^3; 16 M elements
  std::mt19937 rng(1);
  std::vector<cl_ushort> bf(static_cast<std::size_t>(E));
  for (auto& v : bf) v = static_cast<cl_ushort>(0x3f80 + (rng() & 0x3f));  // ~[1, 1.5)
  std::vector<float> f32(static_cast<std::size_t>(E), 0.75f);
  auto buffer = [&](std::size_t bytes, const void* init) {
    return clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                          const_cast<void*>(init), &err);
  };
  cl_mem a = buffer(M * K * 2, bf.data()), b = buffer(K * N * 2, bf.data()),
         c = buffer(M * N * 2, nullptr);
  cl_mem x = buffer(E * 2, bf.data()), y = buffer(E * 2, bf.data()), f = buffer(E * 4, f32.data());
  cl_mem partials = buffer(512 * 4, nullptr), result = buffer(4, nullptr);

  std::printf("%-22s %12s %12s %8s\n", "kernel (size)", "old s", "new s", "old/new");
  double t[2][4] = {};
  for (int v = 0; v < 2; ++v) {
    const std::string dir = argv[1 + v];
    const bool fresh = v == 1;
    cl_program pg = build(cl, dir, "gemm"), pe = build(cl, dir, "elementwise"),
               pr = build(cl, dir, "reduce");
    cl_kernel gemm = clCreateKernel(pg, "gemm", &err);
    cl_kernel cast = clCreateKernel(pe, "cast_f32_to_bf16", &err);
    cl_kernel radd = clCreateKernel(pe, "residual_add", &err);
    const cl_int no = 0;
    t[v][0] = median_seconds(cl, repeats, [&] {
      if (fresh)
        launch(cl, gemm, up(N, 64) / 4, up(M, 64) / 4, 16, 16, no, no, M, N, K, a, K, b, N, c, N);
      else launch(cl, gemm, up(N, 16), up(M, 16), 16, 16, no, no, M, N, K, a, K, b, N, c, N);
    });
    const std::size_t items =
        fresh ? up(static_cast<std::size_t>(E) / 4, 256) : static_cast<std::size_t>(E);
    t[v][1] = median_seconds(cl, repeats, [&] { launch(cl, cast, items, 1, 256, 1, f, x, E); });
    t[v][2] = median_seconds(cl, repeats, [&] { launch(cl, radd, items, 1, 256, 1, x, y, E); });
    if (fresh) {
      cl_kernel part = clCreateKernel(pr, "sum_bf16_partial", &err);
      cl_kernel fin = clCreateKernel(pr, "sum_partials", &err);
      const cl_long groups = 512, chunk = E / groups;  // lanes.cpp: min(ceil(E / 4096), 512)
      t[v][3] = median_seconds(cl, repeats, [&] {
        launch(cl, part, 256 * groups, 1, 256, 1, x, E, chunk, partials);
        launch(cl, fin, 256, 1, 256, 1, partials, groups, result);
      });
    } else {
      cl_kernel sum = clCreateKernel(pr, "sum_bf16", &err);
      t[v][3] = median_seconds(cl, repeats, [&] { launch(cl, sum, 256, 1, 256, 1, x, E, result); });
    }
  }
  const char* names[4] = {"gemm (512^3, NN)", "cast_f32_to_bf16 (16M)", "residual_add (16M)",
                          "sum (16M)"};
  for (int i = 0; i < 4; ++i)
    std::printf("%-22s %12.4f %12.4f %8.2f\n", names[i], t[0][i], t[1][i], t[0][i] / t[1][i]);
  return 0;
}
