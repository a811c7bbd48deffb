// The backend's OpenCL C kernels (src/backends/level_zero/kernels/*.cl) built from source and
// run on PoCL, the CPU OpenCL implementation, against zob::cpu on fresh random data with the
// same launch geometry as the backend. The one place here where that code really executes.
// Tolerances: exact where the kernel and zob::cpu do the same fp32 operations in the same
// order (adds, gathers, casts, ordered column sums); one bf16 ulp where libm's erf/exp differ
// (gelu), the GEMM's summation order differs from sgemm's, or the sum's tree differs. The
// AdamW ops of tensor.cl (lerp, sqrt, div_scalar, addcmul, addcdiv): exact, fp32 and bf16 out
// (PoCL's sqrt and divisions are IEEE, and FP_CONTRACT is off).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/cpu_tensor_ops.hpp"
#include "zob/bf16.hpp"
#include "zob/device.hpp"

#ifndef ZOB_L0_KERNEL_DIR
#error "ZOB_L0_KERNEL_DIR must name src/backends/level_zero/kernels"
#endif

namespace zob {
namespace {

std::vector<bf16> random_bf16(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<bf16> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

class PoCL : public ::testing::Test {
 protected:
  void SetUp() override {
    cl_uint n = 0;
    if (clGetPlatformIDs(1, &platform_, &n) != CL_SUCCESS || n == 0)
      GTEST_SKIP() << "no OpenCL platform (install pocl-opencl-icd): kernels not executed";
    if (clGetDeviceIDs(platform_, CL_DEVICE_TYPE_ALL, 1, &device_, &n) != CL_SUCCESS || n == 0)
      GTEST_SKIP() << "the OpenCL platform has no device";
    cl_int err = 0;
    ctx_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS);
    queue_ = clCreateCommandQueue(ctx_, device_, 0, &err);
    ASSERT_EQ(err, CL_SUCCESS);
  }
  void TearDown() override {
    for (auto* m : mems_) clReleaseMemObject(m);
    for (auto& [name, k] : kernels_) clReleaseKernel(k);
    for (auto& [name, p] : programs_) clReleaseProgram(p);
    if (queue_ != nullptr) clReleaseCommandQueue(queue_);
    if (ctx_ != nullptr) clReleaseContext(ctx_);
  }

  cl_kernel kernel(const std::string& file, const std::string& name) {
    if (kernels_.count(name)) return kernels_[name];
    if (!programs_.count(file)) {
      std::ifstream in(std::string(ZOB_L0_KERNEL_DIR) + "/" + file + ".cl");
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string src = ss.str();
      EXPECT_FALSE(src.empty()) << file;
      const char* text = src.c_str();
      cl_int err = 0;
      cl_program p = clCreateProgramWithSource(ctx_, 1, &text, nullptr, &err);
      EXPECT_EQ(err, CL_SUCCESS);
      const std::string opts = std::string("-cl-std=CL1.2 -I ") + ZOB_L0_KERNEL_DIR;
      if (clBuildProgram(p, 1, &device_, opts.c_str(), nullptr, nullptr) != CL_SUCCESS) {
        std::size_t size = 0;
        clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
        std::string log(size, '\0');
        clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
        ADD_FAILURE() << file << ".cl does not build:\n" << log;
      }
      programs_[file] = p;
    }
    cl_int err = 0;
    cl_kernel k = clCreateKernel(programs_[file], name.c_str(), &err);
    EXPECT_EQ(err, CL_SUCCESS) << name;
    return kernels_[name] = k;
  }

  template <typename T>
  cl_mem upload(const std::vector<T>& v) {
    cl_int err = 0;
    cl_mem m = clCreateBuffer(ctx_, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, v.size() * sizeof(T),
                              const_cast<T*>(v.data()), &err);
    EXPECT_EQ(err, CL_SUCCESS);
    mems_.push_back(m);
    return m;
  }
  template <typename T>
  std::vector<T> download(cl_mem m, std::size_t n) {
    std::vector<T> v(n);
    EXPECT_EQ(
        clEnqueueReadBuffer(queue_, m, CL_TRUE, 0, n * sizeof(T), v.data(), 0, nullptr, nullptr),
        CL_SUCCESS);
    return v;
  }

  // Launches like LevelZeroDevice: global rounded up to the work-group size.
  template <typename... A>
  void run(const std::string& file, const std::string& name, std::array<std::size_t, 2> items,
           std::array<std::size_t, 2> local, const A&... args) {
    cl_kernel k = kernel(file, name);
    cl_uint i = 0;
    auto set = [&](std::size_t size, const void* value) {
      EXPECT_EQ(clSetKernelArg(k, i, size, value), CL_SUCCESS) << name << " argument " << i;
      ++i;
    };
    (set(sizeof(A), &args), ...);
    const std::size_t global[2] = {(items[0] + local[0] - 1) / local[0] * local[0],
                                   (items[1] + local[1] - 1) / local[1] * local[1]};
    ASSERT_EQ(
        clEnqueueNDRangeKernel(queue_, k, 2, nullptr, global, local.data(), 0, nullptr, nullptr),
        CL_SUCCESS)
        << name;
    ASSERT_EQ(clFinish(queue_), CL_SUCCESS);
  }

  std::mt19937 rng{std::random_device{}()};

 private:
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context ctx_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::map<std::string, cl_program> programs_;
  std::map<std::string, cl_kernel> kernels_;
  std::vector<cl_mem> mems_;
};

constexpr std::size_t kWg = 256;

void expect_exact(const std::vector<bf16>& got, const std::vector<bf16>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) bad += got[i].bits != want[i].bits;
  EXPECT_EQ(bad, 0u) << what << ": elements differing in any bit";
}

// |got - want| <= rel * |want| + abs, elementwise.
void expect_close(const std::vector<bf16>& got, const std::vector<bf16>& want, float rel, float abs,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float g = bf16_to_f32(got[i]), w = bf16_to_f32(want[i]);
    if (!(std::fabs(g - w) <= rel * std::fabs(w) + abs)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": elements outside " << rel << "*|want| + " << abs;
}

constexpr float kBf16Ulp = 1.0f / 128;  // one bf16 ulp, relative (8 significant bits)

// Work-items along one dimension for `count` elements, `per_item` each (launch geometry).
std::size_t items_for(std::int64_t count, std::int64_t per_item) {
  return static_cast<std::size_t>((count + per_item - 1) / per_item);
}

TEST_F(PoCL, GemmAllTransposes) {
  // Several 64x64 blocks, each dimension with a partial block.
  const std::int64_t m = 150, n = 131, k = 70, pad = 5;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    auto a = random_bf16(static_cast<std::size_t>((ta ? k : m) * lda), rng);
    auto b = random_bf16(static_cast<std::size_t>((tb ? n : k) * ldb), rng);
    auto c = random_bf16(static_cast<std::size_t>(m * ldc), rng);
    cl_mem da = upload(a), db = upload(b), dc = upload(c);
    const cl_int ita = ta, itb = tb;
    const cl_long lm = m, ln = n, lk = k, la = lda, lb = ldb, lc = ldc;
    // A 16x16 work-group per 64x64 block of C.
    run("gemm", "gemm", {items_for(n, 64) * 16, items_for(m, 64) * 16}, {16, 16}, ita, itb, lm, ln,
        lk, da, la, db, lb, dc, lc);
    cpu::gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, nullptr);
    // fp32 sums of 70 products in another order, then one rounding: one bf16 ulp plus a little.
    expect_close(download<bf16>(dc, c.size()), c, kBf16Ulp, 1e-3f,
                 ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
  }
}

TEST_F(PoCL, EmbeddingForwardAndBackward) {
  const std::int64_t vocab = 40, hidden = 300, tokens = 90;
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (auto& x : ids) x = id(rng);
  auto table = random_bf16(static_cast<std::size_t>(vocab * hidden), rng);
  std::vector<bf16> out(static_cast<std::size_t>(tokens * hidden));
  cl_mem dids = upload(ids), dtable = upload(table), dout = upload(out);
  const cl_long lt = tokens, lh = hidden;
  run("embedding", "embedding_forward",
      {static_cast<std::size_t>(hidden), static_cast<std::size_t>(tokens)}, {kWg, 1}, dids, dtable,
      dout, lt, lh);
  cpu::embedding_forward(ids.data(), table.data(), out.data(), tokens, hidden, nullptr);
  expect_exact(download<bf16>(dout, out.size()), out, "embedding_forward");

  std::map<std::int32_t, std::vector<std::int32_t>> where;
  for (std::int32_t t = 0; t < tokens; ++t) where[ids[static_cast<std::size_t>(t)]].push_back(t);
  std::vector<std::int32_t> uniq, offsets{0}, positions;
  for (auto& [u, ps] : where) {
    uniq.push_back(u);
    positions.insert(positions.end(), ps.begin(), ps.end());
    offsets.push_back(static_cast<std::int32_t>(positions.size()));
  }
  auto grad = random_bf16(static_cast<std::size_t>(tokens * hidden), rng);
  auto dtab = random_bf16(static_cast<std::size_t>(vocab * hidden), rng);
  cl_mem du = upload(uniq), doff = upload(offsets), dpos = upload(positions), dg = upload(grad),
         ddt = upload(dtab);
  const cl_long nu = static_cast<cl_long>(uniq.size());
  run("embedding", "embedding_backward", {static_cast<std::size_t>(hidden), uniq.size()}, {kWg, 1},
      du, doff, dpos, nu, dg, ddt, lh);
  cpu::embedding_backward(uniq.data(), offsets.data(), positions.data(), nu, grad.data(),
                          dtab.data(), hidden, nullptr);
  expect_exact(download<bf16>(ddt, dtab.size()), dtab, "embedding_backward");
}

TEST_F(PoCL, Elementwise) {
  const std::int64_t rows = 17, cols = 301, n = rows * cols;
  const cl_long lr = rows, lc = cols, ln = n;
  auto y = random_bf16(static_cast<std::size_t>(n), rng),
       bias = random_bf16(static_cast<std::size_t>(cols), rng);
  auto other = random_bf16(static_cast<std::size_t>(n), rng);
  std::vector<bf16> act(static_cast<std::size_t>(n)), dpre(static_cast<std::size_t>(n));
  cl_mem dy = upload(y), db = upload(bias), dother = upload(other), dact = upload(act),
         ddpre = upload(dpre);

  run("elementwise", "bias_add", {items_for(n, 4), 1}, {kWg, 1}, dy, db, lr, lc);
  cpu::bias_add(y.data(), bias.data(), rows, cols, nullptr);
  expect_exact(download<bf16>(dy, y.size()), y, "bias_add");

  run("elementwise", "bias_gelu_forward", {items_for(n, 4), 1}, {kWg, 1}, dy, db, dact, lr, lc);
  cpu::bias_gelu_forward(y.data(), bias.data(), act.data(), rows, cols, nullptr);
  expect_exact(download<bf16>(dy, y.size()), y, "bias_gelu_forward pre");
  expect_close(download<bf16>(dact, act.size()), act, kBf16Ulp, 1e-6f,
               "bias_gelu_forward act (erf)");

  run("elementwise", "gelu_backward", {items_for(n, 4), 1}, {kWg, 1}, dother, dy, ddpre, ln);
  cpu::gelu_backward(other.data(), y.data(), dpre.data(), n, nullptr);
  expect_close(download<bf16>(ddpre, dpre.size()), dpre, kBf16Ulp, 1e-6f,
               "gelu_backward (erf, exp)");

  run("elementwise", "residual_add", {items_for(n, 4), 1}, {kWg, 1}, dy, dother, ln);
  cpu::residual_add(y.data(), other.data(), n, nullptr);
  expect_exact(download<bf16>(dy, y.size()), y, "residual_add");

  const cl_float value = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);
  const cl_long nfill = n - 7;
  run("elementwise", "fill_bf16", {items_for(nfill, 4), 1}, {kWg, 1}, dy, value, nfill);
  cpu::fill(y.data(), value, nfill, nullptr);
  expect_exact(download<bf16>(dy, y.size()), y, "fill");
}

