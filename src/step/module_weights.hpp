// Internal to src/step: a module's bf16 parameters (and gradients) as its math reads them. Every
// schedule but deepspeed hands the math one contiguous slice of the flat array; --schedule
// deepspeed holds each fetched tensor in a block of its own, as DeepSpeed allocates each gathered
// parameter (deepspeed_memory.hpp), so a module's tensors may lie anywhere. `w + offset` is the
// element at that offset of the module's slice either way, so the math's arithmetic reads the same.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zob/bf16.hpp"

namespace zob::step_detail {

// T: const bf16 (the parameters, ModuleWeights) or bf16 (their gradients, ModuleGrads: under
// --schedule deepspeed one block per tensor as autograd allocates each, freed by its hook).
template <typename T>
class ModuleTensors {
 public:
  ModuleTensors(T* contiguous) : base_(contiguous) {}  // NOLINT: implicit on purpose
  // Per tensor: its element offset in the module's slice and where its elements are, in
  // ascending offsets, the first at 0.
  explicit ModuleTensors(std::vector<std::pair<std::int64_t, T*>> tensors)
      : tensors_(std::move(tensors)) {}

  T* at(std::int64_t offset) const {
    if (tensors_.empty()) return base_ == nullptr ? nullptr : base_ + offset;
    std::size_t lo = 0, hi = tensors_.size();  // the last tensor starting at or before offset
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (tensors_[mid].first <= offset ? lo : hi) = mid;
    }
    if (offset < tensors_[lo].first || tensors_[lo].second == nullptr) {
      throw std::logic_error("module tensors: offset " + std::to_string(offset) +
                             " lies in no tensor on the device");
    }
    return tensors_[lo].second + (offset - tensors_[lo].first);
  }
  friend T* operator+(const ModuleTensors& w, std::int64_t offset) { return w.at(offset); }

 private:
  T* base_ = nullptr;
  std::vector<std::pair<std::int64_t, T*>> tensors_;
};
using ModuleWeights = ModuleTensors<const bf16>;
using ModuleGrads = ModuleTensors<bf16>;

}  // namespace zob::step_detail
