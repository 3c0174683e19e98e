"""The peer of trident's Mixture-of-Experts path, as a careful PyTorch user writes it: a
Llama-shaped model whose MLPs are SwiGLU experts (configs/moe-tiny.yaml's shape), routed top-k
with the softmax over the chosen k scores, expert parallelism by torch.distributed's
differentiable all_to_all_single over the ranks of the job (torchrun; Gloo on the CPU), the
dense weights' gradients averaged over them in one all-reduce, AdamW (foreach). Prints one JSON
line (rank 0), the same measurements as build/moe_bench and train's metrics:

  --layer: one MoE layer's forward and backward (median ms over --iters after --warmup, the
           slowest rank's), its all-to-all alone (the same rows to uniformly random experts,
           dispatched and combined back, forward and backward) and the bytes a rank sends to
           other ranks in those four exchanges;
  default: whole training iterations of the model on random tokens (global batch 16 of micro
           8, so that each of 2 ranks runs one micro-batch and one rank runs two), median ms.

  torchrun --nproc_per_node 2 scripts/pytorch_moe.py --layer --threads 1 [--compile]
"""

import argparse
import functools
import json
import os
import re
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.nn.functional import all_to_all_single

# Its successor (_functional_collectives.all_to_all_single_autograd) returns tensors to wait on,
# which backward leaves unwaited on Gloo (PyTorch 2.14 aborts at exit): the deprecated one works.
warnings.filterwarnings("ignore", category=FutureWarning, message=".*all_to_all_single is deprecated")


def exchange(rows, receive, send):
    """Rows to the ranks, `send` to each; `receive` from each. Differentiable."""
    return all_to_all_single(rows.new_empty(sum(receive), rows.size(1)), rows, receive, send)


class Experts(nn.Module):
    """A rank's experts [E/ep, ...] and the router over all E; tokens dispatched by all-to-all."""

    def __init__(self, hidden, experts, topk, ffn, ranks, aux_coeff=0.0, z_coeff=0.0):
        super().__init__()
        self.experts, self.topk, self.ranks, self.local = experts, topk, ranks, experts // ranks
        self.aux_coeff, self.z_coeff = aux_coeff, z_coeff
        self.router = nn.Linear(hidden, experts, bias=False)
        nn.init.normal_(self.router.weight, std=0.02)  # as trident draws it (model.init_method_std)
        self.gate = nn.Parameter(torch.randn(self.local, ffn, hidden) * 0.02)
        self.up = nn.Parameter(torch.randn(self.local, ffn, hidden) * 0.02)
        self.down = nn.Parameter(torch.randn(self.local, hidden, ffn) * 0.02)
        self.aux_loss = None

    def dispatch(self, rows, counts):
        """rows sorted by global expert, counts [E] -> (rows grouped by local expert, what
        combine needs)."""
        if self.ranks == 1:
            return rows, (None, None, None, counts.tolist())
        received_counts = torch.empty_like(counts)
        dist.all_to_all_single(received_counts, counts)
        send = counts.view(self.ranks, self.local).sum(1).tolist()
        receive = received_counts.view(self.ranks, self.local).sum(1).tolist()
        arrived = exchange(rows, receive, send)
        expert_of_row = torch.arange(self.local).repeat(self.ranks).repeat_interleave(received_counts)
        regroup = expert_of_row.argsort(stable=True)
        return arrived[regroup], (send, receive, regroup, received_counts.view(self.ranks, self.local).sum(0).tolist())

    def combine(self, outputs, plan):
        send, receive, regroup, _ = plan
        if self.ranks == 1:
            return outputs
        back = outputs[regroup.argsort()]
        return exchange(back, send, receive)

    def forward(self, x):
        shape, h = x.shape, x.size(-1)
        x = x.reshape(-1, h)
        logits = self.router(x).float()
        scores, chosen = logits.topk(self.topk, -1)
        weights = scores.softmax(-1).to(x.dtype)
        flat = chosen.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.experts)
        rows, plan = self.dispatch(x[order // self.topk], counts)
        outputs = [F.linear(F.silu(F.linear(part, self.gate[e])) * F.linear(part, self.up[e]), self.down[e])
                   for e, part in enumerate(rows.split(plan[3]))]
        combined = self.combine(torch.cat(outputs), plan)[order.argsort()].view(-1, self.topk, h)
        if self.training and (self.aux_coeff > 0 or self.z_coeff > 0):
            tokens = x.size(0)
            balance = (logits.softmax(-1).sum(0) * counts.float()).sum() * self.experts / (self.topk * tokens * tokens)
            self.aux_loss = self.aux_coeff * balance + self.z_coeff * logits.logsumexp(-1).square().mean()
        return (combined * weights.unsqueeze(-1)).sum(1).view(shape)


@functools.lru_cache(maxsize=None)
def rope_tables(s, d, theta=10000.0):
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    return torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)


def rope(x):
    """Rotary embedding of [b, heads, s, d] by halves (rotate_half), the tables made once."""
    cos, sin = rope_tables(x.size(-2), x.size(-1))
    first, second = x.chunk(2, -1)
    return x * cos + torch.cat([-second, first], -1) * sin


class Block(nn.Module):
    def __init__(self, args, ranks):
        super().__init__()
        self.heads, self.groups = args.heads, args.groups
        d = args.hidden // args.heads
        self.norm1, self.norm2 = nn.RMSNorm(args.hidden, eps=1e-5), nn.RMSNorm(args.hidden, eps=1e-5)
        self.qkv = nn.Linear(args.hidden, (args.heads + 2 * args.groups) * d, bias=False)
        self.out = nn.Linear(args.hidden, args.hidden, bias=False)
        self.moe = Experts(args.hidden, args.experts, args.topk, args.ffn, ranks, 0.01, 0.001)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(self.norm1(x)).split([self.heads * d, self.groups * d, self.groups * d], -1)
        q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
        attention = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=True)
        x = x + self.out(attention.transpose(1, 2).reshape(b, s, h))
        return x + self.moe(self.norm2(x))


