#include "worker/engine/compute_choice.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "worker/checkpoint/quantization.h"
#include "worker/engine/bf16_matmul.h"
#include "worker/engine/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace nightshift::engine {
namespace {

namespace fs = std::filesystem;

// 2: weights evicted from the caches before each timed run (compute_measure.cc).
// 3: bf16-avx512 timed too, and the OpenBLAS core in the key.
// 4: every cell the fastest of three interleaved rounds.
// 5: quantized shapes timed on the quantized kernel; the active instruction
//    set; f32-tile timed too.
constexpr int kCacheVersion = 5;

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string DTypeLabel(checkpoint::DType dtype) { return checkpoint::DTypeName(dtype); }

#if defined(__x86_64__)
uint64_t Xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuInfo DetectCpu() {
  CpuInfo cpu;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  char brand[49] = {};
  if (__get_cpuid(0x80000000, &eax, &ebx, &ecx, &edx) && eax >= 0x80000004) {
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      __get_cpuid(0x80000002 + leaf, &eax, &ebx, &ecx, &edx);
      std::memcpy(brand + 16 * leaf, &eax, 4);
      std::memcpy(brand + 16 * leaf + 4, &ebx, 4);
      std::memcpy(brand + 16 * leaf + 8, &ecx, 4);
      std::memcpy(brand + 16 * leaf + 12, &edx, 4);
    }
  }
  std::string model = brand;
  model.erase(model.find_last_not_of(" \0", std::string::npos, 2) + 1);
  model.erase(0, model.find_first_not_of(' '));
  unsigned family = 0, model_number = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    family = ((eax >> 8) & 0xf) + (((eax >> 8) & 0xf) == 0xf ? (eax >> 20) & 0xff : 0);
    model_number = ((eax >> 4) & 0xf) | (((eax >> 16) & 0xf) << 4);
  }
  const bool fma = ecx & bit_FMA, f16c = ecx & bit_F16C, osxsave = ecx & bit_OSXSAVE;
  cpu.model = (model.empty() ? std::string("unknown x86-64") : model) + " (family " +
              std::to_string(family) + ", model " + std::to_string(model_number) + ")";
  const uint64_t xcr0 = osxsave ? Xcr0() : 0;
  const bool avx_os = (xcr0 & 0x6) == 0x6;
  const bool avx512_os = (xcr0 & 0xe6) == 0xe6;
  const bool amx_os = (xcr0 & 0x60000) == 0x60000;
  unsigned ebx7 = 0, ecx7 = 0, edx7 = 0, eax71 = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx7, &ecx7, &edx7)) {
    unsigned b, c, d;
    __get_cpuid_count(7, 1, &eax71, &b, &c, &d);
  }
  auto add = [&](bool present, const char* name) {
    if (present) cpu.flags.emplace_back(name);
  };
  add(avx_os && (ebx7 & (1u << 5)), "avx2");
  add(avx_os && fma, "fma");
  add(avx_os && f16c, "f16c");
  add(avx_os && (eax71 & (1u << 4)), "avx_vnni");
  add(avx512_os && (ebx7 & (1u << 16)), "avx512f");
  add(avx512_os && (ebx7 & (1u << 30)), "avx512bw");
  add(avx512_os && (ebx7 & (1u << 31)), "avx512vl");
  add(avx512_os && (ecx7 & (1u << 11)), "avx512_vnni");
  add(avx512_os && (eax71 & (1u << 5)), "avx512_bf16");
  add(avx512_os && (edx7 & (1u << 23)), "avx512_fp16");
  add(amx_os && (edx7 & (1u << 24)), "amx_tile");
  add(amx_os && (edx7 & (1u << 22)), "amx_bf16");
  return cpu;
}
#else
CpuInfo DetectCpu() { return {"unknown (not x86-64)", {}}; }
#endif

}  // namespace

const char* ComputeDTypeName(ComputeDType dtype) {
  switch (dtype) {
    case ComputeDType::kAuto:
      return "auto";
    case ComputeDType::kFloat32:
      return "f32";
    case ComputeDType::kBFloat16:
      return "bf16";
  }
  return "?";
}

StatusOr<ComputeDType> ParseComputeDType(const std::string& name) {
  if (name == "auto") return ComputeDType::kAuto;
  if (name == "f32" || name == "float32") return ComputeDType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return ComputeDType::kBFloat16;
  return InvalidArgument("compute dtype '" + name + "': expected auto, f32 or bf16");
}

const char* ProjectionKernelName(ProjectionKernel kernel) {
  switch (kernel) {
    case ProjectionKernel::kF32Small:
      return "f32-small";
    case ProjectionKernel::kF32Gemm:
      return "f32-gemm";
    case ProjectionKernel::kBf16Gemm:
      return "bf16-gemm";
    case ProjectionKernel::kBf16Avx512:
      return "bf16-avx512";
    case ProjectionKernel::kF32Tile:
      return "f32-tile";
  }
  return "?";
}

bool IsBatchInvariant(ProjectionKernel kernel) {
  return kernel == ProjectionKernel::kF32Tile || kernel == ProjectionKernel::kBf16Avx512;
}

