"""The quickstart model (configs/gpt-tiny.yaml) trained in Python PyTorch eager, written the way
a careful PyTorch user would: the peer that scripts/pytorch_compare times trident against.

Same shapes and work per iteration as `train --config configs/gpt-tiny.yaml data.type=synthetic
model.vocab_size=2048`: pre-LayerNorm blocks with a fused QKV projection, causal attention as
trident computes it on the same LibTorch (PyTorch 2.x's fused scaled_dot_product_attention; on
1.x, which has none, matmuls and a masked softmax), tanh GELU, tied embedding head, fp32 cross-entropy,
two micro-batches of 8 x 128 tokens accumulated, gradient clipping at 1.0 and AdamW (foreach)
with weight decay on matrices and embeddings only. Prints one line of JSON: the median
milliseconds of iterations 3..iters and the last loss. --compile runs the model's loss (forward
and backward) through torch.compile (inductor; PyTorch 2.x), its compilation in the first
iterations, which the median leaves out.

  python3 scripts/pytorch_eager_gpt.py --threads 2 [--iters 12] [--compile]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)
        self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

    def attention(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).view(b, s, self.heads, 3, d).permute(3, 0, 2, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        probs = scores.masked_fill(self.future[:s, :s], float("-inf")).softmax(-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, s, h))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.down(F.gelu(self.up(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers) if name.endswith(("out.weight", "down.weight")) else 0.02)
            elif "ln" not in name:
                nn.init.zeros_(p)

    def loss(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1)))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss (PyTorch 2.x)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    model = GPT(args.layers, args.hidden, args.heads, args.seq, args.vocab)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-3, foreach=True)
    loss_of = torch.compile(model.loss) if args.compile else model.loss
    tokens = torch.randint(args.vocab, (args.iters, args.micro_batches, args.micro, args.seq + 1))

    times, loss = [], float("nan")
    for it in range(args.iters):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(args.micro_batches):
            batch = tokens[it, m]
            micro_loss = loss_of(batch[:, :-1], batch[:, 1:]) / args.micro_batches
            micro_loss.backward()
            total += micro_loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss = float(total)
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"threads": torch.get_num_threads(), "compile": args.compile, "median_ms": statistics.median(times[2:]), "loss": loss}))


if __name__ == "__main__":
    main()
