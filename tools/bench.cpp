// bench: what one device computes, in TFLOP/s, for the building blocks of transformer training.
//
//   build/bench [--device cuda|cpu] [--dtype fp32,tf32,fp16,bf16] [--iters 20] [--warmup 5]
//               [--quick] [--profile FILE]
//
// Rows: an n x n x n matrix multiply (2 n^3 FLOPs), an element-wise vector multiply (1 FLOP per
// element: memory-bound, shown for scale), and the forward / forward+backward of one layer of
// BERT-large, GPT-2 XL and T5-large (encoder, and decoder with cross-attention), counting the
// matrix multiplies of the layer (Megatron's convention: the full s x s attention, backward
// twice the forward). Columns: dtype x pass. tf32 is fp32 storage with TensorFloat-32 matrix
// multiplies (CUDA only). Times are the median of `iters` runs after `warmup`, taken with CUDA
// events on a GPU. --quick shrinks every size (a smoke test on a CPU).
//
// --profile FILE measures this device's profile for the planner's time model instead
// (core/plan/device_profile.h; plan --profile FILE uses it): in bf16 on a GPU, fp32 on the CPU, the
// n x n multiply's rate, memory bandwidth from the vector multiply (reads 2 and writes 1
// element each), causal attention forward and backward (b 4, 16 heads of 128, s 2048;
// LibTorch 1.x has no fused kernel: half the multiply's rate, stated) and the SM count; tiles,
// alignment, link efficiency and the node's links are the built-in profile's of this device
// (A100's for others: edit them, or override them in plan), the peak the data sheet's (on the
// CPU the measured multiply).
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/normalization.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/error.h"
#include "core/files.h"
#include "core/plan/device_profile.h"
#include "core/plan/flops.h"
#include "core/plan/time_model.h"
#include "core/text.h"
#include "train/device.h"

using namespace trident;
namespace F = torch::nn::functional;