bool IsInvariantPlan(const KernelPlan& plan) {
  return IsBatchInvariant(plan[0]) &&
         std::all_of(plan.begin(), plan.end(), [&](ProjectionKernel k) { return k == plan[0]; });
}

bool IsBf16Kernel(ProjectionKernel kernel) {
  return kernel == ProjectionKernel::kBf16Gemm || kernel == ProjectionKernel::kBf16Avx512;
}

size_t RowBucket(int64_t rows) {
  size_t bucket = 0;
  while (bucket + 1 < kRowBucketCount && kRowBuckets[bucket + 1] <= rows) ++bucket;
  return bucket;
}

KernelPlan Float32Plan(bool small_fast) {
  KernelPlan plan;
  for (size_t b = 0; b < kRowBucketCount; ++b) {
    // kSmallMatmulMaxRows (small_matmul.h) is 32.
    plan[b] = small_fast && kRowBuckets[b] <= 32 ? ProjectionKernel::kF32Small
                                                 : ProjectionKernel::kF32Gemm;
  }
  return plan;
}

ProjectionKernel DefaultBf16Kernel() {
  return Bf16MatmulSupported() ? ProjectionKernel::kBf16Avx512 : ProjectionKernel::kBf16Gemm;
}

KernelPlan Bf16Plan() {
  KernelPlan plan;
  plan.fill(DefaultBf16Kernel());
  return plan;
}

ProjectionShape ShapeOf(const checkpoint::TensorInfo& t) {
  ProjectionShape s;
  s.out = t.shape.size() == 2 ? t.shape[0] : 0;
  s.in = t.shape.size() == 2 ? t.shape[1] : 0;
  s.dtype = t.dtype;
  if (const checkpoint::QuantizedTensor* q = t.quant.get()) {
    s.quant = q->format;
    const bool int4 =
        q->format == checkpoint::QuantFormat::kAwq || q->format == checkpoint::QuantFormat::kGptq;
    if (int4) {
      s.group_size = q->group_size;
      s.g_idx = q->format == checkpoint::QuantFormat::kGptq && q->parts.size() > 3;
    } else {
      s.block_out = q->block_out;
      s.block_in = q->block_in;
    }
    s.scale_dtype = q->parts[int4 ? 2 : 1].dtype;
  }
  return s;
}

double FlopsPerRow(const std::vector<ProjectionShape>& shapes) {
  double flops = 0;
  for (const ProjectionShape& s : shapes) {
    flops += 2.0 * static_cast<double>(s.out) * static_cast<double>(s.in) *
             static_cast<double>(s.per_pass);
  }
  return flops;
}

double ComputeMeasurement::FlopsPerSecond(ProjectionKernel kernel, size_t bucket) const {
  const double s = Seconds(kernel, bucket);
  if (!(s > 0)) return 0;
  return flops_per_row * static_cast<double>(kRowBuckets[bucket]) / s;
}

ComputeMeasurement MeasureInRounds(const std::vector<ProjectionShape>& shapes, int rounds,
                                   const CellTimer& time) {
  using Cells = std::array<std::array<double, kRowBucketCount>, kProjectionKernelCount>;
  std::vector<Cells> fastest(shapes.size());
  for (Cells& cells : fastest) {
    for (auto& row : cells) row.fill(-1);
  }
  for (int round = 0; round < rounds; ++round) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      for (size_t b = 0; b < kRowBucketCount; ++b) {
        for (size_t k = 0; k < static_cast<size_t>(kProjectionKernelCount); ++k) {
          const double seconds = time(s, static_cast<ProjectionKernel>(k), b, round);
          double& cell = fastest[s][k][b];
          if (seconds >= 0 && (cell < 0 || seconds < cell)) cell = seconds;
        }
      }
    }
  }
  ComputeMeasurement m;
  m.flops_per_row = FlopsPerRow(shapes);
  for (size_t k = 0; k < static_cast<size_t>(kProjectionKernelCount); ++k) {
    for (size_t b = 0; b < kRowBucketCount; ++b) {
      double total = 0;
      for (size_t s = 0; s < shapes.size() && total >= 0; ++s) {
        const double cell = fastest[s][k][b];
        total = cell < 0 ? -1 : total + cell * static_cast<double>(shapes[s].per_pass);
      }
      m.seconds[k][b] = total;
    }
  }
  return m;
}

std::string ComputeMeasurementKey(const std::vector<ProjectionShape>& shapes, int threads,
                                  const std::string& torch_version) {
  const CpuInfo& cpu = HostCpu();
  std::ostringstream key;
  key << "v" << kCacheVersion << "; cpu " << cpu.model << " [" << cpu.FlagsString() << "]; isa "
      << IsaName(ActiveIsa()) << "; " << threads << " threads; libtorch " << torch_version
      << "; shapes";
  for (const ProjectionShape& s : shapes) {
    key << " " << s.out << "x" << s.in << ":" << DTypeLabel(s.dtype);
    if (s.quant != checkpoint::QuantFormat::kNone) {
      key << "/" << checkpoint::QuantFormatName(s.quant) << "/g" << s.group_size
          << (s.g_idx ? "/g_idx" : "") << "/b" << s.block_out << "x" << s.block_in << "/"
          << DTypeLabel(s.scale_dtype);
    }
    key << "*" << s.per_pass;
  }
  return key.str();
}

