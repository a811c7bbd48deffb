// Internal to src/step: a module's bf16 parameters as its math reads them. Every schedule but
// deepspeed hands the math one contiguous slice of the flat array; --schedule deepspeed holds
// each fetched tensor in a block of its own, as DeepSpeed allocates each gathered parameter
// (deepspeed_memory.hpp), so a module's tensors may lie anywhere. `w + offset` is the element
// at that offset of the module's slice either way, so the math's arithmetic reads the same.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zob/bf16.hpp"

namespace zob::step_detail {

class ModuleWeights {
 public:
  ModuleWeights(const bf16* contiguous) : base_(contiguous) {}  // NOLINT: implicit on purpose
  // Per tensor: its element offset in the module's slice and where its elements are, in
  // ascending offsets, the first at 0.
  explicit ModuleWeights(std::vector<std::pair<std::int64_t, const bf16*>> tensors)
      : tensors_(std::move(tensors)) {}

  const bf16* at(std::int64_t offset) const {
    if (tensors_.empty()) return base_ == nullptr ? nullptr : base_ + offset;
    std::size_t lo = 0, hi = tensors_.size();  // the last tensor starting at or before offset
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (tensors_[mid].first <= offset ? lo : hi) = mid;
    }
    if (offset < tensors_[lo].first || tensors_[lo].second == nullptr) {
      throw std::logic_error("module weights: offset " + std::to_string(offset) +
                             " lies in no tensor on the device");
    }
    return tensors_[lo].second + (offset - tensors_[lo].first);
  }
  friend const bf16* operator+(const ModuleWeights& w, std::int64_t offset) { return w.at(offset); }

 private:
  const bf16* base_ = nullptr;
  std::vector<std::pair<std::int64_t, const bf16*>> tensors_;
};

}  // namespace zob::step_detail
