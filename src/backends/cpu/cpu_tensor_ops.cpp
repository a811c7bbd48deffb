// The CPU reference of the generic strided tensor operations (cpu_tensor_ops.hpp).
#include "cpu_tensor_ops.hpp"

#include <string>

#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob::cpu {
namespace {

float load(const TensorView& v, std::int64_t at) {
  return v.dtype == DType::f32 ? static_cast<const float*>(v.data)[at]
                               : bf16_to_f32(static_cast<const bf16*>(v.data)[at]);
}

void store(const TensorView& v, std::int64_t at, float x) {
  if (v.dtype == DType::f32) {
    static_cast<float*>(const_cast<void*>(v.data))[at] = x;
  } else {
    static_cast<bf16*>(const_cast<void*>(v.data))[at] = f32_to_bf16(x);
  }
}

// The element offset in v of the linear index i of a view with v's sizes over `dims` dims.
std::int64_t offset_of(const TensorView& v, std::int64_t i, int dims) {
  std::int64_t at = 0;
  for (int d = dims - 1; d >= 0; --d) {
    const std::int64_t n = v.size[d];
    at += (i % n) * v.stride[d];
    i /= n;
  }
  return at;
}

void run(std::int64_t n, ThreadPool* pool,
         const std::function<void(std::int64_t, std::int64_t)>& f) {
  if (pool != nullptr && n > 4096) {
    pool->parallel_for(n, f);
  } else {
    f(0, n);
  }
}

// cat_last's element i of out: from a or b, at the offset of out's index in it.
float cat_element(const TensorView& out, const TensorView& a, const TensorView& b, std::int64_t i) {
  const int last = kViewDims - 1;
  const std::int64_t k = i % out.size[last], rest = i / out.size[last];
  const std::int64_t na = a.size[last];
  const TensorView& v = k < na ? a : b;
  return load(v, offset_of(v, rest, last) + (k < na ? k : k - na) * v.stride[last]);
}

}  // namespace

void check_elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                       const TensorView& b) {
  const std::string why = elementwise_problem(op, out, a, b);
  if (!why.empty()) throw DeviceError(DeviceErrorKind::runtime, "elementwise: " + why);
}

void check_reduce_last(const TensorView& out, const TensorView& in) {
  const std::string why = reduce_last_problem(out, in);
  if (!why.empty()) throw DeviceError(DeviceErrorKind::runtime, "reduce_last: " + why);
}

void elementwise(ElementwiseOp op, const TensorView& out_view, const TensorView& a_view,
                 const TensorView& b_view, float scalar, ThreadPool* pool) {
  check_elementwise(op, out_view, a_view, b_view);
  // Coalesced as every backend may (device.hpp): the same elements, in the same order.
  TensorView out = out_view, a = a_view, b = is_binary(op) ? b_view : a_view;
  TensorView* views[] = {&out, &a, &b};
  coalesce_views(views, 3, op == ElementwiseOp::cat_last ? kViewDims - 1 : kViewDims);
  if (op == ElementwiseOp::cat_last) {
    run(out.elements(), pool, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i)
        store(out, offset_of(out, i, kViewDims), cat_element(out, a, b, i));
    });
    return;
  }
  const bool binary = is_binary(op), accumulates = reads_out(op);
  run(out.elements(), pool, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float x = load(a, offset_of(a, i, kViewDims));
      const float y = binary ? load(b, offset_of(b, i, kViewDims)) : 0.0f;
      const std::int64_t at = offset_of(out, i, kViewDims);
      const float o = accumulates ? load(out, at) : 0.0f;
      store(out, at, tensor_op_value(op, x, y, scalar, o));
    }
  });
}

void reduce_last(const TensorView& out_view, const TensorView& in_view, float scale,
                 ThreadPool* pool) {
  check_reduce_last(out_view, in_view);
  TensorView out = out_view, in = in_view;
  TensorView* views[] = {&out, &in};
  coalesce_views(views, 2, kViewDims - 1);
  const int outer = kViewDims - 1;
  const std::int64_t n = in.size[outer], step = in.stride[outer];
  run(out.elements(), pool, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t base = offset_of(in, i, outer);
      float acc = 0.0f;
      for (std::int64_t j = 0; j < n; ++j) acc += load(in, base + j * step);
      store(out, offset_of(out, i, outer), scale * acc);
    }
  });
}

}  // namespace zob::cpu