TEST_F(PoCL, CastsKeepRoundingAndNaNRules) {
  const std::int64_t n = 4099;
  std::vector<float> f(static_cast<std::size_t>(n));
  std::uniform_real_distribution<float> d(-1e4f, 1e4f);
  for (auto& v : f) v = d(rng);
  const std::uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffa00000u,
                                    0x7f800001u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
                                    0x00000001u, 0x80008000u};
  for (std::size_t i = 0; i < std::size(specials); ++i) std::memcpy(&f[i * 11], &specials[i], 4);
  std::vector<bf16> h(static_cast<std::size_t>(n));
  std::vector<float> back(static_cast<std::size_t>(n));
  cl_mem df = upload(f), dh = upload(h), dback = upload(back);
  const cl_long ln = n;
  run("elementwise", "cast_f32_to_bf16", {items_for(n, 4), 1}, {kWg, 1}, df, dh, ln);
  run("elementwise", "cast_bf16_to_f32", {items_for(n, 4), 1}, {kWg, 1}, dh, dback, ln);
  cpu::cast_f32_to_bf16(f.data(), h.data(), n, nullptr);
  cpu::cast_bf16_to_f32(h.data(), back.data(), n, nullptr);
  expect_exact(download<bf16>(dh, h.size()), h, "cast_f32_to_bf16");
  const auto got_back = download<float>(dback, back.size());
  EXPECT_EQ(std::memcmp(got_back.data(), back.data(), back.size() * 4), 0) << "cast_bf16_to_f32";
}