namespace {

KernelPlan InvariantPlan(ComputeDType requested, bool all_f32) {
  KernelPlan plan;
  plan.fill(ProjectionKernel::kF32Tile);
  if (!all_f32 && requested != ComputeDType::kFloat32 && Bf16MatmulSupported()) {
    plan.fill(ProjectionKernel::kBf16Avx512);
  }
  return plan;
}

}  // namespace

KernelPlan ChoosePlan(ComputeDType requested, bool all_f32, bool small_fast,
                      const ComputeMeasurement* m, bool batch_invariant) {
  if (batch_invariant) return InvariantPlan(requested, all_f32);
  KernelPlan plan = Float32Plan(small_fast);
  if (all_f32 || requested == ComputeDType::kFloat32) return plan;
  if (requested == ComputeDType::kBFloat16) return Bf16Plan();
  if (m == nullptr) return plan;
  for (size_t b = 0; b < kRowBucketCount; ++b) {
    // Float32 kernels first, so that a tie keeps float32.
    double best = -1;
    for (ProjectionKernel k : {ProjectionKernel::kF32Small, ProjectionKernel::kF32Gemm,
                               ProjectionKernel::kBf16Gemm, ProjectionKernel::kBf16Avx512}) {
      if (k == ProjectionKernel::kF32Small && !small_fast) continue;
      const double s = m->Seconds(k, b);
      if (s > 0 && (best < 0 || s < best)) {
        best = s;
        plan[b] = k;
      }
    }
  }
  return plan;
}

const char* ComputeChoice::PlanDType() const {
  const auto bf16 = std::count_if(plan.begin(), plan.end(), IsBf16Kernel);
  if (bf16 == 0) return "f32";
  return bf16 == static_cast<long>(plan.size()) ? "bf16" : "mixed";
}

double ComputeChoice::FlopsPerSecond(int64_t rows) const {
  if (!measurement) return 0;
  const size_t b = RowBucket(rows);
  return measurement->FlopsPerSecond(plan[b], b);
}

std::string ComputeChoice::Describe() const {
  std::string out;
  for (size_t b = 0; b < kRowBucketCount; ++b) {
    if (b > 0 && plan[b] == plan[b - 1]) continue;
    if (!out.empty()) out += ", ";
    out += std::string(ProjectionKernelName(plan[b])) + " from " + std::to_string(kRowBuckets[b]) +
           (kRowBuckets[b] == 1 ? " row" : " rows");
  }
  return out;
}

std::string ComputeCachePath(const std::string& state_dir, const std::string& key) {
  char name[64];
  std::snprintf(name, sizeof name, "compute-%016llx.json",
                static_cast<unsigned long long>(Fnv1a(key)));
  return (fs::path(state_dir) / name).string();
}

std::optional<ComputeMeasurement> ReadComputeCache(const std::string& path,
                                                   const std::string& key) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("key", "") != key || !j.contains("seconds")) return std::nullopt;
  ComputeMeasurement m;
  m.key = key;
  try {
    m.flops_per_row = j.at("flops_per_row").get<double>();
    for (int k = 0; k < kProjectionKernelCount; ++k) {
      const auto kernel = static_cast<ProjectionKernel>(k);
      const std::vector<double> row = j.at("seconds").at(ProjectionKernelName(kernel));
      if (row.size() != kRowBucketCount) return std::nullopt;
      std::copy(row.begin(), row.end(), m.seconds[static_cast<size_t>(k)].begin());
    }
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return m;
}

Status WriteComputeCache(const std::string& path, const ComputeMeasurement& m) {
  nlohmann::json seconds = nlohmann::json::object();
  for (int k = 0; k < kProjectionKernelCount; ++k) {
    const std::array<double, kRowBucketCount>& row = m.seconds[static_cast<size_t>(k)];
    seconds[ProjectionKernelName(static_cast<ProjectionKernel>(k))] =
        std::vector<double>(row.begin(), row.end());
  }
  const nlohmann::json j = {{"key", m.key},
                            {"rows", std::vector<int64_t>(kRowBuckets.begin(), kRowBuckets.end())},
                            {"flops_per_row", m.flops_per_row},
                            {"seconds", seconds}};
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp);
    out << j.dump(1) << "\n";
    if (!out.flush()) return Unavailable(temp + ": cannot be written");
  }
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    return Unavailable(path + ": " + ec.message());
  }
  return Status::Ok();
}

bool CpuInfo::Has(const std::string& flag) const {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

std::string CpuInfo::FlagsString() const {
  std::string out;
  for (const std::string& f : flags) out += (out.empty() ? "" : " ") + f;
  return out;
}

const CpuInfo& HostCpu() {
  static const CpuInfo cpu = DetectCpu();
  return cpu;
}

}  // namespace nightshift::engine
