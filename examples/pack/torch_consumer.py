"""A Python library consuming a cutegen pack through its PyTorch op (needs a Hopper GPU and the built
extension; see README.md here):

    python examples/pack/torch_consumer.py out/packs/llm/h200 /path/to/libcutegen_pack_torch.so
"""
# example-test: gpu (needs torch, a Hopper GPU and the built extension; tests/test_readme.py does not run it)
import importlib.util
import os
import sys

import torch


def load_pack(pack_dir, so):
    spec = importlib.util.spec_from_file_location("pack_torch", os.path.join(pack_dir, "torch", "cutegen_pack_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load(so)          # loads the library and registers the fake implementation


class Linear(torch.nn.Module):
    """y = x @ W^T + b through the pack: W^T of a row-major W is the column-major B the pack's class takes."""

    def __init__(self, weight, bias=None):
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x):
        return torch.ops.cutegen.gemm(x, self.weight.t(), self.bias)


if __name__ == "__main__":
    ops = load_pack(sys.argv[1], sys.argv[2])
    w = torch.randn(6144, 4096, device="cuda", dtype=torch.bfloat16)
    layer = Linear(w)
    for m in (1, 16, 1000):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        y = layer(x)
        err = (y.float() - x.float() @ w.float().t()).abs().max() / (x.float() @ w.float().t()).abs().max()
        print(f"M={m}: {ops.explain(x, w.t())}; rel err {err:.2e}")
    compiled = torch.compile(layer, fullgraph=True)   # traced through the fake implementation
    print("torch.compile:", compiled(x).shape)
