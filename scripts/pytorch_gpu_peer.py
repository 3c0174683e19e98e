"""The GPU peer of scripts/gpu_report: the same model, shapes and batch as trident's row, trained
in PyTorch the way a careful PyTorch 2.x user would on one GPU: fp32 weights under bf16
autocast, fused scaled_dot_product_attention (grouped-query attention without copying the key and
value heads), fused AdamW, gradient clipping at 1.0, synthetic tokens. --compile runs the loss
(forward and backward) through torch.compile (inductor), which fuses the element-wise chains;
its compilation happens in the first iterations, which the median leaves out.

Rows (as scripts/gpu_report runs trident):
  gpt1.7b       configs/gpt1.7b.yaml: 24 layers, hidden 2304, 24 heads, seq 2048, vocabulary
                51200, LayerNorm, learned positions, biases, tanh GELU, dropout 0.1, tied head
  llama3-8b-6   configs/llama3-8b.yaml cut to 6 layers: hidden 4096, 32 heads in 8 groups,
                SwiGLU 14336, RMSNorm, RoPE theta 500000, no biases or dropout, untied head,
                vocabulary 128256, seq 8192

Prints one line of JSON: the row, compile or not, the median seconds per iteration after the
first two, tokens/s and the peak allocated memory in GiB.

  python3 scripts/pytorch_gpu_peer.py --row gpt1.7b --micro 8 --global-batch 32 [--compile] [--iters 5]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

ROWS = {
    "gpt1.7b": dict(layers=24, hidden=2304, heads=24, groups=24, ffn=9216, seq=2048, vocab=51200, llama=False,
                    dropout=0.1),
    "llama3-8b-6": dict(layers=6, hidden=4096, heads=32, groups=8, ffn=14336, seq=8192, vocab=128256, llama=True,
                        dropout=0.0, theta=500000.0, eps=1e-5),
}


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


def rotate(x, cos, sin):
    half = x.size(-1) // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class Block(nn.Module):
    def __init__(self, r):
        super().__init__()
        h, self.heads, self.groups, self.llama, self.p = r["hidden"], r["heads"], r["groups"], r["llama"], r["dropout"]
        self.d = h // self.heads
        norm = (lambda: RMSNorm(h, r["eps"])) if self.llama else (lambda: nn.LayerNorm(h))
        bias = not self.llama
        self.ln_1, self.ln_2 = norm(), norm()
        self.qkv = nn.Linear(h, (self.heads + 2 * self.groups) * self.d, bias=bias)
        self.out = nn.Linear(h, h, bias=bias)
        if self.llama:
            self.gate = nn.Linear(h, r["ffn"], bias=False)
        self.up = nn.Linear(h, r["ffn"], bias=bias)
        self.down = nn.Linear(r["ffn"], h, bias=bias)

    def attention(self, x, rope):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.d, self.groups * self.d, self.groups * self.d], -1)
        q = q.view(b, s, self.heads, self.d).transpose(1, 2)
        k = k.view(b, s, self.groups, self.d).transpose(1, 2)
        v = v.view(b, s, self.groups, self.d).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True,
                                           enable_gqa=self.groups != self.heads)
        return self.out(y.transpose(1, 2).reshape(b, s, h))

    def mlp(self, x):
        if self.llama:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))

    def forward(self, x, rope):
        x = x + F.dropout(self.attention(self.ln_1(x), rope), self.p, self.training)
        return x + F.dropout(self.mlp(self.ln_2(x)), self.p, self.training)


class Model(nn.Module):
    def __init__(self, r):
        super().__init__()
        self.r = r
        self.wte = nn.Embedding(r["vocab"], r["hidden"])
        self.wpe = None if r["llama"] else nn.Embedding(r["seq"], r["hidden"])
        self.blocks = nn.ModuleList(Block(r) for _ in range(r["layers"]))
        self.ln_f = RMSNorm(r["hidden"], r["eps"]) if r["llama"] else nn.LayerNorm(r["hidden"])
        self.lm_head = nn.Linear(r["hidden"], r["vocab"], bias=False) if r["llama"] else None
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * r["layers"]) if name.endswith(("out.weight", "down.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        if r["llama"]:
            d = r["hidden"] // r["heads"]
            w = 1.0 / r["theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
            angles = torch.arange(r["seq"], dtype=torch.float32)[:, None] * w
            both = torch.cat((angles, angles), -1)
            self.register_buffer("cos", both.cos(), persistent=False)
            self.register_buffer("sin", both.sin(), persistent=False)

    def loss(self, tokens, targets):
        x = self.wte(tokens)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(tokens.size(1), device=tokens.device))
            x = F.dropout(x, self.r["dropout"], self.training)
        else:
            rope = (self.cos.to(torch.bfloat16), self.sin.to(torch.bfloat16))
        for block in self.blocks:
            x = block(x, rope)
        head = self.lm_head.weight if self.lm_head is not None else self.wte.weight
        logits = F.linear(self.ln_f(x), head)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--row", choices=sorted(ROWS), required=True)
    parser.add_argument("--micro", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    if args.global_batch % args.micro:
        parser.error("--global-batch must be a multiple of --micro")
    r = ROWS[args.row]
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Model(r).cuda().train()
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1.5e-4, betas=(0.9, 0.95), fused=True)
    loss_of = torch.compile(model.loss) if args.compile else model.loss
    micro_batches = args.global_batch // args.micro
    times, loss = [], float("nan")
    for it in range(args.iters):
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device="cuda")
        for _ in range(micro_batches):
            batch = torch.randint(r["vocab"], (args.micro, r["seq"] + 1), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                micro_loss = loss_of(batch[:, :-1], batch[:, 1:]) / micro_batches
            micro_loss.backward()
            total += micro_loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        loss = float(total)  # waits for the GPU
        times.append(time.perf_counter() - start)
        if it == 0:
            torch.cuda.reset_peak_memory_stats()
    seconds = statistics.median(times[2:] if len(times) > 2 else times)
    print(json.dumps({"row": args.row, "compile": args.compile, "micro": args.micro, "global_batch": args.global_batch,
                      "seconds_per_iteration": round(seconds, 4),
                      "tokens_per_s": round(args.global_batch * r["seq"] / seconds, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "loss": round(loss, 4),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
