// A program of your own that trains a GPT through trident's Trainer API.
//   train_tiny [section.key=value ...]
#include <cstdio>
#include <string>
#include <vector>

#include <trident/trident.h>

int main(int argc, char** argv) {
  try {
    // Any YAML works here; this one trains on synthetic tokens so it needs no files.
    std::vector<std::string> overrides = {"train.iters=10", "model.num_layers=2"};
    overrides.insert(overrides.end(), argv + 1, argv + argc);
    trident::Config config = trident::Config::parse("data:\n  type: synthetic\n", overrides);

    trident::Trainer trainer(config);
    trident::Hooks hooks;
    hooks.after_step = [](trident::IterationMetrics& m) {
      std::printf("example: iteration %lld loss %.4f\n", static_cast<long long>(m.iteration), m.loss);
    };
    trainer.set_hooks(hooks);
    trainer.train();
    return 0;
  } catch (const trident::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