TEST_F(PoCL, Reductions) {
  const std::int64_t rows = 64, cols = 703;  // n % 4 != 0: the vector loads' tail
  auto x = random_bf16(std::size_t(rows * cols), rng);
  std::vector<bf16> col(static_cast<std::size_t>(cols));
  std::vector<float> result(1, 0.f);
  cl_mem dx = upload(x), dcol = upload(col), dres = upload(result);
  const cl_long lr = rows, lc = cols, ln = rows * cols;
  run("reduce", "column_sum", {static_cast<std::size_t>(cols), 1}, {kWg, 1}, dx, dcol, lr, lc);
  cpu::column_sum(x.data(), col.data(), rows, cols, nullptr);
  expect_exact(download<bf16>(dcol, col.size()), col, "column_sum (rows in order)");
  // The backend's two launches: partial sums of chunks, then one group adds them.
  const cl_long groups = 3, chunk = (ln + groups - 1) / groups;
  std::vector<float> partials(static_cast<std::size_t>(groups), 0.f);
  cl_mem dpart = upload(partials);
  run("reduce", "sum_bf16_partial", {kWg * static_cast<std::size_t>(groups), 1}, {kWg, 1}, dx, ln,
      chunk, dpart);
  run("reduce", "sum_partials", {kWg, 1}, {kWg, 1}, dpart, groups, dres);
  float want = 0, magnitude = 0;
  cpu::sum(x.data(), ln, &want, nullptr);
  for (auto v : x) magnitude += std::fabs(bf16_to_f32(v));
  const float got = download<float>(dres, 1)[0];
  // Another summation tree: fp32 rounding differences bounded by n * eps * sum|x|.
  EXPECT_NEAR(got, want, 1e-7f * static_cast<float>(ln) * magnitude / 100) << "sum_bf16";
}

