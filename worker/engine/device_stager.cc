#include "worker/engine/device_stager.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace nightshift::engine {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct DeviceStager::Impl {
  struct Slot {
    uint64_t capacity = 0;
    at::Tensor memory;                   // bytes on the device, allocated on first use
    std::optional<c10::Event> copied;    // the copy into it, on the copy stream
    std::optional<c10::Event> released;  // the compute stream's last use of it
  };

  std::vector<Slot> slots;
  // Set on devices with streams (not the CPU).
  std::optional<c10::impl::VirtualGuardImpl> guard;
  std::optional<c10::Stream> compute;
  std::optional<c10::Stream> copy;
};

DeviceStager::DeviceStager(c10::Device device, std::vector<uint64_t> slot_bytes)
    : device_(device), impl_(std::make_unique<Impl>()) {
  for (uint64_t bytes : slot_bytes) impl_->slots.emplace_back().capacity = bytes;
  if (device_.is_cpu()) return;
  impl_->guard.emplace(device_.type());
  // "cuda" means the current GPU: name it, so that streams and events agree.
  if (!device_.has_index())
    device_ = c10::Device(device_.type(), impl_->guard->getDevice().index());
  impl_->compute = impl_->guard->getStream(device_);
  impl_->copy = impl_->guard->getStreamFromGlobalPool(device_);
}

DeviceStager::~DeviceStager() {
  try {
    if (impl_->copy) impl_->copy->synchronize();
    if (impl_->compute) impl_->compute->synchronize();
  } catch (...) {  // a failed device is reported by the call that used it
  }
}

DeviceStager::Staged DeviceStager::Stage(size_t index, const unsigned char* data, uint64_t bytes) {
  Impl::Slot& slot = impl_->slots.at(index);
  if (bytes > slot.capacity) {
    throw std::invalid_argument("device stager: " + std::to_string(bytes) +
                                " bytes for a slot of " + std::to_string(slot.capacity));
  }
  if (!slot.memory.defined()) {
    slot.memory = at::empty({static_cast<int64_t>(slot.capacity)},
                            at::TensorOptions().dtype(at::kByte).device(device_));
  }
  const at::Tensor source =
      at::from_blob(const_cast<unsigned char*>(data), {static_cast<int64_t>(bytes)}, at::kByte);
  at::Tensor target = slot.memory.narrow(0, 0, static_cast<int64_t>(bytes));
  Staged out;
  out.data = slot.memory.data_ptr<uint8_t>();
  Clock::time_point start = Clock::now();
  if (!impl_->copy) {
    target.copy_(source);
    out.copy_seconds = SecondsSince(start);
    return out;
  }
  // The kernels that read the slot's previous contents must finish before
  // the copy overwrites it. Waiting for them here (rather than only ordering
  // the copy stream after them) tells compute time from copy time.
  if (slot.released) {
    while (!slot.released->query()) std::this_thread::yield();
    out.slot_wait_seconds = SecondsSince(start);
    start = Clock::now();
  }
  {
    c10::StreamGuard on_copy_stream(*impl_->copy);
    target.copy_(source, /*non_blocking=*/true);
  }
  // The compute stream waits for the copy.
  if (!slot.copied) slot.copied.emplace(device_.type());
  slot.copied->record(*impl_->copy);
  slot.copied->block(*impl_->compute);
  impl_->copy->synchronize();
  out.copy_seconds = SecondsSince(start);
  return out;
}

void DeviceStager::Release(size_t index) {
  if (!impl_->compute) return;
  Impl::Slot& slot = impl_->slots.at(index);
  if (!slot.released) slot.released.emplace(device_.type());
  slot.released->record(*impl_->compute);
}

void DeviceStager::Free(size_t index) {
  Impl::Slot& slot = impl_->slots.at(index);
  if (slot.released) {
    while (!slot.released->query()) std::this_thread::yield();
  }
  slot.memory = at::Tensor();
}

std::shared_ptr<unsigned char> PinnedBuffer(uint64_t bytes) {
  constexpr uint64_t kAlign = 4096;
  at::Tensor memory = at::empty({static_cast<int64_t>(bytes + kAlign)},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  const uintptr_t start = reinterpret_cast<uintptr_t>(memory.data_ptr());
  auto* aligned = reinterpret_cast<unsigned char*>((start + kAlign - 1) / kAlign * kAlign);
  // The deleter owns the tensor: the memory lives as long as the pointer.
  return std::shared_ptr<unsigned char>(aligned, [memory](unsigned char*) {});
}

}  // namespace nightshift::engine
