// Copies the layer loader's groups into device memory for the engine's
// accelerator path (engine.h): a group lands in a device buffer (a "slot")
// on a side stream while the compute stream still runs the previous group,
// and the compute stream waits for the copy before it touches the slot.
//
//   const unsigned char* weights = stager.Stage(slot, group.base, group.bytes);
//   ... queue the group's kernels on the compute stream (the current stream) ...
//   stager.Release(slot);  // the next Stage into `slot` waits for those kernels
//
// On a CUDA device the copies are asynchronous when the host memory is
// page-locked (PinnedBuffer) and are ordered with events; the host only waits
// for the copy itself, never for the compute stream's kernels, except when a
// slot is still in use by them. On the CPU (the accelerator path as tests run
// it) a copy is complete when Stage returns and there is nothing to order.
//
// Written against c10's device-generic streams and events, so it compiles
// with any libtorch and runs CUDA only where the linked one has it. Not
// thread-safe: the thread driving the engine calls it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace nightshift::engine {

class DeviceStager {
 public:
  // One slot per entry of `slot_bytes` (its capacity), allocated on `device`
  // when first staged into. The compute stream is `device`'s current stream
  // now.
  DeviceStager(c10::Device device, std::vector<uint64_t> slot_bytes);
  // Waits for copies in flight.
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  struct Staged {
    const unsigned char* data = nullptr;  // the slot's memory, the bytes at the same offsets
    double slot_wait_seconds = 0;         // waiting for the kernels still reading the slot
    double copy_seconds = 0;              // waiting for the copy itself
  };
  // Copies host [data, data + bytes) into `slot` (bytes <= its capacity)
  // once the work released with the slot's previous contents has finished;
  // work queued on the compute stream after this call waits for the copy.
  // Returns when the copy is done, so the host memory may be reused.
  // libtorch exceptions (out of device memory) propagate.
  Staged Stage(size_t slot, const unsigned char* data, uint64_t bytes);

  // Marks the compute work queued so far as the last to read `slot`'s
  // current contents.
  void Release(size_t slot);

  // Frees `slot`'s device memory once the work released with its contents
  // has finished (the slot is allocated again when next staged into).
  void Free(size_t slot);

  c10::Device device() const { return device_; }

 private:
  struct Impl;
  c10::Device device_;
  std::unique_ptr<Impl> impl_;
};

// Page-locked host memory of at least `bytes`, 4096-aligned, for the layer
// loader's buffers (LayerLoaderOptions::allocate) when the engine stages to a
// CUDA device: copies from it to the GPU run as DMA beside the compute.
// Throws (a libtorch error) where the linked libtorch has no CUDA.
std::shared_ptr<unsigned char> PinnedBuffer(uint64_t bytes);

}  // namespace nightshift::engine
