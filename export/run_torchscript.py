"""Run a TorchScript policy exported by offrl (``algo.save_policy("policy.pt")``)
with torch only (no offrl):

    python run_torchscript.py policy.pt 0.1,0.2,0.3
"""

import sys

import torch

policy = torch.jit.load(sys.argv[1])
observation = torch.tensor([[float(v) for v in sys.argv[2].split(",")]])
with torch.no_grad():
    print(policy(observation)[0].tolist())