class Model(nn.Module):
    def __init__(self, args, ranks):
        super().__init__()
        self.embedding = nn.Embedding(args.vocab, args.hidden)
        self.blocks = nn.ModuleList(Block(args, ranks) for _ in range(args.layers))
        self.norm = nn.RMSNorm(args.hidden, eps=1e-5)
        self.head = nn.Linear(args.hidden, args.vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        loss = F.cross_entropy(self.head(self.norm(x)).flatten(0, 1), targets.flatten())
        return loss + sum(block.moe.aux_loss for block in self.blocks)


def median_ms(step, iters, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        if dist.is_initialized():
            dist.barrier()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    median = torch.tensor(sorted(times)[len(times) // 2], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(median, dist.ReduceOp.MAX)
    return median.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layer", action="store_true", help="one MoE layer and its all-to-all, not the model")
    parser.add_argument("--compile", action="store_true", help="torch.compile the layer or the model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1024, help="--layer: tokens per rank")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--ffn", type=int, default=96)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    if ranks > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if ranks > 1 else 0
    torch.manual_seed(1234 + rank)
    result = {"ep": ranks, "torch": torch.__version__, "compile": args.compile}
    if args.layer:
        layer = Experts(args.hidden, args.experts, args.topk, args.ffn, ranks)
        run = torch.compile(layer) if args.compile else layer
        x = torch.randn(1, args.tokens, args.hidden, requires_grad=True)
        grad = torch.randn_like(x)

        def layer_step():
            layer.zero_grad(set_to_none=True)
            run(x).backward(grad)

        result["layer_ms"] = median_ms(layer_step, args.iters, args.warmup)
        rows = args.tokens * args.topk
        values = torch.randn(rows, args.hidden)
        sent_elsewhere = [0]

        def exchange_step():
            experts = torch.randint(args.experts, (rows,)).sort().values
            counts = torch.bincount(experts, minlength=args.experts)
            sent = values.detach().requires_grad_()
            arrived, plan = layer.dispatch(sent, counts)
            layer.combine(arrived, plan).backward(values)
            sent_elsewhere[0] = rows - counts.view(ranks, -1)[rank].sum().item()

        result["all_to_all_ms"] = median_ms(exchange_step, args.iters, args.warmup)
        sent = torch.tensor(4.0 * sent_elsewhere[0] * args.hidden * 4, dtype=torch.float64)
        if ranks > 1:
            dist.all_reduce(sent)
        result["all_to_all_mb"] = sent.item() / ranks / 1e6
    else:
        model = Model(args, ranks)
        run = torch.compile(model) if args.compile else model
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
        experts = {name for name, _ in model.named_parameters() if re.search(r"\.moe\.(gate|up|down)$", name)}
        dense = [p for name, p in model.named_parameters() if name not in experts]
        own = [p for name, p in model.named_parameters() if name in experts]
        micro_batches = args.global_batch // (args.micro * ranks)

        def training_step():
            optimizer.zero_grad(set_to_none=True)
            for _ in range(micro_batches):
                tokens = torch.randint(args.vocab, (args.micro, args.seq + 1))
                (run(tokens[:, :-1], tokens[:, 1:]) / micro_batches).backward()
            # As trident finishes them: the dense gradients averaged over the ranks, each rank's
            # experts' divided by the ranks (their tokens came from all of them), one global norm.
            own_square = sum(p.grad.square().sum() for p in own)
            if ranks > 1:
                flat = torch.cat([p.grad.flatten() for p in dense])
                dist.all_reduce(flat)
                flat /= ranks
                offset = 0
                for p in dense:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
                for p in own:
                    p.grad /= ranks
                own_square = own_square / ranks**2
                dist.all_reduce(own_square)
            norm = (sum(p.grad.square().sum() for p in dense) + own_square).sqrt()
            torch._foreach_mul_([p.grad for p in model.parameters()], torch.clamp(1.0 / (norm + 1e-6), max=1.0))
            optimizer.step()

        result["iteration_ms"] = median_ms(training_step, args.iters, args.warmup)
    if rank == 0:
        print(json.dumps(result), flush=True)
    if ranks > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
