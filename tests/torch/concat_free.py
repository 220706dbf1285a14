"""A concatenation kept while its inputs are freed: under a budget, with no plan (one pass, no
iteration to find), the online policy drops the concatenation (the stalest tensor, and a replay
rebuilds it more cheaply than a swap), then the program frees its inputs, then reads it. The
drop must be rebuilt before its first input goes, or its contents are lost.

    marmoset run --sim --memory-limit 80M -- .venv/bin/python tests/torch/concat_free.py

Shape mode is enough: Marmoset says when contents are lost. Prints `done` at the end.
"""
import torch

MIB = 1 << 20


def tensor(mib):
    return torch.randn(mib * MIB // 4, device="cuda")


parts = [tensor(8) for _ in range(4)]
cat = torch.cat(parts)
# The inputs read again after it: the concatenation is the stalest tensor.
sums = [p.sum() for p in parts]
# Room wanted while the inputs live: the concatenation goes.
fill = [tensor(8) for _ in range(3)]
sums += [f.sum() for f in fill]
del parts
total = cat.sum() + sum(sums)
torch.cuda.synchronize()
print("done", flush=True)
