#include "model/auxiliary_loss.h"

#include <torch/autograd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/text.h"

namespace trident {
namespace {

struct Declared {
  std::mutex mutex;
  std::vector<std::string> names;
};

Declared& declared() {
  static Declared* instance = new Declared();  // never destroyed, as the block registry
  return *instance;
}

// Where `name` stands among the declared names (-1: it is not one), and how many there are;
// looked up without copying them, since every block asks at every micro-batch.
std::pair<int64_t, int64_t> declared_position(const std::string& name) {
  Declared& d = declared();
  std::lock_guard<std::mutex> lock(d.mutex);
  const auto at = std::find(d.names.begin(), d.names.end(), name);
  return {at == d.names.end() ? -1 : int64_t(at - d.names.begin()), int64_t(d.names.size())};
}

// The output unchanged forward; backward, its gradient as it comes and the loss's gradient
// `scale` (d objective / d loss), which autograd takes back through the loss's own graph.
struct AttachLoss : public torch::autograd::Function<AttachLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& output,
                               const torch::Tensor& loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->save_for_backward({loss});
    return output;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor loss = ctx->get_saved_variables()[0];
    return {grads[0], torch::full_like(loss, ctx->saved_data["scale"].toDouble()), torch::Tensor()};
  }
};

}  // namespace

void declare_auxiliary_loss(const std::string& name) {
  const bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_';
  });
  if (!plain)
    fail("declare_auxiliary_loss: the name '", name, "' must be letters, digits and '_' (it names the log's aux/",
         name, " value)");
  Declared& d = declared();
  std::lock_guard<std::mutex> lock(d.mutex);
  if (std::find(d.names.begin(), d.names.end(), name) != d.names.end())
    fail("declare_auxiliary_loss: '", name, "' is declared already");
  d.names.push_back(name);
}

std::vector<std::string> declared_auxiliary_losses() {
  Declared& d = declared();
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.names;
}

torch::Tensor AuxiliaryLosses::add(const torch::Tensor& output, const std::string& name, const torch::Tensor& loss,
                                   double coefficient) {
  const auto [at, declared_count] = declared_position(name);
  if (at < 0) {
    const std::vector<std::string> names = declared_auxiliary_losses();
    fail("auxiliary loss '", name, "' was not declared: call trident::declare_auxiliary_loss(\"", name,
         "\") before building the Trainer (declared: ", names.empty() ? "none" : join(names, ", "), ")");
  }
  if (!loss.defined() || loss.dim() != 0 || !loss.is_floating_point())
    fail("auxiliary loss '", name, "' must be a floating-point scalar, not ",
         loss.defined() ? trident::str(loss.scalar_type(), " of shape ", loss.sizes()) : std::string("an empty tensor"));
  // Without gradients (validation, or the first pass of a block that recompute=full replays in
  // backward) there is nothing to train and nothing to record.
  if (!torch::GradMode::is_enabled()) return output;
  if (!values_.defined() || values_.numel() != declared_count)
    values_ = torch::zeros({declared_count}, loss.options().dtype(torch::kDouble));
  values_[at] += coefficient * loss.detach().to(torch::kDouble);
  return AttachLoss::apply(output, loss, coefficient * backward_scale_);
}

void AuxiliaryLosses::begin_iteration(double backward_scale) {
  backward_scale_ = backward_scale;
  values_ = torch::Tensor();
}

}  // namespace trident