// A 1-D view of n elements `stride` apart in tensor.cl's long8 form (the sixth lane; a's lane 6
// is cat_last's split, unused here).
cl_long8 lanes(std::int64_t last) {
  cl_long8 v{};
  for (int d = 0; d < 8; ++d) v.s[d] = d < 5 ? 1 : 0;
  v.s[5] = last;
  return v;
}

// tensor_elementwise with the AdamW ops (torch.optim.AdamW's foreach step): a read every second
// element, b contiguous, out read back by addcmul / addcdiv; against cpu::elementwise.
TEST_F(PoCL, TensorElementwiseAdamOps) {
  const std::int64_t n = 2053;
  std::uniform_real_distribution<float> pos(0.01f, 3.f), any(-3.f, 3.f);
  std::vector<float> a(static_cast<std::size_t>(2 * n)), b(static_cast<std::size_t>(n)),
      out0(static_cast<std::size_t>(n));
  for (auto& x : a) x = pos(rng);
  for (auto& x : b) x = any(rng);
  for (auto& x : out0) x = any(rng);
  std::vector<bf16> out16(out0.size());
  for (std::size_t i = 0; i < out0.size(); ++i) out16[i] = f32_to_bf16(out0[i]);
  cl_mem da = upload(a), db = upload(b);
  const cl_long ln = n;
  const cl_long8 size = lanes(n), unit = lanes(1), a_stride = lanes(2);
  const cl_int f32 = 1, is_bf16 = 0;
  using Op = ElementwiseOp;
  const std::pair<Op, float> cases[] = {{Op::lerp, 0.1f},     {Op::lerp, 0.8f},
                                        {Op::sqrt, 0.f},      {Op::div_scalar, 0.37f},
                                        {Op::addcmul, 1e-3f}, {Op::addcdiv, -2.5e-3f}};
  for (const auto& [op, scalar] : cases) {
    const std::string what = "op " + std::to_string(static_cast<int>(op));
    const cl_int code = static_cast<cl_int>(op);
    const cl_float s = scalar;
    cl_mem dout = upload(out0), dout16 = upload(out16);
    run("tensor", "tensor_elementwise", {static_cast<std::size_t>(n), 1}, {kWg, 1}, code, s, ln,
        size, dout, f32, unit, da, f32, a_stride, db, f32, unit);
    run("tensor", "tensor_elementwise", {static_cast<std::size_t>(n), 1}, {kWg, 1}, code, s, ln,
        size, dout16, is_bf16, unit, da, f32, a_stride, db, f32, unit);
    std::vector<float> want = out0;
    std::vector<bf16> want16 = out16;
    cpu::elementwise(op, vector_view(want.data(), DType::f32, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), scalar, nullptr);
    cpu::elementwise(op, vector_view(want16.data(), DType::bf16, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), scalar, nullptr);
    const auto got = download<float>(dout, want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << what << " fp32 out";
    expect_exact(download<bf16>(dout16, want16.size()), want16, (what + " bf16 out").c_str());
  }
}

}  // namespace
}  // namespace zob