namespace {

struct Options {
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::vector<std::string> dtypes = {"fp32", "tf32", "fp16", "bf16"};
  int64_t iters = 20, warmup = 5;
  bool quick = false;
  std::string profile_path;
};

CLI::App& describe(CLI::App& app, Options& o, std::string& device) {
  app.description("TFLOP/s of matrix multiplies and transformer layers (BERT-large, GPT-2 XL, "
                  "T5-large) on one device, as a table.");
  app.add_option("--device", device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(checked(one_of({"cpu", "cuda"})));
  app.add_option("--dtype", o.dtypes, "columns, comma-separated: fp32, tf32, fp16, bf16")
      ->delimiter(',')->check(checked(one_of({"fp32", "tf32", "fp16", "bf16"})));
  app.add_option("--iters", o.iters, "timed runs (the median is reported)")
      ->check(checked(at_least(1)))->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed runs first")->check(checked(at_least(0)))->capture_default_str();
  app.add_flag("--quick", o.quick, "toy sizes: a smoke test on a CPU");
  app.add_option("--profile", o.profile_path, "measure this device's profile for plan --profile and write it here");
  return app;
}

// One transformer layer's shape and flavour.
struct LayerShape {
  std::string name;
  int64_t hidden, heads, ffn, seq, batch;
  bool causal;       // GPT: masked self-attention
  bool cross;        // T5 decoder: attention over an encoder output of the same length
  bool post_norm;    // BERT: LayerNorm after each residual add
  bool bias;         // T5 has none
  std::string activation;  // gelu | relu
};

std::vector<LayerShape> layer_shapes(bool quick) {
  std::vector<LayerShape> shapes = {
      {"BERT-large layer", 1024, 16, 4096, 512, 16, false, false, true, true, "gelu"},
      {"GPT-2 XL layer", 1600, 25, 6400, 1024, 8, true, false, false, true, "gelu"},
      {"T5-large encoder layer", 1024, 16, 4096, 512, 16, false, false, false, false, "relu"},
      {"T5-large decoder layer", 1024, 16, 4096, 512, 16, true, true, false, false, "relu"},
  };
  for (auto& s : shapes) {
    if (quick) s.hidden = 64, s.heads = 4, s.ffn = 256, s.seq = 32, s.batch = 2;
    s.name += str(" (h ", s.hidden, ", s ", s.seq, ", b ", s.batch, ")");
  }
  return shapes;
}

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
#else
  auto scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  if (causal) {
    auto future = torch::ones({q.size(2), k.size(2)}, q.options().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  return at::matmul(scores.softmax(-1), v);
#endif
}

// The weights of one layer and its forward; x and memory are [b, s, h].
class Layer {
 public:
  Layer(const LayerShape& shape, const torch::TensorOptions& options) : s_(shape) {
    const int64_t h = s_.hidden;
    auto weight = [&](int64_t out, int64_t in) {
      return (torch::randn({out, in}, options) * 0.02).requires_grad_();
    };
    auto bias = [&](int64_t n) {
      return s_.bias ? torch::zeros({n}, options).requires_grad_() : torch::Tensor();
    };
    qkv_ = weight(3 * h, h), qkv_b_ = bias(3 * h), out_ = weight(h, h), out_b_ = bias(h);
    up_ = weight(s_.ffn, h), up_b_ = bias(s_.ffn), down_ = weight(h, s_.ffn), down_b_ = bias(h);
    if (s_.cross) q_ = weight(h, h), kv_ = weight(2 * h, h), cross_out_ = weight(h, h);
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory) const {
    auto norm = [&](const torch::Tensor& t) { return torch::layer_norm(t, {s_.hidden}); };
    auto residual = [&](const torch::Tensor& t, const std::function<torch::Tensor(const torch::Tensor&)>& f) {
      return s_.post_norm ? norm(t + f(t)) : t + f(norm(t));
    };
    auto y = residual(x, [&](const torch::Tensor& t) {
      auto qkv = split_heads(F::linear(t, qkv_, qkv_b_), 3);
      return F::linear(merge_heads(attention(qkv[0], qkv[1], qkv[2], s_.causal)), out_, out_b_);
    });
    if (s_.cross)
      y = residual(y, [&](const torch::Tensor& t) {
        auto q = split_heads(F::linear(t, q_), 1)[0];
        auto kv = split_heads(F::linear(memory, kv_), 2);
        return F::linear(merge_heads(attention(q, kv[0], kv[1], false)), cross_out_);
      });
    return residual(y, [&](const torch::Tensor& t) {
      auto up = F::linear(t, up_, up_b_);
      up = s_.activation == "relu" ? torch::relu(up) : torch::gelu(up, "tanh");
      return F::linear(up, down_, down_b_);
    });
  }

  // Matrix-multiply FLOPs of one forward.
  double forward_flops() const {
    const double b = double(s_.batch), s = double(s_.seq), h = double(s_.hidden), f = double(s_.ffn);
    double flops = 2 * b * s * (4 * h * h + 2 * h * f) + 4 * b * s * s * h;
    if (s_.cross) flops += 2 * b * s * 4 * h * h + 4 * b * s * s * h;
    return flops;
  }

 private:
  // [b, s, n*h] -> n tensors [b, heads, s, d]
  std::vector<torch::Tensor> split_heads(const torch::Tensor& t, int64_t n) const {
    const int64_t d = s_.hidden / s_.heads;
    auto parts = t.view({t.size(0), t.size(1), n, s_.heads, d}).permute({2, 0, 3, 1, 4});
    return parts.unbind(0);
  }
  torch::Tensor merge_heads(const torch::Tensor& t) const {
    return t.transpose(1, 2).reshape({t.size(0), t.size(2), s_.hidden});
  }

  LayerShape s_;
  torch::Tensor qkv_, qkv_b_, out_, out_b_, up_, up_b_, down_, down_b_, q_, kv_, cross_out_;
};

// Median milliseconds of `run` over o.iters runs after o.warmup.
double median_ms(const Options& o, const std::function<void()>& run) {
  for (int64_t i = 0; i < o.warmup; ++i) run();
  std::vector<double> times;
  for (int64_t i = 0; i < o.iters; ++i) {
    IntervalTimer timer(o.device);
    timer.start();
    run();
    timer.stop();
    times.push_back(timer.elapsed_ms());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

torch::Dtype storage_type(const std::string& dtype) {
  if (dtype == "fp16") return torch::kHalf;
  if (dtype == "bf16") return torch::kBFloat16;
  return torch::kFloat;  // fp32 and tf32 (the command line admits no other name)
}

// TFLOP/s of every (row, column) that this device and LibTorch can run; absent ones are n/a.
using Table = std::map<std::string, std::map<std::string, double>>;

// The sizes of the two building blocks: an n x n x n multiply and a vector of `elements`.
struct BlockSizes {
  int64_t n, elements;
};
BlockSizes block_sizes(const Options& o) { return {o.quick ? 256 : 8192, o.quick ? 1 << 16 : int64_t(1) << 28}; }

// Median milliseconds of the n x n x n multiply (2 n^3 FLOPs) and of the element-wise vector
// multiply (reads two vectors, writes one) in `options`.
double matmul_ms(const Options& o, const torch::TensorOptions& options, int64_t n) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  return median_ms(o, [&] { (void)torch::mm(a, b); });
}
double vector_multiply_ms(const Options& o, const torch::TensorOptions& options, int64_t elements) {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({elements}, options), y = torch::randn({elements}, options), z = torch::empty_like(x);
  return median_ms(o, [&] { torch::mul_out(z, x, y); });
}

void run_benchmarks(const Options& o, Table& table, std::vector<std::string>& rows) {
  const auto [n, elements] = block_sizes(o);
  const std::string matmul = str("matrix multiply (n ", n, ")");
  const std::string vector = str("vector multiply (", si_units(double(elements)), " elements)");
  rows = {matmul, vector};
  for (const auto& shape : layer_shapes(o.quick)) rows.push_back(shape.name);

  for (const auto& dtype : o.dtypes) {
    if (dtype == "tf32" && !o.device.is_cuda()) continue;
    at::globalContext().setAllowTF32CuBLAS(dtype == "tf32");
    at::globalContext().setAllowTF32CuDNN(dtype == "tf32");
    const auto options = torch::TensorOptions().dtype(storage_type(dtype)).device(o.device);
    auto tflops = [](double flops, double ms) { return flops / ms / 1e9; };
    try {
      table[matmul][dtype + " fwd"] = tflops(2.0 * double(n * n * n), matmul_ms(o, options, n));
      table[vector][dtype + " fwd"] = tflops(double(elements), vector_multiply_ms(o, options, elements));
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "bench: %s %s skipped: %s\n", matmul.c_str(), dtype.c_str(), e.what_without_backtrace());
    }
    for (const auto& shape : layer_shapes(o.quick)) {
      try {
        Layer layer(shape, options);
        auto x = torch::randn({shape.batch, shape.seq, shape.hidden}, options).requires_grad_();
        auto memory = torch::randn({shape.batch, shape.seq, shape.hidden}, options);
        {
          torch::NoGradGuard no_grad;
          table[shape.name][dtype + " fwd"] =
              tflops(layer.forward_flops(), median_ms(o, [&] { (void)layer.forward(x, memory); }));
        }
        auto grad = torch::randn_like(x);
        table[shape.name][dtype + " fwd+bwd"] = tflops(3 * layer.forward_flops(), median_ms(o, [&] {
          layer.forward(x, memory).backward(grad);
        }));
      } catch (const c10::Error& e) {
        std::fprintf(stderr, "bench: %s %s skipped: %s\n", shape.name.c_str(), dtype.c_str(),
                     e.what_without_backtrace());
      }
    }
  }
  at::globalContext().setAllowTF32CuBLAS(false);
}

DeviceProfile measure_profile(const Options& o) {
  const bool gpu = o.device.is_cuda();
  const auto options = torch::TensorOptions().dtype(gpu ? torch::kBFloat16 : torch::kFloat).device(o.device);
  const auto [n, elements] = block_sizes(o);
  const DeviceProfile* known = known_profile(device_name(o.device));
  DeviceProfile p = known ? *known : DeviceProfile{};
  p.name = str(device_name(o.device), gpu ? " (bf16)" : " (fp32)");
  p.matmul_tflops = 2.0 * double(n * n * n) / matmul_ms(o, options, n) / 1e9;
  const double bytes = 3.0 * double(elements) * double(torch::elementSize(torch::typeMetaToScalarType(options.dtype())));
  p.memory_gbs = bytes / vector_multiply_ms(o, options, elements) / 1e6;
  p.memory_efficiency = 1;  // measured, not specified
#if TORCH_VERSION_MAJOR >= 2
  {
    const int64_t b = o.quick ? 1 : 4, heads = o.quick ? 2 : 16, s = o.quick ? 128 : 2048, d = o.quick ? 32 : 128;
    torch::AutoGradMode grad(true);
    auto q = torch::randn({b, heads, s, d}, options).requires_grad_(), k = torch::randn_like(q).requires_grad_(),
         v = torch::randn_like(q).requires_grad_();
    auto grad_out = torch::randn_like(q);
    const double ms = median_ms(o, [&] { at::scaled_dot_product_attention(q, k, v, {}, 0.0, true).backward(grad_out); });
    const double forward_flops = 4.0 * double(b * heads * s * s * d) / 2;  // causal: half the score blocks
    // Backward 2.5 times the forward; the profile holds the long-sequence rate the kernel nears.
    p.attention_tflops = 3.5 * forward_flops / ms / 1e9 / attention_rate_share(double(s), double(d));
  }
#else
  p.attention_tflops = p.matmul_tflops / 2;  // no fused kernel to measure: a stated half of the multiplies
#endif
  // FP8 is not measured: the known device's FP8 rate scaled as its 16-bit one was, or none
  // (the 16-bit rate) on a device the planner does not know.
  p.fp8_matmul_tflops = known ? known->fp8_matmul_tflops * p.matmul_tflops / known->matmul_tflops : p.matmul_tflops;
  p.sms = multiprocessor_count(o.device);
  p.memory_gib = device_memory_gib(o.device);
  if (!gpu) p.tile_m = p.tile_n = p.alignment = 1;  // no tensor-core tiles or waves on the CPU
  const double peak = known_peak_tflops(device_name(o.device), Precision::bf16);
  p.peak_tflops = peak > 0 ? peak : p.matmul_tflops;
  return p;
}

void print_table(const Options& o, const Table& table, const std::vector<std::string>& rows) {
  std::vector<std::string> columns;
  for (const auto& dtype : o.dtypes)
    for (const char* pass : {" fwd", " fwd+bwd"}) columns.push_back(dtype + pass);
  std::printf("TFLOP/s on %s, LibTorch %s, median of %lld runs\n", o.device.str().c_str(),
              TORCH_VERSION, static_cast<long long>(o.iters));
  std::printf("| %-46s |", "benchmark");
  for (const auto& c : columns) std::printf(" %12s |", c.c_str());
  std::printf("\n|%s|", std::string(48, '-').c_str());
  for (size_t i = 0; i < columns.size(); ++i) std::printf("%s|", std::string(14, '-').c_str());
  std::printf("\n");
  for (const auto& row : rows) {
    std::printf("| %-46s |", row.c_str());
    const auto cells = table.count(row) ? table.at(row) : std::map<std::string, double>{};
    for (const auto& c : columns) {
      if (cells.count(c))
        std::printf(" %12.4g |", cells.at(c));
      else
        std::printf(" %12s |", "-");
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    std::string device;
    CLI::App app{"", "bench"};
    if (!parse_command_line(describe(app, o, device), argc, argv)) return 0;
    if (!device.empty()) o.device = torch::Device(device);
    if (o.device.is_cuda() && !torch::cuda::is_available()) fail("--device cuda: no GPU visible");
    if (!o.profile_path.empty()) {
      const std::string yaml = device_profile_yaml(measure_profile(o));
      write_text_file(o.profile_path, yaml);
      std::printf("# device profile written to %s\n%s", o.profile_path.c_str(), yaml.c_str());
      return 0;
    }
    Table table;
    std::vector<std::string> rows;
    run_benchmarks(o, table, rows);
    print_table(o, table, rows);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
