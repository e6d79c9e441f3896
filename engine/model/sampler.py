"""Token sampling: greedy, or temperature / top-k / top-p with a generator per request."""

from __future__ import annotations

import random

import torch

from engine.core.sequence import Request


class Sampler:
    """Keeps one torch.Generator per request so seeded sampling is reproducible
    whatever else shares the batch, and whichever instance samples."""

    def __init__(self, device: torch.device, seed: int):
        self.device = device
        self._seeds = random.Random(seed)
        self._generators: dict[str, torch.Generator] = {}

    def _generator(self, req: Request) -> torch.Generator:
        gen = self._generators.get(req.request_id)
        if gen is None:
            seed = req.params.seed if req.params.seed is not None else self._seeds.getrandbits(63)
            gen = torch.Generator(device=self.device).manual_seed(seed)
            self._generators[req.request_id] = gen
        return gen

    def forget(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def sample(self, logits: torch.Tensor, reqs: list[Request]) -> list[int]:
        """logits: [N, vocab] float32, row i for reqs[i] -> one token id per request."""
        for i, req in enumerate(reqs):
            if req.params.logit_bias:
                ids, bias = zip(*req.params.logit_bias)
                logits[i, list(ids)] += torch.tensor(bias, dtype=logits.dtype, device=logits.device)
        tokens = logits.max(dim=-1).indices.tolist()  # NOTE: ~3x faster than argmax on CPU
        for i, req in enumerate(reqs):
            if not req.params.greedy:
                tokens[i] = self._sample_one(logits[i], req)
        return tokens

    def _sample_one(self, logits: torch.Tensor, req: Request) -> int:
        # logits: [vocab]
        p = req.params
        logits = logits / p.temperature
        if p.top_k > 0:
            kth = torch.topk(logits, min(p.top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = probs.sort(descending=True)
            # keep the smallest prefix whose mass reaches top_p (always the top token)
            drop = sorted_probs.cumsum(0) - sorted_probs >= p.top_p
            sorted_probs[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self._generator(req)).item())
